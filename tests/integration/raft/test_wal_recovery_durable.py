"""A reopened WAL makes what it recovered durable before the node can acknowledge it.

Regression for simulator seed 1492: records written without fsync (or by the write a crash interrupted)
can survive a process crash in the page cache only. The restarted node treats every recovered entry as
stable and acknowledges it to the leader; if a later power loss dropped it, a leader's heartbeat commit
(min(match, commit)) would commit whatever older entry the node had at that index.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.raft.storage import entries_record, hard_state_record
from controller.raft.types import Entry, EntryKind, HardState
from controller.raft.wal import WriteAheadLog


def test_open_fsyncs_records_that_were_written_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.open()
    wal.append([hard_state_record(HardState(11, "", 0))], sync=True)
    wal.append([entries_record([Entry(1, 11, EntryKind.NOOP)])], sync=False)  # page cache only
    wal.close()  # the process dies here
    seg = sorted(tmp_path.glob("wal-*.log"))[-1]

    synced: list[int] = []  # inodes fsynced (fdatasync counts too)
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def spy(real: Callable[[int], None]) -> Callable[[int], None]:
        def call(fd: int) -> None:
            synced.append(os.fstat(fd).st_ino)
            real(fd)

        return call

    monkeypatch.setattr(os, "fsync", spy(real_fsync))
    monkeypatch.setattr(os, "fdatasync", spy(real_fdatasync))
    reopened = WriteAheadLog(tmp_path)
    st = reopened.open()
    reopened.close()
    assert [(e.index, e.term) for e in st.entries] == [(1, 11)]
    assert seg.stat().st_ino in synced, "recovered records must be fsynced before the node acknowledges them"


def test_open_without_fsync_configured_does_not_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = WriteAheadLog(tmp_path, fsync=False)
    wal.open()
    wal.append([hard_state_record(HardState(1, "n1", 0))], sync=False)
    wal.close()
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    st = WriteAheadLog(tmp_path, fsync=False).open()
    assert st.hard_state == HardState(1, "n1", 0)
    assert calls == []
