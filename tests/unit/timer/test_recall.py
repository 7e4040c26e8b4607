"""RECALL_MESSAGE's answers (brokerd/timer/recall.py) on an in-process broker: each refusal RocketMQ makes, in its
order, and a recall that resolves the timer (with and without the store's key index)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from brokerd.broker import Broker
from brokerd.remoting import RemotingCommand, request
from brokerd.remoting.command import HeaderError
from brokerd.timer.handle import encode_handle
from tests.unit.timer.conftest import BrokerFactory, now_ms, send_timer, timer_msg


async def recall(b: Broker, topic: str | None, handle: str | None) -> RemotingCommand:
    ext = {"producerGroup": "pg"} | ({"topic": topic} if topic else {}) | ({"recallHandle": handle} if handle else {})
    handler: Any = b.dispatcher.lookup(370)
    out = handler(None, request(370, ext))
    answer: RemotingCommand = await out if isinstance(out, asyncio.Future) else out
    return answer


async def test_refusals_in_rocketmqs_order(make_broker: BrokerFactory) -> None:
    b = await make_broker(recall_message_enable=False)
    due = now_ms() + 60_000
    h = encode_handle("Real", "timer-test", str(due + 1), "U0")
    assert (await recall(b, "Real", h)).code == 16  # NO_PERMISSION: recall is off (RocketMQ's default)
    with pytest.raises(HeaderError):
        await recall(b, "Real", None)
    b2 = await make_broker(b.cfg.store_path_root_dir + "-2")
    assert (r := await recall(b2, "Nope", h)).code == 17 and r.remark == "recall failed, the topic[Nope] not exist"
    send_timer(b2, timer_msg("Real", "U0", due))
    b2.meta.topics.create_topic_in_send_back_method("Real", 4, 6, 0)
    assert (await recall(b2, "Real", "bad!")).remark == "recall handle is invalid"
    assert (await recall(b2, "Real", encode_handle("Other", "timer-test", str(due + 1), "U0"))).remark == (
        "recall failed, topic not match")
    assert (await recall(b2, "Real", encode_handle("Real", "other-broker", str(due + 1), "U0"))).code == 604
    assert (await recall(b2, "Real", encode_handle("Real", "timer-test", str(now_ms() + 10**10), "U0"))).remark == (
        "recall failed, timestamp invalid")
    r = await recall(b2, "Real", h)
    assert (r.code, r.ext["msgId"]) == (0, "U0") and b2.timers.pending() == 0 and b2.timers.stats.recalled == 1
    await b2.apply_role("SLAVE", 1)
    assert (await recall(b2, "Real", h)).code == 11  # SLAVE_NOT_AVAILABLE


async def test_without_the_key_index_the_due_granule_is_searched(make_broker: BrokerFactory) -> None:
    b = await make_broker(message_index_enable=False)
    due = now_ms() + 60_000
    for i in range(3):
        send_timer(b, timer_msg("Real", f"U{i}", due))
    assert b.timers.find("Real", "U1", due) == [1] and b.timers.find("Real", "U1") == []
