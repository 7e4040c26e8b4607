"""What the broker wires around POP: an admin's INVOKE_BROKER_TO_RESET_OFFSET (222) answered SUCCESS moves the
group's POP read positions to the offsets its answer names (whatever form the admin handler answers in)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from brokerd.clients import mq_map
from brokerd.pop.module import PopModule
from brokerd.pop.popping import PopRequest
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Dispatcher
from tests.unit.pop.conftest import HarnessFactory

G, T = "G", "T"


def reset_answer(cmd: RemotingCommand, table: dict[int, int], broker: str = "broker-a") -> RemotingCommand:
    entries = [({"brokerName": broker, "queueId": q, "topic": T}, off) for q, off in table.items()]
    return cmd.response(body=orjson.dumps({"offsetTable": mq_map(entries)}))


async def test_a_reset_answered_success_moves_the_pop_positions(harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T, 2)
    h.send(T, 4, 0)
    h.send(T, 4, 1, prefix="n")
    m = PopModule(h.broker)  # type: ignore[arg-type]
    m.service.core.now = lambda: h.now
    m.service.activate()
    for qid in (0, 1):
        assert m.service.pop(PopRequest(G, T, qid, 4, 60_000, False)).found == 4
    later: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()

    def call(make: Any) -> object:
        d = Dispatcher()
        d.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, lambda conn, cmd: make(cmd))
        m.wrap_admin(d)
        cmd = request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": T, "group": G, "timestamp": "0"})
        return d.handlers[RequestCode.INVOKE_BROKER_TO_RESET_OFFSET](None, cmd)  # type: ignore[arg-type]

    call(lambda c: reset_answer(c, {0: 1}))  # answered at once
    assert call(lambda c: later) is later  # answered later (a read waiting for a tier chunk)
    later.set_result(reset_answer(request(0), {1: 2}))
    await asyncio.sleep(0)  # sleep-ok: one loop turn runs the future's callbacks
    call(lambda c: reset_answer(c, {0: 0}, broker="broker-b"))  # another broker's queue: not ours
    call(lambda c: c.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "no"))  # refused: nothing moves
    st = m.service.state
    assert (st.queues[(G, T, 0)].next, st.queues[(G, T, 1)].next) == (1, 2)
