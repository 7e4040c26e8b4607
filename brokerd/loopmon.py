"""How long the event loop stops, and why: loop stalls and garbage-collector pauses, measured for /metrics.

One monitor per process (``install``; the container's and the controller's), since the loop and the collector
are the process's:

* **stalls**: a timer due every ``interval`` (2 ms) notes how late it runs. Whatever holds the loop (a long
  callback, a blocking call, a collection) delays it by as long as it runs past the timer's due time, so a stall
  of S is seen as a lateness between S - interval and S. libuv's timers have a granularity of 1 ms, so lateness
  under ``STALL_MIN`` (1 ms) is not counted; each longer one is one observation of
  ``rocketmq_loop_stall_seconds`` (a histogram), and the longest so far is ``rocketmq_loop_stall_max_seconds``.
  A stall of ``log_ms`` (50 ms) or more is logged (``loop_stall``, with the collector's time inside it);
* **where a long stall's time went** (``ThreadClock``): for each stall of ``LONG_STALL_S`` (5 ms) or more, the loop
  thread's time over that tick's whole period (the interval and the stall) is split three ways and added to
  ``rocketmq_loop_stall_thread_seconds_total{state}``: ``cpu``, the thread ran (work on the loop: callbacks,
  the collector, the C send lane); ``runqueue``, it was ready but waited for a CPU (the kernel's run-queue wait,
  ``/proc/thread-self/schedstat``: other processes or threads held every core); ``off_cpu``, neither (asleep: a
  blocking call, a page fault's disk read, and the loop's own wait for I/O before the stall). Without schedstat
  (not Linux) ``runqueue`` stays 0 and that time counts as ``off_cpu``;
* **collections**: ``gc.callbacks`` time every collection: ``rocketmq_gc_pause_seconds{generation}`` (a
  histogram) and the objects each generation's collections freed (``rocketmq_gc_collected_objects_total``);
  ``rocketmq_gc_frozen_objects`` is what ``gc.freeze`` moved out of the collector's reach (``gc_policy``), counted
  when ``freeze`` froze it (frozen objects that die later are not subtracted): counting walks every frozen object
  (~6 ms for 300k here), which a scrape must not do.

``BROKERD_LOOPMON_INTERVAL_MS`` sets the stall timer's period (2; 1 for finer figures, at ~1.8 % of a core on
an idle broker against ~0.9 %; 0: no stall timer, the collector is still timed). ``BROKERD_STALL_TRACE_MS=N`` (diagnosis only): when the loop stops for N ms, every thread's stack is written
to stderr by ``faulthandler``'s watchdog thread, re-armed by each tick: where a stall comes from. That thread reads
the frames of running threads without the GIL and may crash the process: never in production.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(component="loopmon")

INTERVAL_S = 0.002
STALL_MIN_S = 0.001
LONG_STALL_S = 0.005  # the longest stall the latency benchmark accepts under steady load
SPLIT_STATES = ("cpu", "runqueue", "off_cpu")
BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
GC_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass
class Histogram:
    """A Prometheus histogram: cumulative bucket counts on ``bounds`` (seconds), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0
    max: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds
        for i, le in enumerate(self.bounds):
            if seconds <= le:
                self.counts[i] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        sep = "," if labels else ""
        out = [f'{name}_bucket{{{labels}{sep}le="{le}"}} {n}' for le, n in zip(self.bounds, self.counts, strict=True)]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        tail = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{tail} {self.total:.6f}", f"{name}_count{tail} {self.count}"]
        return out


class ThreadClock:
    """The calling thread's time so far: (on a CPU, waiting for one) in seconds. CPU from ``time.thread_time``
    (exact for the running thread); the run-queue wait from the kernel's schedstat of the thread that opened it
    (0.0 where there is none)."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def read(self) -> tuple[float, float]:
        wait = 0.0
        if self._fd is not None:
            try:
                wait = int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                self.close()
        return time.thread_time(), wait

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LoopMonitor:
    """Loop stalls and collector pauses of this process (see the module docstring); ``clock`` is perf_counter."""

    def __init__(self, interval: float = INTERVAL_S, log_ms: float = 50.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:  # fmt: skip
        self.interval = interval
        self.log_s = log_ms / 1000.0
        self.clock = clock
        self.stalls = Histogram(BUCKETS_S)
        self.gc_pauses = [Histogram(GC_BUCKETS_S) for _ in range(3)]
        self.gc_collected = [0, 0, 0]
        self.gc_total_s = 0.0  # every collection's time so far (a stall's share of it is logged)
        self._gc_started = 0.0
        self._last = 0.0
        self._gc_at_last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._trace_s = 0.0
        self.split = dict.fromkeys(SPLIT_STATES, 0.0)  # long stalls' periods: where the loop thread's time went
        self._thread: ThreadClock | None = None
        self._cpu_at_last = self._wait_at_last = 0.0

    # -- the collector ------------------------------------------------------------------------------------------

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = self.clock()
            return
        took = self.clock() - self._gc_started
        gen = info.get("generation", 2)
        if 0 <= gen < 3:
            self.gc_pauses[gen].observe(took)
            self.gc_collected[gen] += info.get("collected", 0)
        self.gc_total_s += took

    # -- the loop -------------------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Measure ``loop`` (the running one) and the collector until ``stop``."""
        if self._loop is not None:
            return
        self._loop = loop or asyncio.get_running_loop()
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        self._trace_s = _env_ms("BROKERD_STALL_TRACE_MS", 0.0) / 1000.0
        self._last = self.clock()
        self._gc_at_last = self.gc_total_s
        if self.interval > 0:
            self._thread = ThreadClock()  # opened on the loop's thread: it reads that thread's figures
            self._cpu_at_last, self._wait_at_last = self._thread.read()
            self._timer = self._loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        now = self.clock()
        late = now - self._last - self.interval
        assert self._thread is not None
        cpu, wait = self._thread.read()
        if late >= STALL_MIN_S:
            self.observe_stall(late)
            if late >= LONG_STALL_S:
                self.observe_split(now - self._last, cpu - self._cpu_at_last, wait - self._wait_at_last)
            if late >= self.log_s:
                log.warning("loop_stall", ms=round(late * 1000, 1),
                            gc_ms=round((self.gc_total_s - self._gc_at_last) * 1000, 1),
                            cpu_ms=round((cpu - self._cpu_at_last) * 1000, 1),
                            runqueue_ms=round((wait - self._wait_at_last) * 1000, 1))
        self._last, self._cpu_at_last, self._wait_at_last = now, cpu, wait
        self._gc_at_last = self.gc_total_s
        if self._trace_s > 0:
            faulthandler.dump_traceback_later(self._trace_s, repeat=False, file=sys.stderr)
        assert self._loop is not None
        self._timer = self._loop.call_later(self.interval, self._tick)

    def observe_stall(self, seconds: float) -> None:
        self.stalls.observe(seconds)

    def observe_split(self, elapsed: float, cpu: float, runqueue: float) -> None:
        """A long stall's tick period of ``elapsed`` seconds: ``cpu`` of it the thread ran, ``runqueue`` it waited
        for a CPU, the rest it was off the CPU."""
        self.split["cpu"] += cpu
        self.split["runqueue"] += runqueue
        self.split["off_cpu"] += max(0.0, elapsed - cpu - runqueue)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._trace_s > 0:
            faulthandler.cancel_dump_traceback_later()
        if self._thread is not None:
            self._thread.close()
            self._thread = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._loop = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop it measures (None: stopped)."""
        return self._loop

    # -- /metrics -------------------------------------------------------------------------------------------

    def render(self, prefix: str = "rocketmq", labels: str = "") -> str:
        """The monitor's families as Prometheus text; ``labels``: e.g. ``node="n0"`` on every sample."""
        sep = "," if labels else ""
        tail = f"{{{labels}}}" if labels else ""
        lines = [f"# HELP {prefix}_loop_stall_seconds Event-loop stalls of 1 ms or more (how late a periodic timer ran)",
                 f"# TYPE {prefix}_loop_stall_seconds histogram"]
        lines += self.stalls.lines(f"{prefix}_loop_stall_seconds", labels)
        lines += [f"# HELP {prefix}_loop_stall_max_seconds The longest event-loop stall since start",
                  f"# TYPE {prefix}_loop_stall_max_seconds gauge",
                  f"{prefix}_loop_stall_max_seconds{tail} {self.stalls.max:.6f}",
                  f"# HELP {prefix}_loop_stall_thread_seconds_total The loop thread's time over stalls of 5 ms or "
                  "more: running (cpu), waiting for a CPU (runqueue), neither (off_cpu)",
                  f"# TYPE {prefix}_loop_stall_thread_seconds_total counter"]
        lines += [f'{prefix}_loop_stall_thread_seconds_total{{{labels}{sep}state="{st}"}} {self.split[st]:.6f}'
                  for st in SPLIT_STATES]
        lines += [f"# HELP {prefix}_gc_pause_seconds Garbage-collector pauses, by generation collected",
                  f"# TYPE {prefix}_gc_pause_seconds histogram"]
        for gen, h in enumerate(self.gc_pauses):
            lines += h.lines(f"{prefix}_gc_pause_seconds", f'{labels}{sep}generation="{gen}"')
        lines += [f"# HELP {prefix}_gc_collected_objects_total Objects the collector freed, by generation collected",
                  f"# TYPE {prefix}_gc_collected_objects_total counter"]
        lines += [f'{prefix}_gc_collected_objects_total{{{labels}{sep}generation="{gen}"}} {n}'
                  for gen, n in enumerate(self.gc_collected)]
        lines += [f"# HELP {prefix}_gc_frozen_objects Objects gc.freeze() put out of the collector's reach",
                  f"# TYPE {prefix}_gc_frozen_objects gauge", f"{prefix}_gc_frozen_objects{tail} {_frozen}"]
        return "\n".join(lines) + "\n"


_frozen = 0  # objects frozen, as counted by the last ``freeze``


def freeze() -> int:
    """``gc.freeze()``, and the objects frozen so far for ``rocketmq_gc_frozen_objects``: what this freeze moves
    (the collector's three generations: after the first freeze only what was promoted since the last one) added to
    what the earlier ones froze, never a walk of the frozen heap (``gc.get_freeze_count``: ~6 ms at 300k objects,
    each 10 s in the controller)."""
    global _frozen
    if _frozen == 0:
        _frozen = gc.get_freeze_count()  # frozen before this module's first freeze
    _frozen += sum(len(gc.get_objects(generation)) for generation in range(3))
    gc.freeze()
    return _frozen


def unfreeze() -> None:
    """``gc.unfreeze()``: every frozen object back in the collector's oldest generation, the count at 0."""
    global _frozen
    gc.unfreeze()
    _frozen = 0


def freeze_heap() -> int:
    """What exists now lives as long as the process (modules, configs, the brokers built at start-up): freeze it,
    so later collections never scan it (a full collection of a started broker's heap stops the loop for tens of
    milliseconds). Cyclic garbage frozen with it is never freed: call it after start-up, not periodically (a
    connection alive at a freeze and closed later would stay). Returns the objects frozen so far."""
    gc.collect(0)
    return freeze()


def _env_ms(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return max(0.0, float(raw)) if raw else default
    except ValueError:
        log.warning("loopmon_setting_ignored", name=name, value=raw)
        return default


_current: LoopMonitor | None = None


def install(loop: asyncio.AbstractEventLoop | None = None) -> LoopMonitor:
    """This process's monitor, measuring ``loop`` (the running one); idempotent."""
    global _current
    loop = loop or asyncio.get_running_loop()
    if _current is None:
        _current = LoopMonitor(interval=_env_ms("BROKERD_LOOPMON_INTERVAL_MS", INTERVAL_S * 1000) / 1000.0)
    if _current.loop is not loop:
        _current.stop()  # a loop of the past (tests run one after another in a process)
        _current.start(loop)
    return _current


def current() -> LoopMonitor | None:
    """This process's monitor, if ``install`` made one."""
    return _current


def uninstall() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None
