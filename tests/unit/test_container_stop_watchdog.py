"""A broker whose stop hangs leaves a trace: the container logs where every pending task waits."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from container.host import log_slow_stop


async def _stuck_in_flush(gate: asyncio.Event) -> None:
    await gate.wait()


async def test_a_slow_stop_logs_the_await_chain_of_every_task() -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_stuck_in_flush(gate), name="flusher")
    await asyncio.sleep(0)  # sleep-ok: one loop turn, the task runs up to its await
    with capture_logs() as logs:
        log_slow_stop("DefaultCluster:broker-a:0")
    gate.set()
    await task
    (event,) = [e for e in logs if e["event"] == "broker_stop_slow"]
    assert event["broker"] == "DefaultCluster:broker-a:0"
    (line,) = [t for t in event["tasks"] if t.startswith("flusher: ")]
    assert "_stuck_in_flush" in line and "wait" in line
