"""The derived index (brokerd/timer/index.py): placement, reads in queue order, the floor, snapshots."""

from __future__ import annotations

from pathlib import Path

from brokerd.timer.index import TimerIndex

P = 100


def index(tmp: Path, window: int = 1000) -> TimerIndex:
    idx = TimerIndex(tmp, P, window)
    assert not idx.load()
    idx.fresh(0, 10_000, -1)
    return idx


def test_entries_come_back_by_granule_oldest_first(tmp_path: Path) -> None:
    idx = index(tmp_path)
    for q, due in enumerate((1_000_050, 1_000_010, 1_000_199, 1_000_060)):
        idx.add(q, 1000 + q, 50, due)
    assert [e.qoff for e in idx.read(10_000)] == [0, 1, 3]
    assert [e.qoff for e in idx.read(10_001)] == [2] and idx.next_q == 4 and idx.last_phys == 1003


def test_late_and_far_timers_are_placed_at_the_floor_and_the_windows_end(tmp_path: Path) -> None:
    idx = index(tmp_path, window=100)
    assert idx.add(0, 0, 1, 5) == 10_000  # due long ago: the floor
    assert idx.add(1, 0, 1, 10**12) == 10_099  # far ahead: a roll at the window's last granule
    assert [e.due for e in idx.read(10_099)] == [10**12]


def test_a_slave_floor_carries_what_is_not_resolved_a_master_floor_does_not(tmp_path: Path) -> None:
    idx = index(tmp_path)
    for q in range(6):
        idx.add(q, q, 1, (10_000 + q) * P)
    carried = idx.advance(10_004, lambda q: q % 2 == 0)  # the markers resolved 1 and 3
    assert carried == 2 and [e.qoff for e in idx.read(10_004)] == [0, 2, 4]
    assert idx.advance(10_005, None) == 0 and idx.floor_g == 10_005


def test_a_snapshot_loads_back_and_the_timer_log_is_cut_to_it(tmp_path: Path) -> None:
    idx = index(tmp_path)
    for q in range(10):
        idx.add(q, 100 + q, 1, (10_000 + q % 3) * P)
    parts, targets = idx.snapshot()
    idx.write_snapshot(parts, targets)
    for q in range(10, 15):  # after the snapshot: lost with a crash, added again from next_q
        idx.add(q, 100 + q, 1, 10_000 * P)
    idx.tlog.flush()
    idx.close()
    again = TimerIndex(tmp_path, P, 1000)
    assert again.load() and again.next_q == 10 and again.last_phys == 109
    assert [e.qoff for e in again.read(10_000)] == [0, 3, 6, 9]
    assert TimerIndex(tmp_path, 200, 1000).load() is False  # another precision: rebuilt
