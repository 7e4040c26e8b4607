"""Delay levels end to end in one in-process broker: each delayed message reaches its real topic once its delay
passed, never before; messages parked while their level waits for an earlier one go out after it, and one parked
into an idle level is delivered after its delay (not at the idle level's next poll)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.integration.test_send_lane import feed, send, start_broker

DELAY_S = 1.0


async def stored_times(b: object, topic: str, want: int, deadline_s: float) -> list[float]:
    """Wall times at which the topic's queue 0 held 1, 2, ... ``want`` messages (polled every 10 ms)."""
    seen: list[float] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while len(seen) < want and loop.time() < end:
        n = b.store.max_offset_in_queue(topic, 0)  # type: ignore[attr-defined]
        seen += [time.monotonic()] * (n - len(seen))
        await asyncio.sleep(0.01)  # sleep-ok: polling the delivered count with a deadline
    return seen


async def test_delayed_messages_are_delivered_after_their_delay_busy_level_or_idle(tmp_path: Path) -> None:
    b, conn, _tr = await start_broker(tmp_path, True, message_delay_level="1s 2s")
    try:
        sent_at = time.monotonic()
        feed(conn, [send(i, "LaneA", 0, {"DELAY": "1", "UNIQ_KEY": f"A{i:031d}"}, b"a") for i in range(1, 11)], 1)
        feed(conn, [send(i, "LaneA", 0, {"DELAY": "1", "UNIQ_KEY": f"B{i:031d}"}, b"b") for i in range(11, 21)], 2)
        times = await stored_times(b, "LaneA", 20, 10)
        assert len(times) == 20 and min(times) - sent_at >= DELAY_S - 0.01, [t - sent_at for t in times]
        assert max(times) - sent_at < DELAY_S + 1.0  # the second burst did not wait for a later look
        idle_at = time.monotonic()  # the level has nothing left: a new message must wake it
        feed(conn, [send(21, "LaneA", 0, {"DELAY": "1", "UNIQ_KEY": f"C{21:031d}"}, b"c")], 3)
        times = await stored_times(b, "LaneA", 21, 10)
        assert len(times) == 21 and DELAY_S - 0.01 <= times[-1] - idle_at < DELAY_S + 1.0
    finally:
        await b.shutdown()
