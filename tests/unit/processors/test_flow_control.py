"""Flow control of refused sends: a refused connection is not read again until the broker takes sends again or
the hold's limit passed, and never held twice."""

from __future__ import annotations

import asyncio

from brokerd.broker_config import BrokerConfig
from brokerd.processors.admission import SendAdmission
from brokerd.processors.flow_control import HOLD_MAX_S, FlowControl


class Conn:
    def __init__(self) -> None:
        self.held = 0
        self.released = 0

    def hold_reading(self) -> None:
        self.held += 1

    def release_reading(self) -> None:
        self.released += 1


def admission(capacity: int) -> SendAdmission:
    cfg = BrokerConfig(send_thread_pool_queue_capacity=capacity)
    return SendAdmission(lambda: cfg, lambda: None)


async def test_a_refused_connection_is_read_again_once_sends_are_taken() -> None:
    adm = admission(capacity=2)
    full = adm.waiting(2, 0.0, 100)  # the send queue is full: sends are refused
    flow = FlowControl(adm)
    a, b = Conn(), Conn()
    flow.hold(a)
    flow.hold(a)
    flow.hold(b)
    assert (a.held, b.held, flow.holds) == (1, 1, 2)
    flow.poke()  # still full: nobody is read
    assert a.released == b.released == 0
    adm.answered(full)
    flow.poke()
    assert a.released == b.released == 1


async def test_a_hold_ends_after_its_limit_even_while_sends_are_refused() -> None:
    adm = admission(capacity=1)
    adm.waiting(1, 0.0, 100)
    flow = FlowControl(adm)
    c = Conn()
    flow.hold(c)
    deadline = asyncio.get_running_loop().time() + 5
    while not c.released and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(HOLD_MAX_S / 2)  # sleep-ok: waiting for the hold's timer, with a deadline
    assert c.released == 1 and adm.refusal(0.0, 0.0) is not None


async def test_a_connection_refused_for_its_sends_wait_is_not_held() -> None:
    """Refused because they arrived waitTimeMillsInSendQueue ago: what follows in the socket is younger and is read
    at once; refused because the queue is full: held."""
    adm = admission(capacity=1)
    flow = FlowControl(adm)
    c = Conn()
    assert adm.refusal(1.0, 0.7) is not None
    flow.refused(c)
    assert c.held == 0 and flow.holds == 0
    adm.waiting(1, 1.0, 100)
    assert adm.refusal(1.0, 1.0) is not None
    flow.refused(c)
    assert c.held == 1 and flow.holds == 1
