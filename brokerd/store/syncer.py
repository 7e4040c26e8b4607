"""fsyncs off the event loop thread, each finished one handed to a callback on the loop.

With the C module, ``brokerd._native.Syncer``: POSIX threads that never take the GIL sync the descriptors and
announce each finished job on an eventfd the loop watches; the callback runs in the loop iteration that sees it.
The reference (pure Python) is a thread pool whose threads call back through ``call_soon_threadsafe``; it costs
GIL hand-offs with the loop thread (up to the switch interval each while the loop is busy), which is why the C
one exists: a SYNC_FLUSH group commit's round trip is the fsync's, not the loop's.

One ``Syncer`` per event loop and kind, shared by the stores on that loop (``acquire`` / ``release``): a
container of many brokers does not grow threads per broker.
"""

from __future__ import annotations

import asyncio
import errno
import os
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from brokerd.native import native

log = structlog.get_logger(component="store.syncer")

Done = Callable[[int], None]  # errno of the first failure, 0 when every descriptor was synced


def sync_close(dir_fds: list[int], file_fds: list[int]) -> int:
    """Sync (directories: fsync, files: fdatasync) and close every descriptor; the first errno or 0."""
    err = 0
    for fd, sync in [(fd, os.fsync) for fd in dir_fds] + [(fd, os.fdatasync) for fd in file_fds]:
        try:
            sync(fd)
        except OSError as exc:
            err = err or exc.errno or errno.EIO
        finally:
            os.close(fd)
    return err


class Syncer:
    """Sync jobs on ``threads`` threads; ``done(errno)`` runs on ``loop`` once a job finished."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, kind: str = "") -> None:
        self.loop = loop
        self.kind = kind
        self.users = 0
        self._done: dict[int, Done] = {}
        self._native = native.Syncer(threads) if native is not None else None
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="store-sync") if self._native is None else None
        if self._native is not None:
            loop.add_reader(self._native.fileno(), self._finished)

    def submit(self, dir_fds: list[int], file_fds: list[int], done: Done) -> None:
        """Sync and close the descriptors (they belong to the syncer from here on), then ``done(errno)``."""
        if self._native is not None:
            self._done[self._native.submit(dir_fds, file_fds)] = done
            return
        assert self._pool is not None
        fut = self._pool.submit(sync_close, dir_fds, file_fds)
        loop = self.loop

        def back(f: Future[int]) -> None:  # on the pool's thread
            exc = f.exception()
            err = (getattr(exc, "errno", None) or errno.EIO) if exc is not None else f.result()
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._call, done, err)

        fut.add_done_callback(back)

    def poll(self) -> None:
        """Run the callbacks of the jobs finished so far now, rather than when the loop next polls the eventfd
        (no syscall when none finished). A busy loop calls this after each read it handles: a SYNC_FLUSH group
        commit's completion then waits for one read's handling, not for the rest of the loop's iteration."""
        if self._native is not None and self._native.ready():
            self._finished()

    def _finished(self) -> None:
        assert self._native is not None
        for token, err in self._native.take():
            done = self._done.pop(token, None)
            if done is not None:
                self._call(done, err)

    @staticmethod
    def _call(done: Done, err: int) -> None:
        try:
            done(err)
        except Exception:  # noqa: BLE001 - one store's callback must not stop the others' jobs
            log.exception("sync_callback_failed")

    def close(self) -> None:
        """Finish the submitted jobs (their callbacks are dropped) and stop the threads."""
        if self._native is not None:
            if not self.loop.is_closed():
                self.loop.remove_reader(self._native.fileno())
            self._native.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._done.clear()


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Syncer]] = weakref.WeakKeyDictionary()


def poller() -> Callable[[], None]:
    """``Syncer.poll`` for every syncer of the running loop, as a function to call on that loop's thread (it does not
    look the loop up per call: on Python 3.11 ``get_running_loop`` is a getpid() syscall)."""
    kinds = _shared.setdefault(asyncio.get_running_loop(), {})

    def poll() -> None:
        for s in tuple(kinds.values()):  # a callback may release or acquire one
            s.poll()

    return poll


def acquire(kind: str, threads: int) -> Syncer:
    """The running loop's syncer of ``kind`` (created with ``threads`` threads for its first user)."""
    loop = asyncio.get_running_loop()
    kinds = _shared.setdefault(loop, {})
    s = kinds.get(kind)
    if s is None:
        s = kinds[kind] = Syncer(loop, threads, kind)
    s.users += 1
    return s


def release(s: Syncer) -> None:
    """A user is done with ``s``; the last one closes it."""
    s.users -= 1
    if s.users > 0:
        return
    kinds = _shared.get(s.loop)
    if kinds is not None and kinds.get(s.kind) is s:
        del kinds[s.kind]
    s.close()
