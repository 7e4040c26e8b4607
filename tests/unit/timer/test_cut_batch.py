"""Exactly-once firing: the log cut at every record boundary of a firing batch (what a crash, a power loss or a
failover to a slave that received part of it leaves), then recovered: every timer is in its real topic exactly
once. In-process broker, real files; the timer service driven step by step."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from brokerd.broker import Broker
from brokerd.logbatch import TAG_BEGIN
from brokerd.timer.core import PROGRESS_TOPIC
from tests.support import until
from tests.unit.timer.conftest import BrokerFactory, delivered, now_ms, send_timer, steps_until, timer_msg

N = 8


def last_begin(b: Broker) -> int:
    """The queue offset of the newest BEGIN marker."""
    end = b.timers.local.max_offset_in_queue(PROGRESS_TOPIC, 0)
    return max(mk.queue_offset for mk in b.timers.marked.read_markers(0, end) if mk.tag == TAG_BEGIN)


def batch_bounds(b: Broker, begin_qoff: int) -> list[int]:
    """Record boundaries from the BEGIN marker at ``begin_qoff`` to the end of its END marker."""
    local = b.timers.local
    (_, start, _, _), = local.entries(PROGRESS_TOPIC, 0, begin_qoff, begin_qoff + 1)
    (_, end_phys, end_size, _), = local.entries(PROGRESS_TOPIC, 0, begin_qoff + 1, begin_qoff + 2)
    seg = b.store.cfg.mapped_file_size_commit_log
    bounds, phys = [start], start
    while phys < end_phys + end_size:
        raw = local.raw_at(phys)
        if raw is None:  # the blank filler at a segment's end: the batch goes on in the next segment
            phys = (phys // seg + 1) * seg
            continue
        phys += len(raw)
        bounds.append(phys)
    return bounds


async def fire_all(b: Broker, due: int) -> None:
    """Once all are due (one batch then), step until every timer is resolved."""
    await until(lambda: now_ms() > due, "the timers' due time")
    await steps_until(b, lambda: len(delivered(b, "Real")) >= N and b.timers.pending() == 0, "every timer fired")


def exactly_once(b: Broker) -> None:
    got = Counter(u for u, _, _ in delivered(b, "Real"))
    assert got == Counter({f"U{i}": 1 for i in range(N)}), got


@pytest.mark.parametrize("segment,body", [(8 << 20, 700), (64 << 10, 9000)], ids=["one-segment", "across-segments"])
async def test_every_cut_of_a_firing_batch_recovers_to_exactly_once(make_broker: BrokerFactory, segment: int,
                                                                   body: int) -> None:
    b = await make_broker(mapped_file_size_commit_log=segment)  # 64 KiB: the batch's 72 KiB cross a segment end
    due = now_ms() + 300
    for i in range(N):
        send_timer(b, timer_msg("Real", f"U{i}", due, body=bytes([65 + i]) * body))
    await fire_all(b, due)
    start = last_begin(b)
    bounds = batch_bounds(b, start)
    assert len(bounds) == N + 3  # before BEGIN, after BEGIN, after each delivery, after END
    origin = bounds[0]
    for k in range(len(bounds)):
        b.store.truncate_dirty_files(origin)  # nothing fired yet
        await fire_all(b, due)  # all fired again, in one batch of the same records
        assert last_begin(b) == start
        bounds = batch_bounds(b, start)
        b.store.truncate_dirty_files(bounds[k])  # the log holds BEGIN and k - 1 deliveries (k = 0: nothing)
        assert len(delivered(b, "Real")) == max(0, min(k - 1, N))
        await fire_all(b, due)
        exactly_once(b)


async def test_a_cut_batch_is_closed_after_a_restart_too(make_broker: BrokerFactory, tmp_path: Path) -> None:
    b = await make_broker(tmp_path / "r")
    due = now_ms() + 300
    for i in range(N):
        send_timer(b, timer_msg("Real", f"U{i}", due))
    await fire_all(b, due)
    start = last_begin(b)
    bounds = batch_bounds(b, start)
    b.store.truncate_dirty_files(bounds[4])  # BEGIN + 3 deliveries, then the process stopped
    await b.shutdown()
    again = await make_broker(tmp_path / "r")
    assert len(delivered(again, "Real")) == 3
    await fire_all(again, due)
    exactly_once(again)
    assert again.timers.progress.fired.pending(N) == 0
