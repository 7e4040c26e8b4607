"""Controller-triggered elections: heartbeat timeout, closed channel, revival, grace, role-change push."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from tests.unit.controller.harness import FakeBroker, Harness, make_config, wait_until


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness(make_config(brokerHeartbeatTimeoutMs="300", livenessTickMs="20"))
    harness.srv.elector.started_at -= 10  # this controller has had a full heartbeat timeout of history
    await harness.start()
    yield harness
    await harness.stop()


async def set_up(h: Harness, n: int) -> list[FakeBroker]:
    """Broker set "b": n brokers registered and heartbeating, broker 1 master, all in the sync state set."""
    brokers = [FakeBroker("c1", "b", i, h.addr) for i in range(1, n + 1)]
    for b in brokers:
        await b.start()
        r = await h.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c1", "brokerName": "b",
                                                        "appliedBrokerId": str(b.broker_id),
                                                        "registerCheckCode": f"{b.addr};1"})
        assert r.code == RC.SUCCESS
        await b.heartbeat_once()
        b.start_beating(0.05, max_offset=100 * b.broker_id)
    r = await h.call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c1", "brokerName": "b", "brokerId": "1"})
    assert r.code == RC.SUCCESS
    body = orjson.dumps({"syncStateSet": list(range(1, n + 1)), "syncStateSetEpoch": 1})
    r = await h.call(Q.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"}, body)
    assert r.code == RC.SUCCESS, r.remark
    return brokers


async def test_silent_master_is_replaced_and_live_brokers_are_told(h: Harness) -> None:
    brokers = await set_up(h, 3)
    try:
        await wait_until(lambda: all(b.notifications for b in brokers), 3.0, "pushes of the first election")
        assert brokers[0].notifications[0].ext["masterEpoch"] == "1"
        for b in brokers:
            b.notifications.clear()
        await brokers[0].stop_beating()  # the master hangs: no heartbeats, channel stays open
        await wait_until(lambda: h.sm.image.sets["b"].master_broker_id != 1, 3.0, "a new master")
        bset = h.sm.image.sets["b"]
        assert bset.master_broker_id == 3 and bset.master_epoch == 2  # broker 3 has the largest offset
        await wait_until(lambda: all(b.notifications for b in brokers[1:]), 3.0, "role-change pushes")
        note = brokers[1].notifications[-1]
        assert note.ext["masterBrokerId"] == "3" and note.ext["masterEpoch"] == "2"
        assert note.ext["masterAddress"] == brokers[2].addr
        assert orjson.loads(note.body or b"") == {"syncStateSet": [3], "syncStateSetEpoch": 3}
        assert brokers[0].notifications == []  # the dead master is not pushed to
    finally:
        for b in brokers:
            await b.stop()


async def test_closed_channel_triggers_election_immediately(h: Harness) -> None:
    h.srv.update_config({"brokerHeartbeatTimeoutMs": "60000"})  # only the channel close can explain a switch
    brokers = await set_up(h, 2)
    try:
        await brokers[0].stop_beating(close_channel=True)
        await wait_until(lambda: h.sm.image.sets["b"].master_broker_id == 2, 2.0, "failover on channel close")
    finally:
        for b in brokers:
            await b.stop()


async def test_a_closed_channel_followed_by_a_heartbeat_moves_nothing(h: Harness) -> None:
    """A connection reset of a live broker: it heartbeats again on a new connection within the confirmation
    window, so its set keeps its master; silence after a close fails over after the window."""
    h.srv.update_config({"brokerHeartbeatTimeoutMs": "60000", "channelCloseConfirmMs": "300"})
    brokers = await set_up(h, 2)
    try:
        await brokers[0].stop_beating(close_channel=True)
        brokers[0].start_beating(0.05, max_offset=100)  # reconnects at once
        await asyncio.sleep(0.6)  # sleep-ok: twice the window, during which nothing may change
        assert h.sm.image.sets["b"].master_broker_id == 1 and h.sm.image.sets["b"].master_epoch == 1
        await brokers[0].stop_beating(close_channel=True)
        closed = asyncio.get_running_loop().time()
        await wait_until(lambda: h.sm.image.sets["b"].master_broker_id == 2, 2.0, "failover after the window")
        assert asyncio.get_running_loop().time() - closed >= 0.3
    finally:
        for b in brokers:
            await b.stop()


async def test_all_dead_then_a_replica_returns(h: Harness) -> None:
    brokers = await set_up(h, 2)
    try:
        for b in brokers:
            await b.stop_beating()
        await wait_until(lambda: h.sm.image.sets["b"].master_broker_id is None, 3.0, "master cleared")
        # 2 if both expired in the same liveness tick, 3 if broker 2 outlived broker 1 by a tick and was elected
        # before it expired too: the two stop_beating calls are not simultaneous
        cleared = h.sm.image.sets["b"].master_epoch
        assert cleared in (2, 3)
        brokers[1].start_beating(0.05)
        await wait_until(lambda: h.sm.image.sets["b"].master_broker_id == 2, 3.0, "re-election on revival")
        assert h.sm.image.sets["b"].master_epoch == cleared + 1
    finally:
        for b in brokers:
            await b.stop()


async def test_followers_do_not_trigger_elections(h: Harness) -> None:
    brokers = await set_up(h, 2)
    try:
        h.raft.set_leader(False, "n1")
        await brokers[0].stop_beating()
        await wait_until(lambda: not h.srv.live.is_alive("b", 1), 2.0, "master seen dead")
        await wait_until(lambda: h.srv.live.live_count == 1, 2.0, "expiry processed")
        assert h.sm.image.sets["b"].master_broker_id == 1
        # leadership arrives: the one pass over all sets elects right away (history is long enough)
        h.raft.set_leader(True)
        await wait_until(lambda: h.sm.image.sets["b"].master_broker_id == 2, 2.0, "election after takeover")
    finally:
        for b in brokers:
            await b.stop()


async def test_fresh_leader_waits_a_heartbeat_timeout_before_failing_over() -> None:
    h = Harness(make_config(brokerHeartbeatTimeoutMs="400", livenessTickMs="20"), leader=False)
    await h.start()
    broker = FakeBroker("c1", "b", 2, h.addr)
    try:
        # state replicated from a previous leader: master 1 (which this fresh process never heard from)
        from controller.statemachine.events import ApplyBrokerIdEvent, ElectMasterEvent, encode_event
        h.sm.apply(1, encode_event(ApplyBrokerIdEvent("c1", "b", "x:1", "x:1;1", 1)))
        h.sm.apply(2, encode_event(ApplyBrokerIdEvent("c1", "b", "x:2", "x:2;1", 2)))
        h.sm.apply(3, encode_event(ElectMasterEvent("b", 1, False, False, 0, 0, ())))
        await broker.start()
        broker.start_beating(0.05)
        h.raft.set_leader(True)
        armed = h.srv.elector.grace_until
        await wait_until(lambda: h.sm.image.sets["b"].master_epoch == 2, 3.0, "election after the grace period")
        import time
        assert time.monotonic() >= armed
        assert h.sm.image.sets["b"].master_broker_id is None  # 2 is not in the sync state set {1}
    finally:
        await broker.stop()
        await h.stop()


async def test_a_slave_appearing_first_gives_the_master_a_heartbeat_timeout(h: Harness) -> None:
    brokers = [FakeBroker("c1", "b", i, h.addr) for i in (1, 2)]
    try:
        for b in brokers:
            await b.start()
            r = await h.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c1", "brokerName": "b",
                                                            "appliedBrokerId": str(b.broker_id),
                                                            "registerCheckCode": f"{b.addr};1"})
            assert r.code == RC.SUCCESS
        r = await h.call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c1", "brokerName": "b", "brokerId": "1"})
        assert r.code == RC.SUCCESS
        brokers[1].start_beating(0.05)  # the slave's heartbeats arrive before the master's first one
        await wait_until(lambda: h.srv.live.is_alive("b", 2), 2.0, "slave alive")
        brokers[0].start_beating(0.05)
        await asyncio.sleep(0.6)  # sleep-ok: two heartbeat timeouts in which no election may happen
        assert h.sm.image.sets["b"].master_epoch == 1 and h.sm.image.sets["b"].master_broker_id == 1
        # the master then dies: nobody else is in its sync state set {1}, so the set is left without a master
        await brokers[0].stop_beating(close_channel=True)
        await wait_until(lambda: h.sm.image.sets["b"].master_epoch == 2, 2.0, "failover of the silent master")
        assert h.sm.image.sets["b"].master_broker_id is None
    finally:
        for b in brokers:
            await b.stop()
