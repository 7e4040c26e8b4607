"""Replaying the marker queue (brokerd/timer/marks.py): what a batch, a cut batch, a recall and a STATE resolve."""

from __future__ import annotations

from brokerd.logbatch import TAG_BEGIN, TAG_END, TAG_STATE
from brokerd.timer.fired import FiredSet
from brokerd.timer.marks import TAG_RECALL, Progress, pack, state_parts


def test_a_batch_resolves_its_timers_at_its_end_a_closed_cut_one_only_those_delivered() -> None:
    p = Progress()
    p.apply(TAG_BEGIN, pack(t=[5, 6, 7], d=[9], w=1000, s=-1), 0, 100)
    assert not p.fired.is_set(5)  # not before the END
    r = p.apply(TAG_END, pack(w=1100, s=-1, n=-1), 1, 200)
    assert (r.fired, r.dropped) == ([5, 6, 7], [9]) and all(p.fired.is_set(q) for q in (5, 6, 7, 9))
    p.apply(TAG_BEGIN, pack(t=[10, 11, 12], d=[], w=1200, s=-1), 2, 300)
    r = p.apply(TAG_END, pack(w=1200, s=-1, n=1), 3, 400)  # a cut batch closed after one delivery
    assert r.fired == [10] and p.fired.is_set(10) and not p.fired.is_set(11)
    r = p.apply(TAG_RECALL, pack(r=[11], w=1200, s=-1), 4, 500)
    assert r.recalled == [11] and p.fired.is_set(11) and p.next == 5


def test_floors_become_durable_with_the_log() -> None:
    p = Progress()
    p.apply(TAG_BEGIN, pack(t=[], d=[], w=1000, s=-1), 0, 100)
    p.apply(TAG_END, pack(w=2000, s=-1, n=-1), 1, 200)
    assert p.floor_ms == 2000 and p.durable(99) is None and p.durable(150) == 1000 and p.durable(10**9) == 2000


def test_a_state_snapshot_restores_the_resolved_set() -> None:
    fs = FiredSet()
    for q in (1, 2, 3, 70_000):
        fs.mark(q)
    parts = state_parts(fs, 5000, 40)
    p = Progress()
    p.load_state(parts, 40 + len(parts))
    assert p.state_at == 40 and p.floor_ms == 5000 and p.next == 41
    assert [q for q in (0, 1, 2, 3, 4, 70_000) if p.fired.is_set(q)] == [1, 2, 3, 70_000]
    p.apply(TAG_STATE, parts[0], 41, 999)
    assert p.state_at == 41


def test_a_foreign_body_is_skipped() -> None:
    p = Progress()
    r = p.apply(TAG_END, b"\xc1 not msgpack", 0, 10)
    assert (r.fired, p.next) == ([], 1)
