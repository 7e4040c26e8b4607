"""The operations of one loop turn: acks and pops applied at once, written in one record at the end of the turn
in the order they were applied; a POP answered once its checkpoint is written, an ACK once its record is durable
(SYNC_FLUSH: after the flush); a record the store refuses answers every waiter with the failure and the state
comes back from the log."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from brokerd.pop.pending import Outbox
from brokerd.pop.popping import PopOutcome, PopRequest
from brokerd.pop.service import PENDING
from brokerd.remoting.codes import ResponseCode
from brokerd.store.results import PutMessageResult, PutStatus
from tests.support import DiskFault
from tests.unit.pop.conftest import HarnessFactory, PopHarness

G, T = "G", "T"


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[list[Any], PutStatus]] = []

    def release(self, items: list[Any], status: PutStatus, out: Outbox) -> None:
        self.got.append((list(items), status))


async def ready(h: PopHarness) -> None:
    h.topic(T, 2)
    h.send(T, 8, 0)
    h.send(T, 8, 1, prefix="n")
    h.svc.activate()


def start_of(out: PopOutcome, qid: int) -> int:
    return next(int(s.split()[2]) for s in out.info.start if int(s.split()[1]) == qid)


async def until(cond: Any, what: str) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.005)  # sleep-ok: polling a condition with a deadline
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_acks_and_pops_of_a_turn_share_one_record_in_the_order_they_were_applied(
        harness: HarnessFactory) -> None:
    h = await harness()
    await ready(h)
    a = h.svc.pop(PopRequest(G, T, 0, 4, 10_000, False))  # written at once
    before = h.revive_records()
    b = h.svc.pop(PopRequest(G, T, 1, 4, 10_000, False), defer=True)
    assert b.found == 4 and h.svc.state.queues[(G, T, 1)].next == 4  # applied, not written
    sink = Sink()
    h.svc.wait_written(sink, "pop b")
    for o in range(4):
        out = h.svc.ack((G, T, 0), start_of(a, 0), a.pop_time, False, [o])
        assert out.code == ResponseCode.SUCCESS and out.wait_end == PENDING
    h.svc.wait_durable(sink, "acks of a")
    c = h.svc.pop(PopRequest(G, T, 1, 2, 10_000, False), defer=True)  # after the acks
    assert not sink.got and h.revive_records() == before
    h.svc.core.flush()  # the end of the turn
    assert h.revive_records() == before + 1
    assert sink.got == [(["pop b"], PutStatus.PUT_OK), (["acks of a"], PutStatus.PUT_OK)]
    assert c.found == 2
    live = h.svc.state.snapshot()
    h.svc.deactivate()
    h.svc.activate()  # the record replays to the same state
    assert h.svc.state.snapshot() == live


async def test_an_ack_is_answered_only_after_the_flush_under_sync_flush(harness: HarnessFactory,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    h = await harness(store_cfg={"flush_disk_type": "SYNC_FLUSH"})
    await ready(h)
    a = h.svc.pop(PopRequest(G, T, 0, 2, 10_000, False))
    disk = DiskFault(h.store, monkeypatch).stall()
    sink = Sink()
    assert h.svc.ack((G, T, 0), start_of(a, 0), a.pop_time, False, [0]).wait_end == PENDING
    h.svc.wait_durable(sink, "ack")
    h.svc.core.flush()
    await asyncio.sleep(0.05)  # sleep-ok: nothing may happen while the disk hangs
    assert not sink.got
    disk.release()
    await until(lambda: sink.got, "the flush to release the answer")
    assert sink.got == [(["ack"], PutStatus.PUT_OK)]


async def test_a_refused_record_answers_every_waiter_and_the_state_comes_back_from_the_log(
        harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    h = await harness()
    await ready(h)
    a = h.svc.pop(PopRequest(G, T, 0, 2, 10_000, False))
    h.svc.pop(PopRequest(G, T, 1, 2, 10_000, False), defer=True)
    sink = Sink()
    h.svc.wait_written(sink, "pop")
    h.svc.ack((G, T, 0), start_of(a, 0), a.pop_time, False, [0])
    h.svc.wait_durable(sink, "ack")
    monkeypatch.setattr(h.svc.core.log, "append_ops", lambda ops: PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE))
    h.svc.core.flush()
    assert sink.got == [(["pop"], PutStatus.SERVICE_NOT_AVAILABLE), (["ack"], PutStatus.SERVICE_NOT_AVAILABLE)]
    monkeypatch.undo()
    await until(lambda: h.svc.core.counters.rebuilds == 2, "the state rebuilt from the log")
    st = h.svc.state
    assert st.cks[(G, T, 0, start_of(a, 0), a.pop_time)].pending == {0, 1}  # the refused ack is not in effect
    assert (G, T, 1) not in st.queues or st.queues[(G, T, 1)].next == 0  # nor the refused checkpoint
    again = h.svc.pop(PopRequest(G, T, 1, 2, 10_000, False))
    assert again.info.msgs == ["0 1 0,1"]  # its messages are handed out (for the first time)
