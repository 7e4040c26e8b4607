"""The pure POP state: record effects, commit points, FIFO blocking, and snapshots that restore exactly."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.pop.records import BatchBegin, BatchEnd, Checkpoint, Renew, StateChunk, state_chunks
from brokerd.pop.state import PopState

Q = ("G", "T", 0)


def ck(start: int, offsets: tuple[int, ...], pop_time: int = 1000, invisible: int = 100, order: bool = False,
       counts: tuple[int, ...] = ()) -> Checkpoint:  # fmt: skip
    return Checkpoint("G", "T", 0, start, pop_time, invisible, offsets, max(offsets) + 1, order, counts)


def test_commit_point_is_the_lowest_unresolved_offset() -> None:
    s = PopState()
    s.ensure_queue(Q, 0, False)
    a, b = ck(0, (0, 1, 2)), ck(3, (3, 5), pop_time=1001)  # 4 was filtered out
    s.apply_ck(a)
    s.apply_ck(b)
    assert s.queues[Q].next == 6 and s.commit_of(Q) == 0
    assert s.apply_ack(a.key, (0, 1)) == [0, 1]
    assert s.commit_of(Q) == 2
    assert s.apply_ack(a.key, (2, 9)) == [2] and a.key not in s.cks
    assert s.commit_of(Q) == 3
    s.apply_resolve([(*b.key, 3), (*b.key, 5)])
    assert s.commit_of(Q) == 6 and not s.cks and s.next_due() is None


def test_checks_of_handles() -> None:
    s = PopState()
    a = ck(0, (0, 1))
    s.apply_ck(a)
    assert s.check(a.key, 0) is None
    assert "not found" in (s.check((*Q, 0, 999), 0) or "")
    s.apply_renew(Renew(a.key, 1, 1060, 500))
    assert "not in flight" in (s.check(a.key, 1) or "")  # moved to the new checkpoint
    assert s.check((*Q, 1, 1060), 1) is None
    assert s.due(1100) == [a.key] and s.expired_items(a.key, 1100) == [(*a.key, 0)]
    assert s.check(a.key, 0) is None  # its time passed, not revived yet: an ack still applies
    s.apply_ack(a.key, (0,))
    assert s.expired_items(a.key, 1100) == []  # acknowledged: nothing to revive
    assert s.check(a.key, 0) == "checkpoint not found (acked, revived or never popped here)"


def test_fifo_blocks_until_acked_or_expired_and_counts_deliveries() -> None:
    s = PopState()
    s.ensure_queue(Q, 0, True)
    a = ck(0, (0, 1), order=True, counts=(0, 0))
    s.apply_ck(a)
    assert s.blocked(Q, 1050) and not s.blocked(Q, 1100)
    s.apply_renew(Renew(a.key, 0, 1000, 400))  # offset 0 invisible until 1400
    assert s.blocked(Q, 1200) and not s.blocked(Q, 1400)
    assert s.handle_key(Q, 0, 1000, True) == a.key and s.handle_key(Q, 7, 1000, True) == a.key
    s.apply_ack(a.key, (1,))
    assert s.is_resolved(Q, 1) and not s.is_resolved(Q, 0) and s.delivered_count(Q, 0) == 1
    b = ck(0, (0, 2), pop_time=1500, order=True, counts=(1, 0))  # 1 skipped: acked
    s.apply_ck(b)
    assert a.key not in s.cks and s.delivered_count(Q, 0) == 2 and s.queues[Q].floor == 0
    s.apply_ack(b.key, (0, 2))
    assert s.commit_of(Q) == 3 and not s.queues[Q].counts


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pop", "ack", "renew", "revive"]), st.integers(0, 40),
                          st.booleans()), max_size=40))
def test_snapshots_restore_exactly(ops: list[tuple[str, int, bool]]) -> None:
    s = PopState()
    now = 1000
    for kind, x, order in ops:
        now += 7
        q = ("G", "T", x % 2)
        qs = s.queues.get(q)
        if kind == "pop" and (qs is None or qs.order == order) and not s.blocked(q, now):
            start = (qs.floor if order else qs.next) if qs else 0
            offs = tuple(range(start, start + 1 + x % 3))
            counts = tuple(s.delivered_count(q, o) for o in offs) if order and qs else ((0,) * len(offs) if order else ())
            s.ensure_queue(q, 0, order)
            s.apply_ck(Checkpoint("G", "T", q[2], start, now, 50, offs, offs[-1] + 1, order, counts))
        elif s.cks:
            key = sorted(s.cks)[x % len(s.cks)]
            pending = sorted(s.cks[key].pending)
            if not pending:
                continue
            o = pending[x % len(pending)]
            if kind == "ack":
                s.apply_ack(key, (o,))
            elif kind == "renew":
                s.apply_renew(Renew(key, o, now + 1, 30))
            else:
                s.apply_resolve([(*key, o)])
        data = s.snapshot()
        again = PopState.restore(data)
        assert again.snapshot() == data
        assert PopState.restore(snapshot_v1(s)).snapshot() == data  # what an older broker wrote reads the same
        for q2 in s.queues:
            assert again.commit_of(q2) == s.commit_of(q2)
        for t in (now - 60, now, now + 60):
            assert s.inflight_by_group(t) == inflight_per_offset(s, t)


def test_record_codecs_round_trip() -> None:
    c = ck(3, (3, 4), order=True, counts=(1, 0))
    b = BatchBegin(((*c.key, 3),), ((*c.key, 4),))
    assert BatchBegin.decode(b.encode()) == b
    assert BatchEnd.decode(BatchEnd(True, 2).encode()) == BatchEnd(True, 2)
    chunks = state_chunks(b"x" * 10, 4)
    assert [StateChunk.decode(x.encode()) for x in chunks] == chunks and len(chunks) == 3


def snapshot_v1(s: PopState) -> bytes:
    """The state as format 1 wrote it (every offset listed)."""
    queues = [[*q, qs.next, qs.order, qs.floor, sorted(qs.counts.items()), sorted(qs.resolved), list(qs.live or ())]
              for q, qs in s.queues.items()]
    cks = [[list(cs.ck.key), cs.ck.invisible, list(cs.ck.offsets), cs.ck.next, cs.ck.order, list(cs.ck.counts),
            sorted(cs.pending), sorted(cs.acked), sorted(cs.deadlines.items())] for cs in s.cks.values()]
    out: bytes = msgpack.packb([1, queues, cks], use_bin_type=True)
    return out


def inflight_per_offset(s: PopState, now: int) -> dict[str, tuple[int, int]]:
    """``inflight_by_group`` counted offset by offset (the reference)."""
    out: dict[str, list[int]] = {}
    for key, cs in s.cks.items():
        f = out.setdefault(key[0], [0, 0])
        f[0] += len(cs.pending)
        f[1] += sum(1 for o in cs.pending if cs.deadline(o) <= now)
    for (g, _, _), qs in s.queues.items():
        if qs.order:
            live = s.cks.get(qs.live) if qs.live is not None else None
            extra = len(qs.counts) - (len(live.pending) if live is not None else 0)
            if extra > 0:
                out.setdefault(g, [0, 0])[0] += extra
    return {g: (v[0], v[1]) for g, v in out.items()}


def test_a_snapshot_of_untouched_pops_writes_runs_not_offsets() -> None:
    s = PopState()
    for i in range(100):
        s.apply_ck(Checkpoint("G", "T", 0, i * 32, 1000 + i, 60_000, range(i * 32, i * 32 + 32), i * 32 + 32))
    assert len(s.snapshot()) < len(snapshot_v1(s)) / 4
    half = s.cks[("G", "T", 0, 0, 1000)]
    s.apply_ack(half.ck.key, range(0, 32, 2))
    again = PopState.restore(s.snapshot())
    assert again.cks[half.ck.key].pending == set(range(1, 32, 2)) and again.cks[half.ck.key].acked == set(range(0, 32, 2))
    assert again.inflight_by_group(1000 + 60_000) == {"G": (100 * 32 - 16, 32 - 16)}
