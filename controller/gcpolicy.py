"""Keep garbage-collector pauses short in a long-running controller, and measure them.

A full (generation 2) collection scans every tracked object: the imported modules alone make a start-up collection
stop the loop for 40-150 ms (next to a 500 ms election timeout), and with tens of thousands of broker sets, Raft
log entries and liveness records it pauses the loop for 100+ ms, long enough to delay heartbeats and even cost the
Raft leadership. Almost all of that heap is long-lived, so it is frozen (``gc.freeze()``): later collections scan
only what was allocated since.

* when the policy is made (after the imports and the config, before start-up): what exists is frozen, so
  start-up's collections scan only what start-up builds;
* ``start`` (after start-up): a young collection and a freeze; no full collection (it was the start-up pause);
* every ``freeze_interval_s``: a young collection (generation 1) and a freeze;
* cyclic garbage that was still alive at a freeze is never reclaimed, so every ``full_interval_s`` the heap is
  unfrozen and fully collected once (one longer pause per interval, logged and on /metrics).

The process's loop monitor (``brokerd/loopmon.py``) runs from ``start``: loop stalls and every collection's pause
on the controller's /metrics (``controller_loop_stall_seconds``, ``controller_gc_pause_seconds``).
"""

from __future__ import annotations

import asyncio
import gc
import time

import structlog

from brokerd import loopmon

log = structlog.get_logger(component="controller_gc")


class GcPolicy:
    def __init__(self, freeze_interval_s: float, full_interval_s: float) -> None:
        self.freeze_interval_s = freeze_interval_s
        self.full_interval_s = full_interval_s
        self._task: asyncio.Task[None] | None = None
        self.monitor: loopmon.LoopMonitor | None = None
        if freeze_interval_s > 0:
            loopmon.freeze()  # the modules and the config: start-up's collections need not scan them

    def start(self) -> None:
        self.monitor = loopmon.install()
        if self.freeze_interval_s <= 0:
            return
        gc.collect(0)
        loopmon.freeze()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-gc")

    async def _run(self) -> None:
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(self.freeze_interval_s)
            if self.full_interval_s > 0 and time.monotonic() - last_full >= self.full_interval_s:
                t = time.perf_counter()
                loopmon.unfreeze()
                collected = gc.collect()
                last_full = time.monotonic()
                log.info("gc_full_collection", ms=round((time.perf_counter() - t) * 1000, 1), collected=collected)
            else:
                gc.collect(1)  # young garbage only: cheap
            loopmon.freeze()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.monitor is not None and self.monitor is loopmon.current():
            loopmon.uninstall()
        self.monitor = None
        loopmon.unfreeze()
