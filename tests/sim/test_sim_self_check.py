"""The simulator must catch real bugs: inject known-bad behaviour into the core and expect a failure
whose message names the seed and the replay command (a negative control for the seed sweep)."""

from __future__ import annotations

import pytest

from controller.raft.log import RaftLog
from controller.raft.read_only import ForwardedReads, ReadOnly
from controller.raft.types import ReadState
from controller.raft.waiters import ReadOutcome, ReadWaiters
from tests.sim.cluster import SimFailure, run_seed


def first_failure(seeds: range) -> str:
    for seed in seeds:
        try:
            run_seed(seed, 3 if seed % 2 == 0 else 5, 5000)
        except SimFailure as e:
            return str(e)
    raise AssertionError("the simulator did not notice the injected bug")


def test_voting_without_the_log_check_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RaftLog, "is_up_to_date", lambda self, index, term: True)
    msg = first_failure(range(60))
    assert "seed=" in msg and "python scripts/sim.py --seed" in msg


def test_serving_reads_before_applying_the_read_index_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = ReadWaiters.on_read_state

    def too_early(self: ReadWaiters[object], rs: ReadState, applied: int) -> tuple[ReadOutcome, object]:
        return original(self, ReadState(0, rs.ctx, rs.lagging), applied)

    monkeypatch.setattr(ReadWaiters, "on_read_state", too_early)
    msg = first_failure(range(60))
    assert "stale" in msg or "not linearizable" in msg
    assert "python scripts/sim.py --seed" in msg


def test_losing_follower_reads_with_colliding_contexts_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bug of docs/RAFT-REQUESTS.md item 5: the leader keyed pending reads by ctx alone (dropping a
    # second member's read with equal ctx bytes) and followers never re-sent an unanswered read.
    def add_by_ctx_only(self: ReadOnly, index: int, ctx: bytes, frm: str, self_id: str) -> None:
        if any(s.ctx == ctx for s in self.pending.values()):
            return
        original_add(self, index, ctx, frm, self_id)

    original_add = ReadOnly.add_request
    monkeypatch.setattr(ReadOnly, "add_request", add_by_ctx_only)
    monkeypatch.setattr(ForwardedReads, "due", lambda self, now, *, all_of_them: [])
    msg = first_failure(range(10))
    assert "follower reads on a healthy cluster" in msg and "never completed" in msg
    assert "python scripts/sim.py --seed" in msg
