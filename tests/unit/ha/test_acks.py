"""Put acknowledgements: the flush and the replica waits combined as RocketMQ's handleDiskFlushAndHA does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from brokerd.ha.acks import Acked, PutAcks, ReplicaWaiters
from brokerd.ha.actions import ALL_ACK, ReplicationProgress
from brokerd.ha.controller_link import LinkConfig, parse_info
from brokerd.remoting.command import RemotingCommand
from brokerd.store.results import PutStatus


class Flush:
    def __init__(self, sync: bool) -> None:
        self.sync_flush = sync
        self.flushed_offset = 0
        self.waiting: list[tuple[int, Callable[[bool], None]]] = []
        self.requested = 0

    def when_flushed(self, end: int, done: Callable[[bool], None]) -> None:
        self.waiting.append((end, done))

    def request_flush(self) -> None:
        self.requested += 1


class Replicas:
    def __init__(self, answer: PutStatus | None) -> None:
        self.answer = answer
        self.waiters = ReplicaWaiters(1000)
        self.waits_for_replicas = True

    def replica_ack(self, end: int, done: Acked) -> PutStatus | None:
        if self.answer is None:
            self.waiters.add(end, 2, done)
        return self.answer


def recorder() -> tuple[list[PutStatus], Acked]:
    got: list[PutStatus] = []
    return got, got.append


def test_replica_waiters_release_in_order_and_time_out() -> None:
    w = ReplicaWaiters(timeout_ms=50)
    a, b, c, d, e = (recorder() for _ in range(5))
    w.add(100, 2, a[1])
    w.add(200, 2, b[1])
    w.add(300, ALL_ACK, c[1])
    w.release(ReplicationProgress(confirm_offset=0, acked=(300, 150)))
    assert a[0] == [PutStatus.PUT_OK] and b[0] == []
    w.release(ReplicationProgress(confirm_offset=300, acked=(300, 250)))
    assert b[0] == [PutStatus.PUT_OK] and c[0] == [PutStatus.PUT_OK]
    w.add(400, 2, d[1])
    w.expire(now=10**9)
    assert d[0] == [PutStatus.FLUSH_SLAVE_TIMEOUT] and w.timeouts == 1
    w.add(500, 2, e[1])
    w.fail_all(PutStatus.FLUSH_SLAVE_TIMEOUT)
    assert e[0] == [PutStatus.FLUSH_SLAVE_TIMEOUT] and len(w) == 0


def test_flush_outcome_comes_first_then_the_replicas_each_answered_where_it_is_released() -> None:
    flush, reps = Flush(sync=True), Replicas(None)
    acks = PutAcks(flush, reps)
    assert acks.may_wait
    got, done = recorder()
    assert acks.when_acked(100, done) is None
    flush.waiting[0][1](True)
    assert got == []  # durable, the replica still missing
    reps.waiters.release(ReplicationProgress(100, (100, 100)))
    assert got == [PutStatus.PUT_OK]  # no loop iteration in between
    assert acks.when_acked(200, done) is None
    reps.waiters.release(ReplicationProgress(200, (200, 200)))
    flush.waiting[1][1](False)
    assert got == [PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT]


async def test_wait_is_the_same_as_a_future() -> None:
    flush = Flush(sync=True)
    ack = PutAcks(flush, None).wait(100)
    assert isinstance(ack, asyncio.Future) and not ack.done()
    flush.waiting[0][1](True)
    assert await ack is PutStatus.PUT_OK


async def test_no_wait_when_nothing_is_asked_and_refusals_pass_through() -> None:
    flush = Flush(sync=False)
    assert PutAcks(flush, None).wait(10) is PutStatus.PUT_OK and not PutAcks(flush, None).may_wait
    assert PutAcks(flush, Replicas(PutStatus.SLAVE_NOT_AVAILABLE)).wait(10) is PutStatus.SLAVE_NOT_AVAILABLE
    sync = Flush(sync=True)
    assert PutAcks(sync, Replicas(None)).wait(10, wait_store=False) is PutStatus.PUT_OK and sync.requested == 1


def test_replica_info_parses_every_source_shape() -> None:
    cmd = RemotingCommand(code=0, ext={"masterBrokerId": "2", "masterAddress": "h:1", "masterEpoch": "3",
                                       "syncStateSetEpoch": "5"}, body=b'{"syncStateSet":[1,2]}')  # fmt: skip
    info = parse_info(cmd)
    assert (info.master_id, info.master_addr, info.master_epoch, info.sss_epoch) == (2, "h:1", 3, 5)
    assert info.sync_state_set == {1, 2}
    replica = parse_info(RemotingCommand(code=0, ext={"masterEpoch": "1"},
                                         body=b'{"syncStateSet":[3],"syncStateSetEpoch":4}'))  # fmt: skip
    assert replica.master_id is None and replica.sss_epoch == 4


def test_only_an_explicit_worse_priority_delays_the_first_election() -> None:
    def cfg(prio: int) -> LinkConfig:
        return LinkConfig(("c:1",), "C", "b", "h:2", "/tmp", election_priority=prio)

    assert cfg(1).first_election_delay_s() == 0 and cfg(2**31 - 1).first_election_delay_s() == 0
    assert cfg(2).first_election_delay_s() == 2.0 and cfg(3).first_election_delay_s() == 4.0
    assert cfg(100).first_election_delay_s() == 8.0
