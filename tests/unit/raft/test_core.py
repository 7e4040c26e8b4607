"""Classic Raft cases against the pure core (Raft paper / thesis sections noted per test)."""

from __future__ import annotations

import pytest

from controller.raft.errors import NotLeaderError
from controller.raft.types import Entry, EntryKind, HardState, Message, MsgType, Role
from tests.unit.raft.harness import Cluster


def test_election_produces_one_leader_that_all_followers_know() -> None:
    # §5.2: a node whose election timer fires campaigns; a majority vote makes it leader.
    c = Cluster(3)
    c.tick_all(40)
    assert len(c.leaders()) == 1
    leader = c.leaders()[0]
    term = c[leader].term
    assert all(c[i].lead == leader and c[i].term == term for i in c.ids)


def test_propose_on_follower_raises_not_leader_with_leader_hint() -> None:
    c = Cluster(3)
    c.elect("n1")
    with pytest.raises(NotLeaderError) as info:
        c["n2"].propose(b"x")
    assert info.value.leader_id == "n1"


def test_entries_commit_and_apply_in_order_on_every_node() -> None:
    c = Cluster(3)
    c.elect("n1")
    for k in range(20):
        c.propose("n1", b"v%d" % k)
    c.stabilize()
    c.tick("n1", 2)  # heartbeat carries the final commit index to followers
    expected = [b"v%d" % k for k in range(20)]
    assert all(c.data_applied(i) == expected for i in c.ids)


def test_leader_batches_a_burst_of_proposals_into_one_append_per_follower() -> None:
    c = Cluster(3, max_batch_entries=256)
    c.elect("n1")
    c.sent.clear()
    for k in range(100):
        c.propose("n1", b"%d" % k)
    msgs = c["n1"].take_early_messages()
    apps = [m for m in msgs if m.type == MsgType.APP]
    assert sorted(m.to for m in apps) == ["n2", "n3"]
    assert all(len(m.entries) == 100 for m in apps)


def test_leader_pipelines_appends_without_waiting_for_acks() -> None:
    c = Cluster(3, max_inflight_appends=4)
    c.elect("n1")
    sent = []
    for k in range(3):  # three bursts, no ack delivered in between
        c.propose("n1", b"%d" % k)
        sent += [m for m in c["n1"].take_early_messages() if m.type == MsgType.APP and m.to == "n2"]
    assert [len(m.entries) for m in sent] == [1, 1, 1]
    assert [m.index for m in sent] == [sent[0].index, sent[0].index + 1, sent[0].index + 2]


def test_prevote_keeps_a_partitioned_node_from_disrupting_the_leader_on_rejoin() -> None:
    # Thesis §9.6: without pre-vote the rejoining node's inflated term would depose the leader.
    c = Cluster(3)
    c.elect("n1")
    term = c["n1"].term
    c.isolate("n3")
    c.tick_all(100)  # n3 times out again and again
    assert c["n3"].term == term, "pre-vote must stop n3 from bumping its term"
    c.heal()
    c.tick_all(30)
    assert c.leaders() == ["n1"] and c["n1"].term == term


def test_follower_that_hears_the_leader_ignores_vote_requests() -> None:
    # Check-quorum companion (thesis §4.2.3): votes are refused while a leader is known to be alive.
    c = Cluster(3)
    c.elect("n1")
    c.tick_all(15)
    c["n3"].campaign()  # pre-vote round: n2 is in lease and ignores it
    c.stabilize()
    assert c.leaders() == ["n1"]
    assert c["n3"].role != Role.LEADER


def test_check_quorum_makes_an_isolated_leader_step_down() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.isolate("n1")
    for _ in range(2 * c["n1"].cfg.election_ticks):
        c.tick("n1")
    assert c["n1"].role == Role.FOLLOWER


def test_conflicting_uncommitted_entries_are_overwritten_by_the_new_leader() -> None:
    # §5.3: the leader forces followers' logs to duplicate its own.
    c = Cluster(3)
    c.elect("n1")
    c.isolate("n1")
    for k in range(5):
        c.propose("n1", b"lost%d" % k)  # never reaches a majority
    c.stabilize()
    c.elect("n2")
    c.propose("n2", b"kept")
    c.stabilize()
    c.heal()
    c.tick("n2", 2)
    c.tick_all(3)
    logs = {i: [(e.term, e.data) for e in c[i].log.entries] for i in c.ids}
    assert logs["n1"] == logs["n2"] == logs["n3"]
    assert all(b"lost" not in d for i in c.ids for d in c.data_applied(i))
    assert c.data_applied("n1")[-1] == b"kept"


def test_reject_hint_skips_a_whole_divergent_term_per_round_trip() -> None:
    c = Cluster(3)
    base = [Entry(1, 1, EntryKind.NORMAL, b"a")]
    c.set_state("n1", HardState(5, "", 1), base + [Entry(i, 5, EntryKind.NORMAL, b"L") for i in range(2, 6)])
    c.set_state("n2", HardState(5, "", 1), base + [Entry(i, 5, EntryKind.NORMAL, b"L") for i in range(2, 6)])
    c.set_state("n3", HardState(3, "", 1), base + [Entry(i, 3, EntryKind.NORMAL, b"X") for i in range(2, 60)])
    c.elect("n1")
    c.tick("n1", 4)
    rejects = [m for m in c.sent if m.type == MsgType.APP_RESP and m.frm == "n3" and m.reject]
    assert len(rejects) <= 2, "conflict-by-term hint must not probe one index at a time"
    assert [e.term for e in c["n3"].log.entries] == [e.term for e in c["n1"].log.entries]


def test_leader_counts_replicas_only_for_entries_of_its_own_term() -> None:
    # §5.4.2 / Figure 8: an old-term entry on a majority is not committed by counting replicas.
    c = Cluster(5)
    old = [Entry(1, 1, EntryKind.NORMAL, b"a"), Entry(2, 2, EntryKind.NORMAL, b"b")]
    c.set_state("n1", HardState(3, "", 1), old)
    c.drop_filter = lambda m: m.type == MsgType.APP  # votes only: we feed acks by hand below
    c.elect("n1")  # term 4; appends its no-op at index 3
    leader = c["n1"]
    assert leader.term == 4 and leader.log.committed == 1 and leader.prs["n1"].match == 3
    for p in ("n2", "n3"):
        leader.prs[p].match = 2  # index 2 (term 2) now sits on n1, n2, n3: a majority
    assert not leader.maybe_commit()
    assert leader.log.committed == 1
    leader.prs["n2"].match = 3
    leader.prs["n3"].match = 3
    assert leader.maybe_commit()
    assert leader.log.committed == 3  # committing the term-4 entry commits index 2 indirectly


def test_lagging_follower_catches_up_by_snapshot_install() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.isolate("n3")
    for k in range(30):
        c.propose("n1", b"%d" % k)
    c.stabilize()
    leader = c["n1"]
    snap = leader.snapshot_at(leader.log.applied, b"image-at-%d" % leader.log.applied)
    leader.compact(snap, trailing_entries=0)
    assert leader.log.offset == snap.index
    c.heal()
    c.tick("n1", 4)
    assert [s.index for s in c.restored["n3"]] == [snap.index]
    assert c["n3"].log.applied == snap.index and c["n3"].log.offset == snap.index
    c.propose("n1", b"after")
    c.stabilize()
    c.tick("n1", 2)
    assert c.data_applied("n3") == [b"after"]


def test_read_index_needs_a_heartbeat_quorum_before_answering() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.propose("n1", b"x")
    c.stabilize()
    commit = c["n1"].log.committed
    c.isolate("n1")
    c["n1"].read_index(b"r1")
    c.stabilize()
    c.tick("n1", 4)
    assert c.read_states["n1"] == [], "a leader cut off from its peers must not confirm a read"
    c.heal()
    c.tick("n1", 2)
    assert [(r.index, r.ctx) for r in c.read_states["n1"]] == [(commit, b"r1")]


def test_fresh_leader_answers_reads_only_after_committing_its_noop() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.propose("n1", b"x")
    c.stabilize()
    c.isolate("n1")
    c.drop_filter = lambda m: m.type == MsgType.APP  # the new leader's no-op cannot replicate yet
    c.elect("n3")
    leader = c["n3"]
    leader.read_index(b"r")
    c.tick("n3", 3)  # heartbeats flow, but the read index would predate the no-op
    assert c.read_states["n3"] == []
    c.drop_filter = None
    c.tick("n3", 4)
    (rs,) = c.read_states["n3"]
    assert leader.log.term(rs.index) == leader.term, "read index must cover the new leader's no-op"


def test_lease_read_is_local_while_the_lease_holds_and_falls_back_after() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.tick("n1", 2)  # a heartbeat round acknowledged by both followers
    leader = c["n1"]
    assert leader.lease_valid()
    c.sent.clear()
    leader.lease_read(b"fast")
    assert [r.ctx for r in leader.read_states] == [b"fast"] and not leader.early_msgs
    c.isolate("n1")
    for _ in range(leader.cfg.lease_ticks):
        leader.tick()
    assert not leader.lease_valid()
    leader.read_states.clear()
    leader.lease_read(b"slow")
    assert leader.read_states == [], "an expired lease must fall back to a ReadIndex round"


def test_old_leader_lease_expires_before_any_new_leader_can_exist() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.tick_all(3)
    c.isolate("n1")
    lease_end = new_leader_at = None
    for t in range(1, 200):
        c.tick_all()
        if lease_end is None and not c["n1"].lease_valid():
            lease_end = t
        if new_leader_at is None and any(c[i].role == Role.LEADER for i in ("n2", "n3")):
            new_leader_at = t
            break
    assert lease_end is not None and new_leader_at is not None
    assert lease_end < new_leader_at


def test_follower_read_gets_the_leaders_index_and_waits_for_its_own_apply() -> None:
    c = Cluster(3)
    c.elect("n1")
    for k in range(5):
        c.propose("n1", b"%d" % k)
    c.stabilize()
    c.tick("n1", 2)
    c["n2"].read_index(b"f")
    c.stabilize()
    (rs,) = c.read_states["n2"]
    assert rs.index == c["n1"].log.committed and not rs.lagging
    assert c["n2"].log.applied >= rs.index


def test_follower_read_is_refused_when_the_follower_lags_too_far() -> None:
    c = Cluster(3, max_follower_lag_entries=5)
    c.elect("n1")
    c.drop_filter = lambda m: m.to == "n3" and m.type in (MsgType.APP, MsgType.HEARTBEAT)
    for k in range(20):
        c.propose("n1", b"%d" % k)
    c.stabilize()
    c["n3"].read_index(b"f")
    c.stabilize()
    c.tick("n1", 2)
    (rs,) = c.read_states["n3"]
    assert rs.lagging and rs.index - c["n3"].log.committed > 5


def test_advance_does_not_mark_overwritten_entries_durable() -> None:
    c = Cluster(3)
    c.elect("n1")
    c.stabilize()
    f = c["n2"]
    f.step(_app("n1", "n2", f.term, prev=f.log.last_index(), prev_term=f.log.last_term(),
                entries=[Entry(f.log.last_index() + 1, f.term, EntryKind.NORMAL, b"old")]))
    rd = f.ready()  # being persisted...
    index = rd.entries[-1].index
    new_term = f.term + 1
    f.step(_app("n3", "n2", new_term, prev=index - 1, prev_term=f.log.term(index - 1) or 0,
                entries=[Entry(index, new_term, EntryKind.NORMAL, b"new")]))
    f.advance(rd)  # ...finishes after the entry was overwritten in memory
    assert f.log.stabled == index - 1
    assert [e.data for e in f.ready().entries] == [b"new"]


def _app(frm: str, to: str, term: int, *, prev: int, prev_term: int, entries: list[Entry]) -> Message:
    return Message(MsgType.APP, frm, to, term, index=prev, log_term=prev_term, entries=entries)


def test_restarted_node_refuses_votes_during_its_first_election_timeout() -> None:
    # It may have acknowledged a leader's heartbeat just before crashing; voting at once could let a
    # second leader appear while the first still serves lease reads.
    c = Cluster(3)
    c.elect("n1")
    c.tick_all(3)
    n2 = c["n2"]
    c.set_state("n2", n2.hard_state(), list(n2.log.entries))  # crash + restart n2
    c.isolate("n1")
    c["n3"].election_elapsed = c["n3"].cfg.election_ticks
    c["n3"].campaign()
    c.stabilize()
    assert c["n3"].role != Role.LEADER
