"""The resolved set against a plain Python set, with snapshots in between (brokerd/timer/fired.py)."""

from __future__ import annotations

import random

import pytest

from brokerd.timer.fired import CHUNK, FiredSet


@pytest.mark.parametrize("seed", range(4))
def test_matches_a_reference_set(seed: int) -> None:
    r = random.Random(seed)
    fs = FiredSet(r.randrange(0, 3 * CHUNK))
    ref = set(range(fs.base))
    n = 6 * CHUNK
    for _ in range(8000):
        q = r.randrange(0, n)
        if r.random() < 0.98:
            assert fs.mark(q) == (q not in ref)
            ref.add(q)
        else:
            fs.mark_below(q)
            ref |= set(range(q))
        if r.random() < 0.005:
            fs = FiredSet.decode(fs.encode())
    assert [q for q in range(n) if fs.is_set(q)] == sorted(q for q in ref if q < n)
    assert fs.pending(n) == n - len([q for q in ref if q < n])
    assert fs.first_unresolved(0, n) == next((q for q in range(n) if q not in ref), n)


def test_full_chunks_move_the_base_and_cost_nothing() -> None:
    fs = FiredSet()
    for q in range(3 * CHUNK + 5):
        fs.mark(q)
    assert fs.base == 3 * CHUNK and fs.pending(3 * CHUNK + 5) == 0
    assert len(fs.encode()) < 200
