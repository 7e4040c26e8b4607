"""Follower reads under concurrency (bug report docs/RAFT-REQUESTS.md item 5).

Every member numbers its read contexts independently (the driver uses a per-process counter), so two
followers, or a follower and the leader itself, can register reads with identical ctx bytes at the same
time. The leader must keep them apart, and a forwarded read whose request or answer was lost must be
retried, not silently dropped until the caller's timeout.
"""

from __future__ import annotations

from controller.raft.types import MsgType
from tests.unit.raft.harness import Cluster


def _ctx(i: int) -> bytes:
    return i.to_bytes(8, "big")  # what the driver's per-process counter produced before the fix


def _confirmed(c: Cluster, nid: str) -> set[bytes]:
    return {rs.ctx for rs in c.read_states[nid] if not rs.lagging}


def _ready_cluster() -> Cluster:
    c = Cluster(3)
    c.elect("n1")
    c.propose("n1", b"x")
    c.stabilize()
    c.tick("n1", 2)
    return c


def test_concurrent_follower_reads_with_equal_contexts_on_two_followers_all_complete() -> None:
    c = _ready_cluster()
    burst = [_ctx(i) for i in range(1, 33)]
    for ctx in burst:  # both followers issue the same 32 context values at the same moment
        c["n2"].read_index(ctx)
        c["n3"].read_index(ctx)
        c["n1"].read_index(ctx)  # and the leader's own reads
    c.stabilize()
    c.tick("n1", 2)
    for nid in ("n1", "n2", "n3"):
        assert _confirmed(c, nid) == set(burst), f"{nid} lost reads"
    commit = c["n1"].log.committed
    assert all(rs.index == commit for nid in c.ids for rs in c.read_states[nid])


def test_a_later_burst_reusing_a_confirmed_context_is_answered_again() -> None:
    c = _ready_cluster()
    c["n2"].read_index(_ctx(1))
    c.stabilize()
    c.tick("n1", 2)
    assert _confirmed(c, "n2") == {_ctx(1)}
    c.read_states["n2"].clear()
    c["n3"].read_index(_ctx(1))
    c["n2"].read_index(_ctx(2))
    c.stabilize()
    c.tick("n1", 2)
    assert _confirmed(c, "n3") == {_ctx(1)} and _confirmed(c, "n2") == {_ctx(2)}


def test_a_lost_forwarded_read_request_is_retried() -> None:
    c = _ready_cluster()
    c.drop_filter = lambda m: m.type == MsgType.READ_INDEX
    c["n2"].read_index(b"lost")
    c.stabilize()
    c.drop_filter = None
    c.tick_all(c["n2"].cfg.election_ticks)
    assert _confirmed(c, "n2") == {b"lost"}


def test_a_lost_read_answer_is_retried_and_delivered_once() -> None:
    c = _ready_cluster()
    c.drop_filter = lambda m: m.type == MsgType.READ_INDEX_RESP
    c["n2"].read_index(b"r")
    c.stabilize()
    c.tick("n1", 2)
    assert c.read_states["n2"] == []
    c.drop_filter = None
    c.tick_all(c["n2"].cfg.election_ticks)
    assert [rs.ctx for rs in c.read_states["n2"]] == [b"r"]


def test_forwarded_reads_follow_a_leader_change() -> None:
    c = _ready_cluster()
    c.isolate("n1")  # the old leader never sees the request
    c["n2"].read_index(b"r")
    c.stabilize()
    c.elect("n3")
    c.tick_all(c["n2"].cfg.election_ticks)
    (rs,) = c.read_states["n2"]
    assert rs.ctx == b"r" and c["n3"].log.term(rs.index) == c["n3"].term


def test_cancelled_follower_read_is_not_retried() -> None:
    c = _ready_cluster()
    c.drop_filter = lambda m: m.type == MsgType.READ_INDEX
    c["n2"].read_index(b"gone")
    c.stabilize()
    c["n2"].cancel_read(b"gone")
    c.drop_filter = None
    c.sent.clear()
    c.tick_all(c["n2"].cfg.election_ticks)
    assert c.read_states["n2"] == []
    assert not [m for m in c.sent if m.type == MsgType.READ_INDEX]
