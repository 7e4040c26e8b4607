"""Wheel arithmetic and chains (brokerd/timer/wheel.py)."""

from __future__ import annotations

import pytest

from brokerd.timer.wheel import EMPTY, Wheel, granule, place, slots_for


def test_placement_due_late_and_rolled() -> None:
    assert granule(12_345, 100) == 123
    assert place(150, 100, 1000) == 150  # inside the window: its own granule
    assert place(40, 100, 1000) == 100  # due already: the floor
    assert place(5000, 100, 1000) == 1099  # beyond the window: its last granule (a roll)
    assert place(1099, 100, 1000) == 1099 and place(1100, 100, 1000) == 1099


def test_chains_link_newest_first_and_release_starts_the_slot_over() -> None:
    w = Wheel(slots_for(10))
    assert w.chain(5) == EMPTY and w.count(5) == 0 and w.release(5) == EMPTY  # nothing allocated yet
    assert w.link(5, 0, 0) == EMPTY
    assert w.link(5, 48, 0) == 0
    assert w.link(6, 96, 0) == EMPTY
    assert (w.chain(5), w.count(5), w.chain(6), w.count(6)) == (48, 2, 96, 1)
    assert list(w.held_between(0, 100)) == [5, 6]
    assert sorted(w.counts_from(6)) == [(6, 1)]
    assert w.release(5) == 48 and w.chain(5) == EMPTY and list(w.held_between(0, 100)) == [6]


def test_a_slot_below_the_floor_is_released_when_its_next_turn_links() -> None:
    n = slots_for(10)
    w = Wheel(n)
    w.link(3, 0, 0)
    assert w.link(3 + n, 48, 3 + n - 10) == EMPTY  # granule 3 is below the floor: the slot starts over
    assert w.chain(3) == EMPTY and (w.chain(3 + n), w.count(3 + n)) == (48, 1)


def test_snapshot_bytes_round_trip() -> None:
    w = Wheel(100)
    for i in range(30):
        w.link(i * 7, i * 48, 0)
    back = Wheel.from_bytes(w.to_bytes(), 100)
    assert [back.chain(i * 7) for i in range(30)] == [w.chain(i * 7) for i in range(30)]
    assert list(back.counts_from(0)) == list(w.counts_from(0))
    with pytest.raises(ValueError):
        Wheel.from_bytes(w.to_bytes(), 99)
