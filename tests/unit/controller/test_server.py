"""The controller role over real sockets on the in-memory fake Raft: wire codes, request classes, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from tests.unit.controller.harness import Harness, make_config


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness(make_config())
    await harness.start()
    yield harness
    await harness.stop()


async def register(h: Harness, name: str, broker_id: int, addr: str, cluster: str = "c1") -> None:
    r = await h.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": cluster, "brokerName": name,
                                                    "appliedBrokerId": str(broker_id),
                                                    "registerCheckCode": f"{addr};{broker_id}"})
    assert r.code == RC.SUCCESS, r.remark
    r = await h.call(Q.CONTROLLER_REGISTER_BROKER, {"clusterName": cluster, "brokerName": name,
                                                    "brokerId": str(broker_id), "brokerAddress": addr})
    assert r.code == RC.SUCCESS, r.remark


async def test_broker_startup_flow_over_the_wire(h: Harness) -> None:
    r = await h.call(Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "c1", "brokerName": "b"})
    assert r.code == RC.SUCCESS and r.ext["nextBrokerId"] == "1"
    await register(h, "b", 1, "10.0.0.1:10911")  # port-ok: address data, nothing binds it
    r = await h.call(Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "c1", "brokerName": "b"})
    assert r.ext["nextBrokerId"] == "2"
    r = await h.call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c1", "brokerName": "b", "brokerId": "1"})
    assert r.code == RC.SUCCESS and r.ext["masterBrokerId"] == "1" and r.ext["masterEpoch"] == "1"
    assert orjson.loads(r.body or b"")["brokerMemberGroup"]["brokerAddrs"] == {"1": "10.0.0.1:10911"}  # port-ok: address data, nothing binds it
    r = await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
    assert r.code == RC.SUCCESS and r.ext["masterAddress"] == "10.0.0.1:10911"  # port-ok: address data, nothing binds it
    assert orjson.loads(r.body or b"") == {"syncStateSet": [1], "syncStateSetEpoch": 1}
    assert h.raft.read_index_calls >= 2  # consistent reads went through ReadIndex (the default mode)


async def test_bad_requests_get_the_spec_codes(h: Harness) -> None:
    r = await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "unknown"})
    assert r.code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    r = await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {})
    assert r.code == RC.CONTROLLER_INVALID_REQUEST and "brokerName" in (r.remark or "")
    r = await h.call(Q.BROKER_HEARTBEAT, {"clusterName": "c1", "brokerName": "b", "brokerAddr": "x:1"})
    assert r.code == RC.CONTROLLER_INVALID_REQUEST and "brokerId" in (r.remark or "")
    r = await h.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c1", "brokerName": "b", "appliedBrokerId": "x1",
                                                    "registerCheckCode": "a;1"})
    assert r.code == RC.CONTROLLER_INVALID_REQUEST
    await register(h, "b", 1, "10.0.0.1:1")
    await h.call(Q.CONTROLLER_ELECT_MASTER, {"brokerName": "b", "brokerId": "1"})
    alter = {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"}
    r = await h.call(Q.CONTROLLER_ALTER_SYNC_STATE_SET, alter, b"{not json")
    assert r.code == RC.CONTROLLER_INVALID_REQUEST
    r = await h.call(Q.CONTROLLER_ALTER_SYNC_STATE_SET, alter, b'{"syncStateSet": "1", "syncStateSetEpoch": 1}')
    assert r.code == RC.CONTROLLER_INVALID_REQUEST
    stale = dict(alter, masterEpoch="0")
    r = await h.call(Q.CONTROLLER_ALTER_SYNC_STATE_SET, stale, orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1}))
    assert r.code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    r = await h.call(Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, b'{"a": 1}')
    assert r.code == RC.CONTROLLER_INVALID_REQUEST
    r = await h.call(Q.CLEAN_BROKER_DATA, {"clusterName": "c1", "brokerName": "nope"})
    assert r.code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    # nothing was lost or changed by the bad requests
    assert h.sm.image.sets["b"].master_epoch == 1 and h.sm.image.sets["b"].sync_state_set == {1}


async def test_non_leader_redirects_writes_and_serves_follower_reads(h: Harness) -> None:
    await register(h, "b", 1, "10.0.0.1:1")
    h.raft.set_leader(False, "n2")
    r = await h.call(Q.CONTROLLER_ELECT_MASTER, {"brokerName": "b", "brokerId": "1"})
    assert r.code == RC.CONTROLLER_NOT_LEADER
    assert r.ext["controllerLeaderId"] == "n2" and r.ext["controllerLeaderAddress"] == "127.0.0.1:19003"  # port-ok: data, nothing binds it
    r = await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
    assert r.code == RC.SUCCESS and h.raft.follower_read_calls == 1
    h.raft.follower_lagging = True  # too far behind: refuse and point at the leader
    r = await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
    assert r.code == RC.CONTROLLER_NOT_LEADER and r.ext["controllerLeaderAddress"] == "127.0.0.1:19003"  # port-ok: data, nothing binds it
    h.srv.update_config({"controllerFollowerRead": "false"})
    h.raft.follower_lagging = False
    r = await h.call(Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "c1", "brokerName": "b"})
    assert r.code == RC.CONTROLLER_NOT_LEADER
    # unsafe reads and metadata are answered by any member
    r = await h.call(Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, b'["b"]')
    assert r.code == RC.SUCCESS and "b" in orjson.loads(r.body or b"")["replicasInfoTable"]
    r = await h.call(Q.CONTROLLER_GET_METADATA_INFO)
    assert r.ext == {"group": "g", "controllerLeaderId": "n2", "controllerLeaderAddress": "127.0.0.1:19003",  # port-ok: data, nothing binds it
                     "isLeader": "false",
                     "peers": "n0:127.0.0.1:19001;n1:127.0.0.1:19002;n2:127.0.0.1:19003;"}  # port-ok: data, nothing binds it


async def test_read_modes(h: Harness) -> None:
    await register(h, "b", 1, "10.0.0.1:1")
    before = h.raft.proposals
    h.srv.update_config({"controllerReadMode": "log"})
    assert (await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})).code == RC.SUCCESS
    assert h.raft.proposals == before + 1  # a log read appends an entry
    h.srv.update_config({"controllerReadMode": "lease"})
    assert (await h.call(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})).code == RC.SUCCESS
    assert h.raft.lease_read_calls == 1 and h.raft.proposals == before + 1


async def test_racing_id_applications_over_the_wire_one_winner(h: Harness) -> None:
    await register(h, "b", 1, "10.0.0.1:1")
    h.raft.hold()
    calls = [asyncio.ensure_future(h.call(Q.CONTROLLER_APPLY_BROKER_ID, {
        "clusterName": "c1", "brokerName": "b", "appliedBrokerId": "2", "registerCheckCode": f"10.0.0.{i}:1;{i}"}))
        for i in range(20)]
    await asyncio.sleep(0.05)  # sleep-ok: let all 20 requests reach the held fake log
    assert h.raft.inflight == 20  # decided concurrently, all proposals in flight together
    h.raft.release()
    codes = [r.code for r in await asyncio.gather(*calls)]
    assert codes.count(RC.SUCCESS) == 1 and codes.count(RC.CONTROLLER_BROKER_ID_INVALID) == 19


async def test_config_get_and_update(h: Harness) -> None:
    r = await h.call(Q.GET_CONTROLLER_CONFIG)
    assert r.code == RC.SUCCESS and b"controllerDLegerGroup=g\n" in (r.body or b"")
    r = await h.call(Q.UPDATE_CONTROLLER_CONFIG, {}, b"enableElectUncleanMaster=true\n")
    assert r.code == RC.SUCCESS and h.srv.cfg.enable_elect_unclean_master
    r = await h.call(Q.UPDATE_CONTROLLER_CONFIG, {}, b"controllerDLegerPeers=n0-1.2.3.4:5\n")
    assert r.code == RC.NO_PERMISSION and "controllerDLegerPeers" in (r.remark or "")
    r = await h.call(Q.UPDATE_CONTROLLER_CONFIG, {}, b"electMasterMaxRetryCount=lots\n")
    assert r.code == RC.INVALID_PARAMETER and "electMasterMaxRetryCount" in (r.remark or "")
    r = await h.call(Q.UPDATE_CONTROLLER_CONFIG, {}, b"noSuchKey=1\n")
    assert r.code == RC.INVALID_PARAMETER and "noSuchKey" in (r.remark or "")
    assert h.srv.cfg.elect_master_max_retry_count == 3


async def test_legacy_mode_runs_one_request_at_a_time() -> None:
    h = Harness(make_config(controllerLegacyMode="true"))
    await h.start()
    try:
        await register(h, "b", 1, "10.0.0.1:1")
        h.raft.hold()
        calls = [asyncio.ensure_future(h.call(Q.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": "c1", "brokerName": f"s{i}", "appliedBrokerId": "1", "registerCheckCode": "a;1"}))
            for i in range(10)]
        await asyncio.sleep(0.05)  # sleep-ok: give the requests time to queue up
        assert h.raft.inflight == 1 and h.srv.executor.queue.qsize() == 9  # type: ignore[union-attr]
        h.raft.release()
        assert all(r.code == RC.SUCCESS for r in await asyncio.gather(*calls))
        assert h.raft.max_inflight == 1 and len(h.sm.image.sets) == 11
    finally:
        await h.stop()


async def test_lost_leadership_during_a_write_is_reported_as_unknown_outcome(h: Harness) -> None:
    from controller.raft.errors import CommitUnknownError, NotLeaderError

    h.raft.fail_next = CommitUnknownError("n1", "127.0.0.1:19002")  # port-ok: data, nothing binds it
    r = await h.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c1", "brokerName": "b", "appliedBrokerId": "1",
                                                    "registerCheckCode": "a;1"})
    assert r.code == RC.CONTROLLER_NOT_LEADER and r.ext["outcomeUnknown"] == "true"
    assert r.ext["controllerLeaderAddress"] == "127.0.0.1:19002"  # port-ok: data, nothing binds it
    h.raft.fail_next = NotLeaderError("n1", "127.0.0.1:19002")  # never appended: a plain redirect (port-ok: data, nothing binds it)
    r = await h.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c1", "brokerName": "b", "appliedBrokerId": "1",
                                                    "registerCheckCode": "a;1"})
    assert r.code == RC.CONTROLLER_NOT_LEADER and "outcomeUnknown" not in r.ext
