"""RaftNode end to end: three members in one event loop, real TCP on port 0, real WAL files with fsync."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.raft.api import NotLeaderError
from tests.integration.raft.conftest import RaftCluster, wait_until
from tests.sim.kv import KVStateMachine, encode_put

pytestmark = pytest.mark.timeout(120)


def has_value(kv: KVStateMachine, key: str, value: int) -> Callable[[], bool]:
    return lambda: kv.get(key)[0] == value


async def test_concurrent_proposals_survive_leader_failover_and_restart(
    cluster_factory: Callable[..., RaftCluster],
) -> None:
    c = cluster_factory(3)
    await c.start_all()
    leader = await c.wait_leader()
    results = await asyncio.gather(*(leader.propose(encode_put(f"k{i}", i)) for i in range(1000)))
    assert len(set(results)) == 1000, "every proposal resolves with its own applied index"
    old = leader.cfg.self_id
    await c.stop(old)
    new = await c.wait_leader(exclude=old)
    assert new.cfg.self_id != old
    await new.propose(encode_put("after", 1))
    for nid in c.nodes:
        kv = c.sms[nid]
        await wait_until(has_value(kv, "after", 1), what=f"{nid} applies the post-failover write")
        assert all(kv.get(f"k{i}")[0] == i for i in range(1000)), f"{nid} lost a committed entry"
    restarted = await c.start(old)  # recovers from its own WAL, then catches up
    await wait_until(lambda: c.sms[old].get("after")[0] == 1, what="restarted node catches up")
    assert not restarted.is_leader or restarted.term > new.term
    assert c.sms[old].data == c.sms[new.cfg.self_id].data


async def test_restart_of_the_whole_group_from_wal_and_snapshot(
    cluster_factory: Callable[..., RaftCluster],
) -> None:
    c = cluster_factory(3, snapshot_threshold_entries=100, snapshot_trailing_entries=10)
    await c.start_all()
    leader = await c.wait_leader()
    await asyncio.gather(*(leader.propose(encode_put(f"k{i % 50}", i)) for i in range(350)))
    await wait_until(lambda: all(n.snapshots_taken >= 1 for n in c.nodes.values()), what="snapshots taken")
    expected = dict(c.sms[leader.cfg.self_id].data)
    await c.stop_all()
    await c.start_all()
    leader = await c.wait_leader()
    await leader.propose(encode_put("fresh", 1))
    for nid, kv in c.sms.items():
        await wait_until(has_value(kv, "fresh", 1), what=f"{nid} applies after restart")
        assert all(kv.get(k) == v for k, v in expected.items()), f"{nid} state differs after restart"
    assert all(c.sms[n].restores >= 1 for n in c.sms), "every node restored its snapshot image on start"


async def test_node_down_during_compaction_catches_up_by_snapshot_install(
    cluster_factory: Callable[..., RaftCluster],
) -> None:
    c = cluster_factory(3, snapshot_threshold_entries=50, snapshot_trailing_entries=5)
    await c.start_all()
    leader = await c.wait_leader()
    lagger = next(nid for nid in c.nodes if nid != leader.cfg.self_id)
    await c.stop(lagger)
    await asyncio.gather(*(leader.propose(encode_put(f"k{i}", i)) for i in range(300)))
    await wait_until(lambda: leader.core.log.offset > 50, what="leader compacts its log while the follower is down")
    node = await c.start(lagger)
    await wait_until(lambda: node.snapshots_installed >= 1, what="snapshot install on the lagging node")
    await wait_until(lambda: c.sms[lagger].get("k299")[0] == 299, what="lagging node catches up")
    assert c.sms[lagger].data == c.sms[leader.cfg.self_id].data


async def test_reads_see_acknowledged_writes_on_leader_and_followers(
    cluster_factory: Callable[..., RaftCluster],
) -> None:
    c = cluster_factory(3)
    await c.start_all()
    leader = await c.wait_leader()
    follower = next(n for n in c.nodes.values() if not n.is_leader)
    fid = follower.cfg.self_id
    for i in range(20):
        await leader.propose(encode_put("x", i))
        await follower.follower_read()
        assert c.sms[fid].get("x")[0] == i, "follower read must observe the acknowledged write"
        await leader.read_index()
        await leader.lease_read()
        assert c.sms[leader.cfg.self_id].get("x")[0] == i


async def test_requests_on_a_follower_name_the_leader(cluster_factory: Callable[..., RaftCluster]) -> None:
    c = cluster_factory(3)
    await c.start_all()
    leader = await c.wait_leader()
    follower = next(n for n in c.nodes.values() if not n.is_leader)
    await wait_until(lambda: follower.leader_id == leader.cfg.self_id, what="follower learns the leader")
    for call in (follower.propose(b"x"), follower.read_index(), follower.lease_read()):
        with pytest.raises(NotLeaderError) as info:
            await call
        assert info.value.leader_id == leader.cfg.self_id
        assert info.value.leader_addr == c.client_addrs[leader.cfg.self_id]


async def test_leadership_callbacks_fire_on_change(cluster_factory: Callable[..., RaftCluster]) -> None:
    c = cluster_factory(3)
    events: dict[str, list[bool]] = {nid: [] for nid in c.cfgs}
    await c.start_all()
    for nid, node in c.nodes.items():
        node.on_leadership_change(events[nid].append)
    leader = await c.wait_leader()
    old = leader.cfg.self_id
    await c.stop(old)
    new = await c.wait_leader(exclude=old)
    assert events[new.cfg.self_id][-1] is True


async def test_follower_restarts_after_a_torn_wal_write(cluster_factory: Callable[..., RaftCluster]) -> None:
    c = cluster_factory(3)
    await c.start_all()
    leader = await c.wait_leader()
    await asyncio.gather(*(leader.propose(encode_put(f"k{i}", i)) for i in range(100)))
    victim = next(nid for nid in c.nodes if nid != leader.cfg.self_id)
    await c.stop(victim)
    seg = sorted((Path(c.cfgs[victim].data_dir) / "wal").glob("wal-*.log"))[-1]
    with open(seg, "ab") as f:  # a record header promising more bytes than were written
        f.write(b"\x00\x00\x10\x00\x12\x34\x56\x78partial")
    await c.start(victim)
    await leader.propose(encode_put("after", 1))
    await wait_until(has_value(c.sms[victim], "after", 1), what="restarted follower catches up")
    assert c.sms[victim].data == c.sms[leader.cfg.self_id].data
