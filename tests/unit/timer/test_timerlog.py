"""The timer log's files (brokerd/timer/timerlog.py): buffered appends, reads, cut back, segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerd.timer.timerlog import ENTRIES_PER_FILE, ENTRY_SIZE, FILE_SIZE, TimerLog


def test_entries_read_back_before_and_after_the_flush_and_across_segments(tmp_path: Path) -> None:
    tl = TimerLog(tmp_path / "tl")
    tl.reset()
    n = ENTRIES_PER_FILE + 100
    for i in range(n):
        assert tl.append(i - 1, 1000 + i, i, 10 * i, 7, 99) == i * ENTRY_SIZE
    for i in (0, 5, ENTRIES_PER_FILE - 1, ENTRIES_PER_FILE, n - 1):
        e = tl.read(i * ENTRY_SIZE)
        assert (e.prev, e.due, e.qoff, e.phys, e.place, e.size) == (i - 1, 1000 + i, i, 10 * i, 7, 99)
    tl.flush()
    assert len(list((tmp_path / "tl").iterdir())) == 2
    assert tl.read((n - 1) * ENTRY_SIZE).qoff == n - 1
    with pytest.raises(ValueError):
        tl.read(n * ENTRY_SIZE)
    tl.close()


def test_open_cuts_back_to_the_snapshot_end_and_drop_below_deletes_whole_segments(tmp_path: Path) -> None:
    tl = TimerLog(tmp_path / "tl")
    tl.reset()
    for i in range(ENTRIES_PER_FILE + 10):
        tl.append(-1, i, i, i, i, 1)
    tl.flush()
    tl.close()
    again = TimerLog(tmp_path / "tl")
    again.open(5 * ENTRY_SIZE)  # a snapshot taken after 5 entries
    assert again.end == 5 * ENTRY_SIZE and len(list((tmp_path / "tl").iterdir())) == 1
    assert again.append(-1, 77, 77, 77, 77, 1) == 5 * ENTRY_SIZE and again.read(5 * ENTRY_SIZE).due == 77
    for i in range(ENTRIES_PER_FILE):
        again.append(-1, i, i, i, i, 1)
    again.flush()
    assert again.drop_below(FILE_SIZE) == 1 and again.first == FILE_SIZE
    again.close()
    with pytest.raises(ValueError):  # the snapshot's last segment is gone
        TimerLog(tmp_path / "tl").open(3 * ENTRY_SIZE)
