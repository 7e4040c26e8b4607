"""The POP in-flight state of one broker: pure, driven by explicit calls, rebuilt by replaying the revive log.

Per POP queue (group, topic, queue id; the topic may be the group's POP retry topic):

* ``next``: where the next pop reads (everything below was handed out once, or skipped by the filter);
* normal queues: the offsets handed out and not yet acknowledged or revived are the pending offsets of the
  queue's checkpoints; the commit point (the group's consumer offset) is the lowest of them, else ``next``
  (``commit_of``: a heap of checkpoints by their lowest pending offset, checked lazily);
* FIFO queues: the offsets between the commit point and ``next`` are resolved (acknowledged, filtered out, moved
  to the DLQ) or delivered and unresolved (``counts``: deliveries so far). The queue is blocked while its live
  checkpoint holds an unresolved offset whose deadline has not passed; then the next pop reads again from the
  commit point, skipping resolved offsets (an acknowledged message is never delivered again).

Every mutation is one of the ``apply_*`` calls, each the effect of one revive-log record (``records.py``), so the
live broker and a replay of its log reach the same state; nothing here reads a clock except the queries that
take ``now``. Queues whose commit point moved are collected in ``moved`` for the caller to store as consumer
offsets.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from brokerd.pop.records import (
    Ack,
    Checkpoint,
    CkKey,
    Item,
    Op,
    QKey,
    RecordError,
    Renew,
    Reset,
    offsets_of,
    runs,
)

SNAPSHOT_FORMAT = 2  # a checkpoint's offsets as runs (``records.runs``); 1 (lists) is still read


class CkState:
    """A checkpoint's offsets in flight (``pending``) and acknowledged (a plain class: one is made per pop)."""

    __slots__ = ("ck", "pending", "acked", "deadlines")

    def __init__(self, ck: Checkpoint, pending: set[int], acked: set[int] | None = None,
                 deadlines: dict[int, int] | None = None) -> None:  # fmt: skip
        self.ck = ck
        self.pending = pending
        self.acked: set[int] = acked if acked is not None else set()
        self.deadlines: dict[int, int] = deadlines if deadlines is not None else {}  # FIFO: an offset's new deadline

    def deadline(self, offset: int) -> int:
        return self.deadlines.get(offset, self.ck.revive_time)


@dataclass(slots=True)
class QueueState:
    next: int
    order: bool = False
    inflight: int = 0  # normal: messages in flight
    heap: list[tuple[int, CkKey]] = field(default_factory=list)  # normal: (lowest pending offset, checkpoint)
    floor: int = 0  # FIFO: the commit point (first unresolved offset)
    counts: dict[int, int] = field(default_factory=dict)  # FIFO: unresolved delivered offset -> deliveries so far
    resolved: set[int] = field(default_factory=set)  # FIFO: resolved offsets at or above ``floor``
    live: CkKey | None = None  # FIFO: the latest checkpoint of the queue

    def inflight_count(self) -> int:
        return len(self.counts) if self.order else self.inflight

    def advance_floor(self) -> None:
        while self.floor < self.next and self.floor in self.resolved:
            self.resolved.discard(self.floor)
            self.floor += 1


class PopState:
    def __init__(self) -> None:
        self.queues: dict[QKey, QueueState] = {}
        self.cks: dict[CkKey, CkState] = {}
        self._due: list[tuple[int, CkKey]] = []  # (when, checkpoint): revive / FIFO deadline checks
        self.moved: set[QKey] = set()

    # ------------------------------------------------------------------ queries

    def commit_of(self, q: QKey) -> int:
        """The queue's commit point: its lowest unresolved offset, else its next pop position."""
        qs = self.queues[q]
        if qs.order:
            return qs.floor
        heap = qs.heap
        while heap:
            low, key = heap[0]
            cs = self.cks.get(key)
            if cs is None or not cs.pending:
                heapq.heappop(heap)
                continue
            actual = min(cs.pending)
            if actual != low:
                heapq.heapreplace(heap, (actual, key))
                continue
            return min(low, qs.next)  # a reset may have moved the read position below what is in flight
        return qs.next

    def queue(self, q: QKey) -> QueueState | None:
        return self.queues.get(q)

    def ensure_queue(self, q: QKey, start: int, order: bool) -> QueueState:
        """The queue's state, created at ``start`` (its consumer offset, or the initMode position) if new."""
        qs = self.queues.get(q)
        if qs is None:
            qs = self.queues[q] = QueueState(start, order, floor=start)
        return qs

    def blocked(self, q: QKey, now: int) -> bool:
        """FIFO: the queue's live checkpoint still holds an offset whose invisible time has not passed."""
        qs = self.queues.get(q)
        if qs is None or not qs.order or qs.live is None:
            return False
        cs = self.cks.get(qs.live)
        return cs is not None and any(cs.deadline(o) > now for o in cs.pending)

    def order_start(self, q: QKey) -> int:
        qs = self.queues[q]
        return qs.floor

    def is_resolved(self, q: QKey, offset: int) -> bool:
        """FIFO: ``offset`` (at or above the commit point) was acknowledged, filtered out or dead-lettered."""
        qs = self.queues[q]
        return offset < qs.floor or offset in qs.resolved

    def delivered_count(self, q: QKey, offset: int) -> int:
        """FIFO: how often ``offset`` was delivered before (its reconsume times on the next delivery)."""
        return self.queues[q].counts.get(offset, 0)

    def handle_key(self, q: QKey, start: int, pop_time: int, order: bool) -> CkKey:
        """The checkpoint a receipt handle names. A FIFO handle is matched by its pop time against the queue's live
        checkpoint (RocketMQ's ConsumerOrderInfoManager): a changed invisible time hands out ``offset`` as the
        handle's start, not the checkpoint's."""
        if order:
            qs = self.queues.get(q)
            if qs is not None and qs.live is not None and qs.live[4] == pop_time:
                return qs.live
        return (*q, start, pop_time)

    def check(self, key: CkKey, offset: int) -> str | None:
        """Why an ACK / CHANGE_MESSAGE_INVISIBLETIME naming ``key``/``offset`` cannot apply (None: it can, or it
        is a repeated ack of an acknowledged offset: ``is_acked``). A handle whose invisible time passed still
        applies while its offset was not revived yet (RocketMQ's revive skips an offset acknowledged by then)."""
        cs = self.cks.get(key)
        if cs is None:
            return "checkpoint not found (acked, revived or never popped here)"
        if offset in cs.acked:
            return None
        if offset not in cs.pending:
            return "offset not in flight under this receipt handle (acked, revived or renewed)"
        return None

    def ack_many(self, key: CkKey, offsets: Sequence[int]) -> tuple[Sequence[int], int, str | None]:
        """``check`` and ``apply_ack`` of several offsets of one checkpoint: the offsets newly acknowledged, how
        many could not be (neither in flight nor acknowledged before), and why (None when every one could)."""
        cs = self.cks.get(key)
        if cs is None:
            return [], len(offsets), "checkpoint not found (acked, revived or never popped here)"
        pending = cs.pending
        refused = 0
        if not pending.issuperset(offsets):
            acked = cs.acked
            refused = sum(1 for o in offsets if o not in pending and o not in acked)
        done = self.apply_ack(key, offsets)
        return done, refused, "offset not in flight under this receipt handle" if refused else None

    def ack_now(self, key: CkKey, offset: int) -> bool:
        """``check`` and ``apply_ack`` of one offset in flight (the common ACK): True when acknowledged now; False
        when the general path must decide."""
        cs = self.cks.get(key)
        if cs is None or offset not in cs.pending:
            return False
        cs.pending.discard(offset)
        cs.acked.add(offset)
        self._resolved(key, cs, (offset,))
        return True

    def is_acked(self, key: CkKey, offset: int) -> bool:
        cs = self.cks.get(key)
        return cs is not None and offset in cs.acked

    def due(self, now: int) -> list[CkKey]:
        """Checkpoints with an offset whose time came (each once per scheduled time)."""
        out: list[CkKey] = []
        while self._due and self._due[0][0] <= now:
            _, key = heapq.heappop(self._due)
            if key in self.cks and key not in out:
                out.append(key)
        return out

    def next_due(self) -> int | None:
        while self._due and self._due[0][1] not in self.cks:
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else None

    def reschedule(self, key: CkKey, when: int) -> None:
        heapq.heappush(self._due, (when, key))

    def expired_items(self, key: CkKey, now: int) -> list[Item]:
        """The unresolved offsets of checkpoint ``key`` whose deadline passed."""
        cs = self.cks.get(key)
        if cs is None:
            return []
        return [(*key, o) for o in sorted(cs.pending) if cs.deadline(o) <= now]

    # ------------------------------------------------------------------ record effects (live and replay)

    def apply(self, op: Op) -> None:
        """One operation of an ``ops`` record."""
        if type(op) is Ack:
            self.apply_ack(op.key, op.offsets)
        elif type(op) is Checkpoint:
            self.apply_ck(op)
        elif type(op) is Renew:
            self.apply_renew(op)
        elif type(op) is Reset:
            self.apply_reset(op)

    def apply_ck(self, ck: Checkpoint) -> None:
        key, qkey, offsets = ck.key, ck.qkey, ck.offsets
        qs = self.queues.get(qkey) or self.ensure_queue(qkey, ck.start, ck.order)
        if ck.next > qs.next:
            qs.next = ck.next
        self.cks[key] = CkState(ck, set(offsets))
        if ck.order:
            self._apply_order_ck(qs, ck)
        elif offsets:
            qs.inflight += len(offsets)
            heapq.heappush(qs.heap, (min(offsets), key))
        heapq.heappush(self._due, (ck.pop_time + ck.invisible, key))
        self.moved.add(qkey)

    def _apply_order_ck(self, qs: QueueState, ck: Checkpoint) -> None:
        qs.order = True
        if qs.live is not None and qs.live != ck.key:  # superseded: its unresolved offsets keep their counts
            self.cks.pop(qs.live, None)
        qs.live = ck.key
        delivered = set(ck.offsets)
        for i, o in enumerate(ck.offsets):
            qs.counts[o] = (ck.counts[i] if ck.counts else 0) + 1
        for o in range(max(ck.start, qs.floor), ck.next):  # read past without delivery: filtered out or acked
            if o not in delivered:
                qs.counts.pop(o, None)
                qs.resolved.add(o)
        qs.advance_floor()

    def apply_ack(self, key: CkKey, offsets: Iterable[int]) -> Sequence[int]:
        """Acknowledge offsets of checkpoint ``key``; returns the ones newly acknowledged, ascending."""
        cs = self.cks.get(key)
        if cs is None:
            return []
        pending = cs.pending
        hit = pending.intersection(offsets)
        if len(hit) == len(pending):  # every offset still in flight: the usual batch ack of a whole pop
            cs.pending = set()
            held = cs.ck.offsets
            done: Sequence[int] = held if type(held) is range and len(held) == len(hit) else sorted(hit)
        else:
            pending.difference_update(hit)
            done = sorted(hit)
        if cs.pending or cs.ck.order:  # the checkpoint stays (``_resolved`` drops a settled normal one)
            cs.acked |= hit
        self._resolved(key, cs, done)
        return done

    def apply_renew(self, r: Renew) -> None:
        cs = self.cks.get(r.key)
        if cs is None or r.offset not in cs.pending:
            return
        g, t, q, _, _ = r.key
        if cs.ck.order:
            cs.deadlines[r.offset] = r.new_pop_time + r.invisible
            heapq.heappush(self._due, (r.new_pop_time + r.invisible, r.key))
            return
        cs.pending.discard(r.offset)
        new = Checkpoint(g, t, q, r.offset, r.new_pop_time, r.invisible, (r.offset,), 0)
        self.cks[new.key] = CkState(new, {r.offset})
        heapq.heappush(self.queues[(g, t, q)].heap, (r.offset, new.key))
        heapq.heappush(self._due, (new.revive_time, new.key))
        if not cs.pending:
            self.cks.pop(r.key, None)

    def apply_reset(self, r: Reset) -> None:
        """An admin reset of the queue's consumer offset (RocketMQ's resetPopOffset): the next pop reads from
        ``r.offset``. Checkpoints in flight stay (their acks and revives go on, as RocketMQ's do); a FIFO queue
        drops its live checkpoint and order state (RocketMQ clears the queue's block), so the old handles are stale."""
        qs = self.queues.get(r.qkey)
        if qs is None:
            return
        if qs.order:
            if qs.live is not None:
                self.cks.pop(qs.live, None)
            qs.live = None
            qs.counts.clear()
            qs.resolved.clear()
            qs.floor = r.offset
        qs.next = r.offset
        self.moved.add(r.qkey)

    def apply_resolve(self, items: Iterable[Item]) -> None:
        """Offsets revived (moved to the retry topic or the DLQ) or dropped (the message is gone)."""
        by_key: dict[CkKey, list[int]] = {}
        for g, t, q, s, pt, o in items:
            by_key.setdefault((g, t, q, s, pt), []).append(o)
        for key, offsets in by_key.items():
            cs = self.cks.get(key)
            if cs is None:
                continue
            done = [o for o in offsets if o in cs.pending]
            for o in done:
                cs.pending.discard(o)
            self._resolved(key, cs, done)

    def _resolved(self, key: CkKey, cs: CkState, offsets: Sequence[int]) -> None:
        qs = self.queues.get((key[0], key[1], key[2]))
        if qs is None:
            return
        if cs.ck.order:
            for o in offsets:
                qs.counts.pop(o, None)
                qs.resolved.add(o)
            qs.advance_floor()
        else:
            qs.inflight -= len(offsets)
        if not cs.pending and not cs.ck.order:
            self.cks.pop(key, None)
        if offsets:
            self.moved.add((key[0], key[1], key[2]))

    def take_moved(self) -> list[tuple[QKey, int]]:
        """Queues whose commit point may have moved since the last call, with the commit point."""
        out = [(q, self.commit_of(q)) for q in self.moved if q in self.queues]
        self.moved.clear()
        return out

    # ------------------------------------------------------------------ figures

    def inflight_by_group(self, now: int) -> dict[str, tuple[int, int]]:
        """group -> (messages in flight, of which due: their invisible time passed, not revived yet)."""
        out: dict[str, list[int]] = {}
        for key, cs in self.cks.items():  # per checkpoint, not per offset: a scrape's cost on the loop
            f = out.setdefault(key[0], [0, 0])
            n = len(cs.pending)
            f[0] += n
            if cs.deadlines:  # FIFO offsets whose invisible time changed
                f[1] += sum(1 for o in cs.pending if cs.deadline(o) <= now)
            elif cs.ck.revive_time <= now:
                f[1] += n
        for (g, _, _), qs in self.queues.items():  # FIFO offsets delivered before, waiting for the next pop
            if qs.order:
                live = self.cks.get(qs.live) if qs.live is not None else None
                extra = len(qs.counts) - (len(live.pending) if live is not None else 0)
                if extra > 0:
                    out.setdefault(g, [0, 0])[0] += extra
        return {g: (v[0], v[1]) for g, v in out.items()}

    def queues_of(self, group: str) -> Iterator[tuple[QKey, QueueState]]:
        return ((q, s) for q, s in self.queues.items() if q[0] == group)

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> bytes:
        """The whole state (``SNAPSHOT_FORMAT``): a checkpoint's offsets as runs from its start (a pop of 32
        consecutive messages is ``[0, 32]``), its pending ones as None while every offset is pending (not
        acknowledged yet: the usual case, no sort)."""
        collecting = gc.isenabled()
        gc.disable()  # it builds a list per checkpoint, no cycles: collections meanwhile would only scan the state
        try:
            queues = [[*q, s.next, s.order, s.floor, sorted(s.counts.items()), sorted(s.resolved), list(s.live or ())]
                      for q, s in self.queues.items()]
            cks = [_ck_row(cs) for cs in self.cks.values()]
            out: bytes = msgpack.packb([SNAPSHOT_FORMAT, queues, cks], use_bin_type=True)
        finally:
            if collecting:
                gc.enable()
        return out

    @classmethod
    def restore(cls, data: bytes) -> PopState:
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
            if not isinstance(doc, list) or len(doc) != 3 or doc[0] not in (1, SNAPSHOT_FORMAT):
                raise RecordError("POP state snapshot: unknown layout")
            st = cls()
            for g, t, q, nxt, order, floor, counts, resolved, live in doc[1]:
                st.queues[(g, t, q)] = QueueState(nxt, bool(order), floor=floor, counts={o: n for o, n in counts},
                                                  resolved=set(resolved), live=tuple(live) if live else None)
            for key, inv, offsets, nxt, order, counts, pending, acked, deadlines in doc[2]:
                if doc[0] != 1:  # the offsets as runs from the checkpoint's start; pending None: every offset
                    offsets = offsets_of(offsets, key[3])
                    if pending is None:
                        pending = offsets
                _restore_ck(st, key, inv, offsets, nxt, order, counts, pending, acked, deadlines)
        except (TypeError, ValueError, KeyError) as e:
            raise RecordError(f"POP state snapshot unreadable: {e}") from e
        st.moved.clear()
        return st


def _ck_row(cs: CkState) -> list[Any]:
    ck = cs.ck
    s = ck.start
    pending = None if len(cs.pending) == len(ck.offsets) else sorted(cs.pending)
    return [[ck.group, ck.topic, ck.queue_id, s, ck.pop_time], ck.invisible, runs(ck.offsets, s), ck.next, ck.order,
            list(ck.counts),
            pending, sorted(cs.acked) if cs.acked else [], sorted(cs.deadlines.items()) if cs.deadlines else []]


def _restore_ck(st: PopState, key: list[Any], inv: int, offsets: Sequence[int], nxt: int, order: bool, counts: list[int],
                pending: Sequence[int], acked: Sequence[int], deadlines: list[list[int]]) -> None:
    g, t, q, s, pt = key
    ck = Checkpoint(g, t, q, s, pt, inv, tuple(offsets), nxt, bool(order), tuple(counts))
    cs = CkState(ck, set(pending), set(acked), {o: d for o, d in deadlines})
    st.cks[ck.key] = cs
    qs = st.queues.setdefault(ck.qkey, QueueState(nxt, bool(order), floor=s))
    if not ck.order and cs.pending:
        qs.inflight += len(cs.pending)
        heapq.heappush(qs.heap, (min(cs.pending), ck.key))
    for when in {ck.revive_time, *cs.deadlines.values()}:
        st.reschedule(ck.key, when)
