"""QUERY_ASSIGNMENT's allocation: RocketMQ's AVG / AVG_BY_CIRCLE strategies and allocate4Pop."""

from __future__ import annotations

from brokerd.pop.allocate import assign

MQS = [("T", b, q) for b in ("broker-a", "broker-b") for q in range(4)]


def test_averagely_splits_sorted_queues_over_sorted_clients() -> None:
    cids = ["c2", "c1", "c3"]
    got = {c: assign("AVG", c, MQS, cids, False, 0) for c in cids}
    assert got["c1"] == [("T", "broker-a", 0), ("T", "broker-a", 1), ("T", "broker-a", 2)]
    assert got["c2"] == [("T", "broker-a", 3), ("T", "broker-b", 0), ("T", "broker-b", 1)]
    assert got["c3"] == [("T", "broker-b", 2), ("T", "broker-b", 3)]
    assert assign("AVG_BY_CIRCLE", "c1", MQS, cids, False, 0) == [("T", "broker-a", 0), ("T", "broker-a", 3),
                                                                    ("T", "broker-b", 2)]
    assert assign("AVG", "stranger", MQS, cids, False, 0) == []
    assert assign("NO_SUCH", "c1", MQS, cids, False, 0) is None
    assert assign("AVG", "c1", [], cids, False, 0) is None


def test_pop_mode_shares_queues() -> None:
    cids = ["c1", "c2", "c3"]
    every = assign("AVG", "c2", MQS, cids, True, 0)
    assert every == [("T", "broker-a", -1), ("T", "broker-b", -1)]  # each client pops all queues of every broker
    shared = assign("AVG", "c1", MQS, cids, True, 1)  # its own share and the next client's
    own, next_one = assign("AVG", "c1", MQS, cids, False, 0), assign("AVG", "c2", MQS, cids, False, 0)
    assert own is not None and next_one is not None and shared == own + next_one
    many = [f"c{i}" for i in range(12)]
    assert assign("AVG", "c9", MQS, many, True, 1) == [MQS[sorted(many).index("c9") % 8]]  # one each, at least
