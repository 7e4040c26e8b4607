"""The loop monitor sees a stall it is shown (a callback that holds the loop) and every collection's pause, and
exports both as Prometheus text; a long stall's time is split by what the loop's thread did: ran, waited for a
CPU, or slept."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from brokerd.loopmon import LoopMonitor, freeze, freeze_heap, unfreeze


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the text")


async def _stall(mon: LoopMonitor, hold: Callable[[], None], seconds: float) -> dict[str, float]:
    """The split's growth over one stall of the loop made by ``hold`` (``seconds`` long at least), once the
    monitor's next tick added it."""
    await asyncio.sleep(0.01)  # sleep-ok: the monitor's first ticks
    before = dict(mon.split)
    loop = asyncio.get_running_loop()
    held = loop.create_future()
    loop.call_soon(lambda: (hold(), held.set_result(None)))
    await held
    deadline = time.monotonic() + 5
    while sum(mon.split.values()) - sum(before.values()) < seconds:  # the next tick notes the stall
        assert time.monotonic() < deadline, "the stall was not seen"
        await asyncio.sleep(0.002)  # sleep-ok: waiting for the monitor's tick, with a deadline
    return {k: mon.split[k] - before[k] for k in before}


def _spin(cpu_s: float) -> None:
    """Hold the loop running until this thread has used ``cpu_s`` of CPU."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


async def test_an_injected_stall_is_measured_split_and_exported() -> None:
    mon = LoopMonitor()
    mon.start()
    try:
        slept = await _stall(mon, lambda: time.sleep(0.06), 0.06)  # sleep-ok: a blocking call, the stall under test
        assert 0.05 <= mon.stalls.max < 5.0
        assert slept["off_cpu"] >= 0.06 and slept["cpu"] < 0.03, slept
        text = mon.render()
        assert sample(text, 'rocketmq_loop_stall_seconds_bucket{le="0.025"}') < sample(
            text, 'rocketmq_loop_stall_seconds_bucket{le="0.1"}')
        assert sample(text, "rocketmq_loop_stall_max_seconds") >= 0.05
        assert "# TYPE rocketmq_loop_stall_seconds histogram" in text
        labelled = mon.render("controller", 'node="n0"')
        assert 'controller_loop_stall_seconds_bucket{node="n0",le="0.1"}' in labelled
        assert 'controller_loop_stall_max_seconds{node="n0"}' in labelled
    finally:
        mon.stop()


async def test_collections_are_timed_by_generation() -> None:
    mon = LoopMonitor()
    callbacks = len(gc.callbacks)
    mon.start()
    try:
        before = mon.gc_pauses[2].count
        junk: list[list[object]] = [[i] for i in range(1000)]
        for x in junk:
            x.append(x)  # cycles: only the collector frees them
        del junk, x
        gc.collect()
        assert mon.gc_pauses[2].count == before + 1 and mon.gc_collected[2] >= 1000
        text = mon.render()
        assert sample(text, 'rocketmq_gc_pause_seconds_count{generation="2"}') >= 1
        assert sample(text, 'rocketmq_gc_collected_objects_total{generation="2"}') >= 1000
    finally:
        mon.stop()
    assert len(gc.callbacks) == callbacks  # stop removes its callback


def test_a_frozen_heap_is_out_of_the_collectors_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        frozen = freeze_heap()
        assert 0 < gc.get_freeze_count() <= frozen  # a frozen object may die since; none joins without a freeze
        # a scrape shows the count made at the freeze: counting again walks every frozen object (milliseconds)
        monkeypatch.setattr(gc, "get_freeze_count", lambda: pytest.fail("a scrape counted the frozen heap"))
        assert sample(LoopMonitor().render(), "rocketmq_gc_frozen_objects") == frozen
        # a later freeze adds what it moves, without walking what was frozen before
        young = [[i] for i in range(1000)]
        assert frozen + 1000 <= freeze() and sample(LoopMonitor().render(), "rocketmq_gc_frozen_objects") >= frozen + 1000
        del young
    finally:
        unfreeze()
    monkeypatch.undo()
    assert gc.get_freeze_count() == 0 and sample(LoopMonitor().render(), "rocketmq_gc_frozen_objects") == 0


async def test_a_long_stall_is_split_by_what_the_loop_thread_did() -> None:
    mon = LoopMonitor()
    mon.start()
    try:
        await _stall(mon, lambda: time.sleep(0.06), 0.06)  # sleep-ok: off_cpu, as in the test above
        busy = await _stall(mon, lambda: _spin(0.04), 0.04)
        assert busy["cpu"] >= 0.04, busy
        text = mon.render()
        assert "# TYPE rocketmq_loop_stall_thread_seconds_total counter" in text
        assert sample(text, 'rocketmq_loop_stall_thread_seconds_total{state="cpu"}') >= 0.04
        assert sample(text, 'rocketmq_loop_stall_thread_seconds_total{state="off_cpu"}') >= 0.06
        assert 'controller_loop_stall_thread_seconds_total{node="n0",state="runqueue"}' in mon.render(
            "controller", 'node="n0"')
    finally:
        mon.stop()


async def test_a_stall_spent_waiting_for_a_cpu_counts_as_runqueue() -> None:
    """The loop's thread and a busy process pinned to one CPU: the thread waits its turn (the kernel's run-queue
    wait), which is what a broker sharing its cores with other work sees."""
    if not os.path.exists("/proc/thread-self/schedstat"):
        return  # the kernel does not say: runqueue stays 0 (covered by the other test's off_cpu)
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(rival.pid, {cpu})
        os.sched_setaffinity(0, {cpu})  # this (the loop's) thread only
        mon = LoopMonitor()
        mon.start()
        try:
            shared = await _stall(mon, lambda: _spin(0.05), 0.05)
        finally:
            mon.stop()
        assert shared["cpu"] >= 0.05 and shared["runqueue"] >= 0.005, shared
    finally:
        os.sched_setaffinity(0, mine)
        rival.kill()
        rival.wait()
