"""Flushing: one flush's files and directories are synced with the GIL released once (sync_all / sync_close), and
off the loop by the shared syncer (C threads without the GIL, or the Python thread pool it mirrors), each job's
outcome handed to its callback on the loop."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from brokerd.native import native
from brokerd.store import syncer
from brokerd.store.mapped_file import MappedFile, sync_all
from brokerd.store.results import PutStatus

from .conftest import make_msg


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
    sync_close = native.sync_close if impl == "c" else syncer.sync_close
    r, w = os.pipe()
    fd = os.open(os.devnull, os.O_RDONLY)
    assert sync_close([], [fd, r, w]) == errno.EINVAL
    for closed in (fd, r, w):
        with pytest.raises(OSError):
            os.fstat(closed)


@pytest.fixture(params=["python", "c"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c" and native is None:
        pytest.skip("brokerd._native is not built")
    if request.param == "python":
        monkeypatch.setattr(syncer, "native", None)
    return str(request.param)


async def test_syncer_reports_each_job_on_the_loop_and_closes_its_descriptors(tmp_path: Path, impl: str) -> None:
    s = syncer.acquire("test", 2)
    try:
        assert (s._native is not None) == (impl == "c")
        f = tmp_path / "data"
        f.write_bytes(b"x" * 100)
        loop = asyncio.get_running_loop()
        results: dict[str, asyncio.Future[int]] = {k: loop.create_future() for k in ("ok", "bad", "dir")}
        fds = {k: os.open(f, os.O_RDONLY) for k in ("ok", "bad")}
        r, w = os.pipe()  # a pipe cannot be synced: EINVAL
        dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        s.submit([], [fds["ok"]], results["ok"].set_result)
        s.submit([], [fds["bad"], r, w], results["bad"].set_result)
        s.submit([dfd], [], results["dir"].set_result)
        assert await asyncio.wait_for(results["ok"], 10) == 0
        assert await asyncio.wait_for(results["bad"], 10) == errno.EINVAL
        assert await asyncio.wait_for(results["dir"], 10) == 0
        for fd in (*fds.values(), r, w, dfd):
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        syncer.release(s)


async def test_a_finished_job_is_reported_by_a_poll_between_reads_without_the_loop_turning(tmp_path: Path) -> None:
    """A busy loop polls its syncers after each read (``poller()``, no syscall unless a job finished): the flush's
    callback runs there, not only when the loop gets back to the eventfd."""
    if native is None:
        pytest.skip("brokerd._native is not built")
    s = syncer.acquire("poll", 1)
    try:
        poll = syncer.poller()
        poll()  # nothing finished: nothing happens
        done: list[int] = []
        f = tmp_path / "data"
        f.write_bytes(b"x")
        s.submit([], [os.open(f, os.O_RDONLY)], done.append)
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:  # the loop never runs in here: only the polls can report
            poll()
            time.sleep(0.0005)  # sleep-ok: polling with a deadline, the loop deliberately not run
        assert done == [0]
        poll()
        assert done == [0]  # reported once
    finally:
        syncer.release(s)


async def test_syncers_are_shared_per_loop_until_the_last_user_releases(impl: str) -> None:
    a, b = syncer.acquire("shared", 1), syncer.acquire("shared", 1)
    assert a is b and a.users == 2
    syncer.release(a)
    c = syncer.acquire("shared", 1)
    assert c is a
    syncer.release(a)
    syncer.release(c)
    d = syncer.acquire("shared", 1)  # the last user closed the old one
    try:
        assert d is not a
    finally:
        syncer.release(d)


async def test_a_put_that_does_not_wait_is_flushed_even_when_it_came_during_a_flush(make_store: Any) -> None:
    """SYNC_FLUSH, WAIT=false: answered at once, and made durable by a flush soon after (also when it arrived
    while the flush before was in progress and nothing else follows it)."""
    store = await make_store(flush_disk_type="SYNC_FLUSH")
    first = await store.put_message(make_msg(body=b"a"))  # waits for its flush
    assert first.status is PutStatus.PUT_OK
    late = [store.put_message_nowait(make_msg(body=b"b", props={"WAIT": "false"})) for _ in range(3)]
    end = max(r.wrote_offset + r.wrote_bytes for r in late if r is not None)
    deadline = asyncio.get_running_loop().time() + 10
    while store.flushed_offset < end and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)  # sleep-ok: polling the flushed offset with a deadline
    assert store.flushed_offset >= end
