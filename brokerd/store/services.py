"""Background services of a started store: commit-log flush (periodic, or group commit for SYNC_FLUSH),
sync-flush timeouts, logics flush + checkpoint, and the periodic clean.

Concurrency contract: everything here runs on the store's event loop. A commit-log flush's fsyncs run on the
loop's shared ``syncer.Syncer`` (threads that never take the GIL with the C module) and its completion is a
callback on the loop that releases the waiting puts directly (their callbacks run in the same loop iteration),
then starts the next flush at once when puts wait beyond it (group commit): a SYNC_FLUSH put waits for at most
the flush in progress and its own. One commit-log flush per store is in flight at a time. The logics flush
(consume queues / index / checkpoint) runs in a single shared worker thread, so logics flushes never overlap
and a container of many brokers does not grow threads per broker.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from brokerd import durability
from brokerd.store import syncer
from brokerd.store.checkpoint import Checkpoint, save_checkpoint
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.mapped_file import SyncJob, sync_all
from brokerd.store.protocols import ServicedStore

log = structlog.get_logger(component="store.services")


_logics: list[ThreadPoolExecutor] = []


def logics_executor() -> ThreadPoolExecutor:
    """The one thread every store's logics flushes run on."""
    if not _logics:
        _logics.append(ThreadPoolExecutor(1, thread_name_prefix="store-logics"))
    return _logics[0]


CHECKPOINT_INTERVAL_S = 60.0


def _resolve(futs: list[asyncio.Future[None]]) -> None:
    for f in futs:
        if not f.done():
            f.set_result(None)


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    save_checkpoint(path, checkpoint)
    if durability.ENABLED:  # durable now (fsynced, renamed, directory fsynced): keep its content for the harness
        durability.content_synced(path)


Flushed = Callable[[bool], None]  # True: durable up to the requested offset; False: timed out / stopped


class StoreServices:
    def __init__(self, store: ServicedStore) -> None:
        self._store = store
        self._cfg = store.cfg
        self._waiters: deque[tuple[int, Flushed, float]] = deque()  # end offsets in append order
        self._tasks: list[asyncio.Task[None]] = []
        self.syncer: syncer.Syncer | None = None
        self.logics_executor = logics_executor()
        self._flushing = False  # a commit-log flush is in flight
        self._again = False  # something asked for a flush while one was in flight: another follows it
        self._next_round: list[asyncio.Future[None]] = []  # awaiting a flush that starts after they asked
        self._timeout_s = self._cfg.sync_flush_timeout_ms / 1000
        self.flush_count = 0
        self._last_checkpoint: Checkpoint | None = None
        self._checkpoint_at = float("-inf")

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.syncer = syncer.acquire("flush", 2)
        loops = [self._logics_loop, self._clean_loop]
        loops.append(self._timeout_loop if self._cfg.sync_flush else self._periodic_flush_loop)
        self._tasks = [asyncio.create_task(self._keep_running(loop)) for loop in loops]

    async def _keep_running(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a service loop; an unexpected error is logged and the loop restarts (never dies silently)."""
        while True:
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep the service alive
                log.exception("store_service_failed", service=getattr(loop, "__name__", "?"))
                await asyncio.sleep(0.1)

    async def _cancel_tasks(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def stop(self) -> None:
        await self._cancel_tasks()
        await self.flush_commit_log()
        self._release(self._store.flushed_offset)
        while self._waiters:
            self._call(self._waiters.popleft()[1], False)
        await self.flush_logics(clean=self._store.running_flags.writeable)
        self._detach()

    async def abandon(self) -> None:
        """Stop as a killed process would: no flush, no checkpoint; a flush in flight is never reported."""
        await self._cancel_tasks()
        self._detach()
        await asyncio.get_running_loop().run_in_executor(self.logics_executor, lambda: None)  # its job is done

    def _detach(self) -> None:
        if self.syncer is not None:
            syncer.release(self.syncer)
            self.syncer = None

    # ------------------------------------------------------------ commit log flush

    def when_flushed(self, end: int, done: Flushed) -> None:
        """``done(True)`` once the log is durable up to ``end`` (called from the flush's completion), ``done(False)``
        after the sync-flush timeout or when the store stops."""
        self._waiters.append((end, done, time.monotonic() + self._timeout_s))
        self._kick()

    def wait_flushed(self, end: int) -> asyncio.Future[bool]:
        """``when_flushed`` as a future."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.when_flushed(end, lambda ok: None if fut.done() else fut.set_result(ok))
        return fut

    def wakeup(self) -> None:
        """Flush soon (a put that does not wait for it)."""
        self._kick()

    async def flush_commit_log(self) -> None:
        """Return once a flush that started after this call finished (the log durable up to where it was then,
        unless the flush failed: the store's error flag says so)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._next_round.append(fut)
        self._kick()
        await fut

    def _kick(self, durable: int = 0) -> None:
        """Start a flush of everything appended so far, unless one is in flight (its completion kicks again);
        ``durable``: the log is known durable up to there (a flush just completed, not yet reported)."""
        if self._flushing:
            self._again = True
            return
        self._again = False
        store = self._store
        target, flushed = store.max_phy_offset, max(store.flushed_offset, durable)
        round_, self._next_round = self._next_round, []
        if target <= flushed or self.syncer is None:
            _resolve(round_)
            return
        gen = store.truncate_generation
        try:
            job = store.commit_log.sync_job(store.commit_log.files_between(flushed, target))
        except OSError as exc:
            store.io_failed("flush_commit_log", exc)
            _resolve(round_)
            return
        self._flushing = True
        self.syncer.submit(job.dir_fds, job.file_fds, lambda err: self._flushed(job, err, target, gen, round_))

    def _flushed(self, job: SyncJob, err: int, target: int, gen: int, round_: list[asyncio.Future[None]]) -> None:
        self._flushing = False
        if self.syncer is None:  # abandoned (a simulated kill): nothing is reported
            return
        store = self._store
        if err:
            store.io_failed("flush_commit_log", OSError(err, f"sync failed: {os.strerror(err)}"))
            _resolve(round_)
            return
        job.synced()
        self.flush_count += 1
        if self._again or self._next_round:
            self._kick(target)  # group commit: what arrived meanwhile goes in the next flush, before the answers
        store.on_flushed(target, gen)
        self._release(store.flushed_offset)
        _resolve(round_)

    def _release(self, flushed: int) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= flushed:
            self._call(waiters.popleft()[1], True)

    @staticmethod
    def _call(done: Flushed, ok: bool) -> None:
        try:
            done(ok)
        except Exception:  # noqa: BLE001 - one waiter's failure must not keep the others waiting
            log.exception("flush_waiter_failed")

    async def _timeout_loop(self) -> None:
        period = min(self._timeout_s / 4, 0.25)
        waiters = self._waiters
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            while waiters and waiters[0][2] <= now:
                self._call(waiters.popleft()[1], False)

    async def _periodic_flush_loop(self) -> None:
        interval = self._cfg.flush_interval_commit_log_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self.flush_commit_log()

    # ------------------------------------------------------------ logics flush + checkpoint

    async def flush_logics(self, *, clean: bool = False) -> None:
        store = self._store
        checkpoint = Checkpoint(store.flushed_offset, store.dispatched_offset, store.last_store_timestamp, clean)
        jobs = store.queue_store.take_sync()
        if not jobs and checkpoint == self._last_checkpoint:
            return  # idle: nothing new to make durable
        index = store.index
        idx_dirty = index.take_dirty() if index is not None else None

        # As RocketMQ (flushConsumeQueueThoroughInterval): the checkpoint, which only bounds how much recovery
        # re-checks, is rewritten at most once a minute (and on a clean stop), not on every flush: with many brokers
        # in one process its three fsyncs per second per broker were measurable.
        now = time.monotonic()
        save_cp = clean or now - self._checkpoint_at >= CHECKPOINT_INTERVAL_S
        if not jobs and not idx_dirty and not save_cp:
            return

        def work() -> None:
            sync_all([d for job in jobs for d in job[1]], [f for job in jobs for f in job[2]], missing_dirs_ok=True)
            if index is not None and idx_dirty is not None:
                index.sync(idx_dirty)
            if save_cp:
                write_checkpoint(store.checkpoint_path, checkpoint)

        try:
            await asyncio.get_running_loop().run_in_executor(self.logics_executor, work)
        except OSError as exc:
            store.io_failed("flush_logics", exc, bit=WRITE_LOGICS_QUEUE_ERROR)
            return
        if save_cp:
            self._last_checkpoint = checkpoint
            self._checkpoint_at = now
        for cq, _dirs, _files, upto in jobs:
            cq.flushed_offset = min(max(cq.flushed_offset, upto), cq.max_offset)

    def save_checkpoint_now(self, checkpoint: Checkpoint) -> None:
        """Synchronously write a checkpoint, ordered after any logics flush in flight (loop thread blocks)."""
        self.logics_executor.submit(write_checkpoint, self._store.checkpoint_path, checkpoint).result()
        self._last_checkpoint = checkpoint

    async def _logics_loop(self) -> None:
        interval = self._cfg.flush_interval_consume_queue_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self._store.retry_dispatch()
            except Exception:  # noqa: BLE001 - a bug in the retry must not end the flushes of the logics
                log.exception("retry_dispatch_failed")
            await self.flush_logics()

    # ------------------------------------------------------------ clean

    async def _clean_loop(self) -> None:
        interval = self._cfg.clean_resource_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self._store.clean_expired_files()
