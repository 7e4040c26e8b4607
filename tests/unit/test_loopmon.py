"""The loop monitor sees a stall it is shown (a callback that holds the loop) and every collection's pause, and
exports both as Prometheus text."""

from __future__ import annotations

import asyncio
import gc
import time

from brokerd.loopmon import LoopMonitor, freeze_heap


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the text")


async def test_an_injected_stall_is_measured_and_exported() -> None:
    mon = LoopMonitor()
    mon.start()
    try:
        await asyncio.sleep(0.01)  # sleep-ok: the monitor's first ticks
        loop = asyncio.get_running_loop()
        held = loop.create_future()

        def hold() -> None:
            time.sleep(0.06)  # sleep-ok: the stall under test
            held.set_result(None)

        loop.call_soon(hold)
        await held
        deadline = time.monotonic() + 5
        while mon.stalls.max < 0.05:  # the next tick notes how late it ran
            assert time.monotonic() < deadline, "the stall was not seen"
            await asyncio.sleep(0.002)  # sleep-ok: waiting for the monitor's tick, with a deadline
        assert 0.05 <= mon.stalls.max < 5.0
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


def test_a_frozen_heap_is_out_of_the_collectors_reach() -> None:
    try:
        assert freeze_heap() > 0 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
