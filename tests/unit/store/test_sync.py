"""Flushing: one flush's files and directories are synced with the GIL released once (sync_all / sync_close)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from brokerd.native import native
from brokerd.store import mapped_file
from brokerd.store.mapped_file import MappedFile, sync_all


def test_sync_all_skips_closed_files_and_missing_queue_dirs_but_not_a_missing_log_dir(tmp_path: Path) -> None:
    live = MappedFile.create(tmp_path, 0, 4096)
    closed = MappedFile.create(tmp_path, 4096, 4096)
    closed.close()
    live.write_at(0, b"durable")
    try:
        sync_all([tmp_path, tmp_path / "deleted-queue-dir"], [live, closed], missing_dirs_ok=True)
        with pytest.raises(FileNotFoundError):
            sync_all([tmp_path / "missing-log-dir"], [live])
    finally:
        live.close()
    assert (tmp_path / "00000000000000000000").read_bytes()[:7] == b"durable"


@pytest.mark.parametrize("impl", ["python", "c"])
def test_sync_close_reports_the_first_failure_and_closes_every_descriptor(impl: str) -> None:
    """A descriptor that cannot be synced (a pipe: EINVAL) is reported; every descriptor is closed either way."""
    if impl == "c" and native is None:
        pytest.skip("brokerd._native is not built")
    sync_close = native.sync_close if impl == "c" else mapped_file._sync_close_py
    r, w = os.pipe()
    fd = os.open(os.devnull, os.O_RDONLY)
    assert sync_close([], [fd, r, w]) == errno.EINVAL
    for closed in (fd, r, w):
        with pytest.raises(OSError):
            os.fstat(closed)
