"""Background services of a started store: commit-log flush (periodic, or group commit for SYNC_FLUSH),
sync-flush timeouts, logics flush + checkpoint, and the periodic clean.

Concurrency contract: everything here runs on the store's event loop; fsyncs run in two executors shared by
every store of the process (one for commit logs, one single thread for consume queues / index / checkpoint),
so logics flushes never overlap and a container of many brokers does not grow two threads per broker (threads
contending for the GIL cost the event loop thread throughput). A store's commit-log flushes are serialised by
its own lock.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from brokerd import durability
from brokerd.store.checkpoint import Checkpoint, save_checkpoint
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.mapped_file import sync_all
from brokerd.store.protocols import ServicedStore

log = structlog.get_logger(component="store.services")


_shared: dict[str, ThreadPoolExecutor] = {}


def shared_executor(kind: str) -> ThreadPoolExecutor:
    ex = _shared.get(kind)
    if ex is None:
        ex = _shared[kind] = ThreadPoolExecutor(2 if kind == "flush" else 1, thread_name_prefix=f"store-{kind}")
    return ex


CHECKPOINT_INTERVAL_S = 60.0


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    save_checkpoint(path, checkpoint)
    if durability.ENABLED:  # durable now (fsynced, renamed, directory fsynced): keep its content for the harness
        durability.content_synced(path)


class StoreServices:
    def __init__(self, store: ServicedStore) -> None:
        self._store = store
        self._cfg = store.cfg
        self._waiters: deque[tuple[int, asyncio.Future[bool], float]] = deque()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.log_executor = shared_executor("flush")
        self.logics_executor = shared_executor("logics")
        self._flush_lock = asyncio.Lock()
        self._timeout_s = self._cfg.sync_flush_timeout_ms / 1000
        self.flush_count = 0
        self._last_checkpoint: Checkpoint | None = None
        self._checkpoint_at = float("-inf")

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        loops = [self._logics_loop, self._clean_loop]
        if self._cfg.sync_flush:
            loops += [self._group_commit_loop, self._timeout_loop]
        else:
            loops.append(self._periodic_flush_loop)
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

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.flush_commit_log()
        self._release(self._store.flushed_offset)
        while self._waiters:
            _, fut, _ = self._waiters.popleft()
            if not fut.done():
                fut.set_result(False)
        await self.flush_logics(clean=self._store.running_flags.writeable)

    # ------------------------------------------------------------ commit log flush

    def wait_flushed(self, end: int) -> asyncio.Future[bool]:
        """Future resolved True once the log is durable up to ``end``; False on timeout."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, fut, time.monotonic() + self._timeout_s))
        self._wake.set()
        return fut

    def wakeup(self) -> None:
        self._wake.set()

    async def flush_commit_log(self) -> None:
        store = self._store
        async with self._flush_lock:
            target = store.max_phy_offset
            flushed = store.flushed_offset
            if target <= flushed:
                return
            gen = store.truncate_generation
            files = store.commit_log.files_between(flushed, target)
            try:
                await asyncio.get_running_loop().run_in_executor(self.log_executor, store.commit_log.sync_range, files)
            except OSError as exc:
                store.io_failed("flush_commit_log", exc)
                return
            self.flush_count += 1
            store.on_flushed(target, gen)

    def _release(self, flushed: int) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= flushed:
            _, fut, _ = waiters.popleft()
            if not fut.done():
                fut.set_result(True)

    async def _group_commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush_commit_log()
            self._release(self._store.flushed_offset)

    async def _timeout_loop(self) -> None:
        period = min(self._timeout_s / 4, 0.25)
        waiters = self._waiters
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            while waiters and waiters[0][2] <= now:
                _, fut, _ = waiters.popleft()
                if not fut.done():
                    fut.set_result(False)

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
            await self.flush_logics()

    # ------------------------------------------------------------ clean

    async def _clean_loop(self) -> None:
        interval = self._cfg.clean_resource_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self._store.clean_expired_files()
