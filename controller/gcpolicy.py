"""Keep garbage-collector pauses short in a long-running controller.

A full (generation 2) collection scans every tracked object: with tens of thousands of broker sets, Raft log
entries and liveness records it pauses the event loop for 100+ ms, long enough to delay heartbeats and even
cost the Raft leadership. Almost all of that heap is long-lived, so it is frozen (`gc.freeze()`) every
`freeze_interval_s`: later collections scan only what was allocated since. Cyclic garbage that was still alive
at a freeze would never be reclaimed, so every `full_interval_s` the heap is unfrozen and fully collected
once (one longer pause per interval, logged).
"""

from __future__ import annotations

import asyncio
import gc
import time

import structlog

log = structlog.get_logger(component="controller_gc")


class GcPolicy:
    def __init__(self, freeze_interval_s: float, full_interval_s: float) -> None:
        self.freeze_interval_s = freeze_interval_s
        self.full_interval_s = full_interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.freeze_interval_s <= 0:
            return
        gc.collect()
        gc.freeze()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-gc")

    async def _run(self) -> None:
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(self.freeze_interval_s)
            if self.full_interval_s > 0 and time.monotonic() - last_full >= self.full_interval_s:
                t = time.perf_counter()
                gc.unfreeze()
                collected = gc.collect()
                last_full = time.monotonic()
                log.info("gc_full_collection", ms=round((time.perf_counter() - t) * 1000, 1), collected=collected)
            else:
                gc.collect(1)  # young garbage only: cheap
            gc.freeze()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        gc.unfreeze()
