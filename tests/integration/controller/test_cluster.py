"""Three real mqcontroller processes: leader SIGKILL under load, snapshot catch-up, error codes on the wire."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator

import orjson
import pytest

from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError
from tests.integration.controller.cluster import ControllerProcs

ELECTION_TIMEOUT_S = 0.5


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[ControllerProcs]:
    procs = ControllerProcs(tmp_path, extra={"raftSnapshotThresholdEntries": "400",
                                             "raftSnapshotTrailingEntries": "50"})
    procs.start_all()
    try:
        yield procs
    finally:
        procs.stop_all()


def apply_ext(name: str, bid: int = 1) -> dict[str, str]:
    return {"clusterName": "c", "brokerName": name, "appliedBrokerId": str(bid), "registerCheckCode": f"h{bid}:1;1"}


async def write_until_acked(c: ControllerClient, name: str, deadline: float) -> bool:
    """Retry one idempotent write (same check code) until it is acknowledged; False if the deadline passes."""
    while time.monotonic() < deadline:
        try:
            resp = await c.leader_call(Q.CONTROLLER_APPLY_BROKER_ID, apply_ext(name), deadline_s=2.0,
                                       idempotent=True)  # same check code: a retry is harmless
        except (ConnectionClosed, RemotingTimeout, ControllerError, OSError):
            continue
        if resp.code == RC.SUCCESS:
            return True
    return False


async def names_on(c: ControllerClient, addr: str, names: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(names), 1000):
        found |= set(await c.sync_state_data(names[i:i + 1000], addr=addr))
    return found


async def wait_all_members_have(cluster: ControllerProcs, c: ControllerClient, names: list[str],
                                timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    missing: dict[str, int] = {}
    while time.monotonic() < end:
        missing = {}
        for addr in cluster.addrs:
            try:
                have = await names_on(c, addr, names)
            except (ConnectionClosed, RemotingTimeout, ControllerError, OSError):
                have = set()
            if len(have) != len(names):
                missing[addr] = len(names) - len(have)
        if not missing:
            return
        await asyncio.sleep(0.1)  # sleep-ok: polling other processes for replication to finish
    raise AssertionError(f"members still miss acknowledged writes: {missing}")


async def test_leader_sigkill_under_load_loses_no_acknowledged_write(cluster: ControllerProcs) -> None:
    c = ControllerClient(cluster.addrs, timeout=2.0)
    try:
        old = await cluster.leader(c)
        acked: list[str] = []
        stop = asyncio.Event()

        async def writer(w: int) -> None:
            wc = ControllerClient(cluster.addrs, timeout=2.0)
            k = 0
            try:
                while not stop.is_set():
                    name = f"w{w}-{k}"
                    if await write_until_acked(wc, name, time.monotonic() + 20):
                        acked.append(name)
                    k += 1
            finally:
                await wc.close()

        writers = [asyncio.ensure_future(writer(w)) for w in range(16)]
        end = time.monotonic() + 20
        while len(acked) < 300 and time.monotonic() < end:
            await asyncio.sleep(0.01)  # sleep-ok: letting load build up
        assert len(acked) >= 300, cluster.tail(old)
        t_kill = time.monotonic()
        cluster.kill(old)
        new = await cluster.leader(c, timeout=10, exclude=old)
        t_leader = time.monotonic() - t_kill
        at_kill = len(acked)
        while len(acked) < at_kill + 1 and time.monotonic() < t_kill + 10:
            await asyncio.sleep(0.005)  # sleep-ok: waiting for the first write acknowledged by the new leader
        t_serve = time.monotonic() - t_kill
        while len(acked) < at_kill + 300 and time.monotonic() < t_kill + 20:
            await asyncio.sleep(0.01)  # sleep-ok: more load on the new leader
        stop.set()
        await asyncio.gather(*writers)
        assert new != old
        print(f"new leader after {t_leader * 1000:.0f} ms, first acknowledged write after {t_serve * 1000:.0f} ms")
        # within 2 election timeouts; 0.3 s slack for polling and process scheduling on a loaded machine
        assert t_leader < 2 * ELECTION_TIMEOUT_S + 0.3, f"new leader after {t_leader:.3f}s"
        assert t_serve < 2 * ELECTION_TIMEOUT_S + 0.5, f"first write on the new leader after {t_serve:.3f}s"
        cluster.start(old)  # the old leader comes back as a follower and catches up
        await wait_all_members_have(cluster, c, acked)
    finally:
        await c.close()


async def test_member_down_through_compaction_catches_up_by_snapshot(cluster: ControllerProcs) -> None:
    c = ControllerClient(cluster.addrs, timeout=2.0)
    try:
        leader = await cluster.leader(c)
        down = (leader + 1) % 3
        cluster.kill(down)
        names = [f"s{i}" for i in range(1500)]  # > 3 x raftSnapshotThresholdEntries: the log is compacted

        async def worker(part: list[str]) -> None:
            for n in part:
                assert await write_until_acked(c, n, time.monotonic() + 30)

        await asyncio.gather(*(worker(names[i::32]) for i in range(32)))
        cluster.start(down)
        await wait_all_members_have(cluster, c, names)
        log = cluster.log_path(down).read_text(errors="replace")
        assert "snapshot_installed" in log, "the restarted member should have caught up by installing a snapshot"
    finally:
        await c.close()


async def test_error_codes_on_the_wire(cluster: ControllerProcs) -> None:
    c = ControllerClient(cluster.addrs, timeout=2.0)
    try:
        li = await cluster.leader(c)
        leader, follower = cluster.addrs[li], cluster.addrs[(li + 1) % 3]
        r = await c.call(leader, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "ghost"})
        assert r.code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
        r = await c.call(leader, Q.CONTROLLER_ELECT_MASTER, {"brokerName": "ghost", "brokerId": "1"})
        assert r.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        r = await c.call(leader, Q.CONTROLLER_REGISTER_BROKER, {"clusterName": "c", "brokerName": "ghost",
                                                                "brokerId": "1", "brokerAddress": "h:1"})
        assert r.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        r = await c.call(leader, Q.CLEAN_BROKER_DATA, {"clusterName": "c", "brokerName": "ghost"})
        assert r.code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        r = await c.call(leader, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c", "brokerName": "b"})
        assert r.code == RC.CONTROLLER_INVALID_REQUEST  # malformed: appliedBrokerId missing
        r = await c.call(leader, Q.BROKER_HEARTBEAT, {"brokerName": "b", "brokerAddr": "h:1"})
        assert r.code == RC.CONTROLLER_INVALID_REQUEST
        assert (await c.call(leader, Q.CONTROLLER_APPLY_BROKER_ID, apply_ext("b"))).code == RC.SUCCESS
        r = await c.call(leader, Q.CONTROLLER_ELECT_MASTER, {"brokerName": "b", "brokerId": "1"})
        assert r.code == RC.SUCCESS and r.ext["masterEpoch"] == "1"
        stale = {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "0"}
        r = await c.call(leader, Q.CONTROLLER_ALTER_SYNC_STATE_SET, stale,
                         orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1}))
        assert r.code == RC.CONTROLLER_FENCED_MASTER_EPOCH
        r = await c.call(follower, Q.CONTROLLER_APPLY_BROKER_ID, apply_ext("b", 2))
        assert r.code == RC.CONTROLLER_NOT_LEADER and r.ext["controllerLeaderAddress"] == leader
        r = await c.call(follower, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})  # follower read
        assert r.code == RC.SUCCESS and r.ext["masterBrokerId"] == "1"
        r = await c.call(leader, Q.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": "1",
                                                                     "masterEpoch": "1"}, b"[1,")
        assert r.code == RC.CONTROLLER_INVALID_REQUEST
    finally:
        await c.close()


async def test_silent_master_fails_over_and_the_new_master_is_told(tmp_path: pathlib.Path) -> None:
    from tests.unit.controller.harness import FakeBroker, wait_until

    procs = ControllerProcs(tmp_path, extra={"brokerHeartbeatTimeoutMs": "1000"})
    procs.start_all()
    c = ControllerClient(procs.addrs, timeout=2.0)
    brokers = [FakeBroker("c", "fo", i, procs.addrs[0], more_controllers=procs.addrs[1:]) for i in (1, 2)]
    try:
        await procs.leader(c)
        for b in brokers:
            await b.start()
            b.start_beating(0.2, max_offset=b.broker_id)
            r = await c.leader_call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c", "brokerName": "fo",
                                                                   "appliedBrokerId": str(b.broker_id),
                                                                   "registerCheckCode": f"{b.addr};1"})
            assert r.code == RC.SUCCESS
        r = await c.leader_call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c", "brokerName": "fo", "brokerId": "1"})
        assert r.code == RC.SUCCESS
        await wait_until(lambda: bool(brokers[1].notifications), 5.0, "push of the first election")
        body = orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        r = await c.leader_call(Q.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "fo", "masterBrokerId": "1",
                                                                    "masterEpoch": "1"}, body)
        assert r.code == RC.SUCCESS, r.remark
        brokers[1].notifications.clear()
        t0 = time.monotonic()
        await brokers[0].stop_beating()  # the master hangs; its connections stay open
        await wait_until(lambda: any(n.ext.get("masterBrokerId") == "2" for n in brokers[1].notifications), 10.0,
                         "role-change push naming broker 2")
        elapsed = time.monotonic() - t0
        note = brokers[1].notifications[-1]
        assert note.ext["masterEpoch"] == "2" and note.ext["masterAddress"] == brokers[1].addr
        print(f"silent master replaced and pushed after {elapsed * 1000:.0f} ms (heartbeat timeout 1000 ms)")
        assert elapsed < 1.0 + 0.2 + 1.0  # timeout + heartbeat period + wheel tick, Raft commit and push
        r = await c.call(procs.addrs[2], Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "fo"})
        assert r.code == RC.SUCCESS and r.ext["masterBrokerId"] == "2"
    finally:
        for b in brokers:
            await b.stop()
        await c.close()
        procs.stop_all()
