"""One POP: which queues are read and in what order, what each read hands out, its checkpoint record.

RocketMQ's order (PopMessageProcessor): with probability ``popFromRetryProbability`` % the group's POP retry
topic first, then the topic (one queue, or all its read queues from a random one for ``queueId`` -1), then —
when the answer is not full — the retry topic; FIFO pops never read the retry topic. Each queue read hands out
at most what the answer still lacks; its checkpoint is appended to the revive log *before* the messages go out
(a checkpoint the store refuses hands nothing out of that queue) — or, ``defer``red, applied at once and written
at the end of the loop turn with the turn's other operations, the answer going out only once it is. Messages read
from a retry topic are given back under their topic with their checkpoint string in ``POP_CK``
(popResponseReturnActualRetryTopic=false).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from brokerd.message import POP_CK, MessageInner, decode_record, encode_record
from brokerd.pop.core import PopCore
from brokerd.pop.extra_info import POP_ORDER_REVIVE_QUEUE, PopInfo, build_extra_info, pop_retry_topic
from brokerd.pop.records import Checkpoint, QKey
from brokerd.pop.state import QueueState
from brokerd.store.results import GetMessageResult, GetMessageStatus

S = GetMessageStatus
_MOVED = (S.OFFSET_TOO_SMALL, S.OFFSET_OVERFLOW_BADLY, S.OFFSET_FOUND_NULL)


@dataclass(slots=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int  # -1: every read queue of the topic
    max_nums: int
    invisible: int
    order: bool
    init_mode: int = 1
    tag_filter: Callable[[int], bool] | None = None
    record_filter: Callable[[bytes], bool] | None = None


class PopOutcome:
    """What one pop hands out (a plain class: one is made per POP request)."""

    __slots__ = ("pop_time", "revive_qid", "buffers", "rest", "info", "deferred")

    def __init__(self, pop_time: int, revive_qid: int, deferred: bool = False) -> None:
        self.pop_time = pop_time
        self.revive_qid = revive_qid
        self.buffers: list[bytes | memoryview] = []
        self.rest = 0  # messages left in the queues read (PopMessageResponseHeader.restNum)
        self.info = PopInfo()
        self.deferred = deferred  # checkpoints applied, to be written at the end of the turn

    @property
    def found(self) -> int:
        return len(self.buffers)


class Popper:
    def __init__(self, core: PopCore, rng: random.Random | None = None) -> None:
        self.core = core
        self.rng = rng or random.Random()

    def pop(self, req: PopRequest, defer: bool = False) -> PopOutcome:
        core = self.core
        out = PopOutcome(core.now(), POP_ORDER_REVIVE_QUEUE if req.order else 0, deferred=defer)
        rand = int(self.rng.random() * 100)  # randrange(100), without its argument checks
        need_retry = rand < core.broker.cfg.pop_from_retry_probability
        retry = pop_retry_topic(req.topic, req.group, core.broker.cfg.enable_retry_topic_v2)
        if need_retry and not req.order:
            self._pop_topic(req, retry, rand, out)
        if req.queue_id < 0:
            self._pop_topic(req, req.topic, rand, out)
        else:
            self._pop_queue(req, req.topic, req.queue_id, out)
        if not need_retry and not req.order and out.found < req.max_nums:
            self._pop_topic(req, retry, rand, out)
        if out.found:
            core.counters.pops += 1
            core.counters.popped += out.found
        core.changed()
        return out

    def _pop_topic(self, req: PopRequest, topic: str, rand: int, out: PopOutcome) -> None:
        tc = self.core.broker.meta.topics.get(topic)
        if tc is None:
            return
        n = tc.read_queue_nums
        buffers, want = out.buffers, req.max_nums
        for i in range(n):
            if len(buffers) >= want and out.rest > 0:  # full, and restNum (whether more waits) is known
                return
            self._pop_queue(req, topic, (rand + i) % n, out)

    def _queue(self, req: PopRequest, q: QKey) -> QueueState:
        """The queue's state, created at its start offset when new."""
        core = self.core
        qs = core.state.queue(q)
        if qs is None:
            qs = core.state.ensure_queue(q, core.start_offset(req.group, q[1], q[2], req.init_mode), req.order)
            core.state.moved.add(q)  # the start offset is committed (RocketMQ commits the init offset)
        return qs

    def _may_pop(self, req: PopRequest, q: QKey, qs: QueueState) -> bool:
        """Whether the queue can be popped now (switching it to the request's kind when nothing is in flight)."""
        core = self.core
        if qs.order != req.order:
            if qs.inflight_count():
                return False  # popped the other way and still in flight
            qs.order, qs.floor = req.order, qs.next
        if req.order and core.state.blocked(q, core.now()):
            return False
        return qs.inflight_count() < core.broker.cfg.pop_inflight_message_threshold

    def _pop_queue(self, req: PopRequest, topic: str, qid: int, out: PopOutcome) -> None:
        core = self.core
        store = core.broker.store
        full = out.found >= req.max_nums
        if full and out.rest > 0:  # restNum only says whether more is waiting: known already
            return
        q = (req.group, topic, qid)
        qs = core.state.queue(q) if full else self._queue(req, q)
        if qs is None or full or not self._may_pop(req, q, qs):
            if qs is not None and not req.order:
                out.rest += max(0, store.max_offset_in_queue(topic, qid) - qs.next)
            return
        offset = qs.floor if req.order else qs.next
        want = req.max_nums - out.found
        read = self._read(req, topic, qid, offset, want)
        if read is None:
            return
        offset, r = read
        offsets, buffers, nxt = r.queue_offsets, r.buffers, r.next_begin_offset
        size = r.buffer_total_size
        if req.order:  # acknowledged (or dead-lettered) messages are never handed out again
            offsets, buffers, nxt = self._unresolved(req, q, offsets, buffers, nxt, want)
            size = sum(map(len, buffers))
        if offsets:
            self._hand_out(req, q, offset, offsets, buffers, nxt, size, out)
        elif nxt > offset:
            self._skip(q, offset, nxt)
        out.rest += max(0, r.max_offset - nxt)

    def _unresolved(self, req: PopRequest, q: QKey, offsets: list[int], buffers: list[bytes | memoryview],
                    nxt: int, want: int) -> tuple[list[int], list[bytes | memoryview], int]:  # fmt: skip
        """FIFO: the read without its resolved messages, read on while they leave the answer short."""
        st, store = self.core.state, self.core.broker.store
        keep = [i for i, o in enumerate(offsets) if not st.is_resolved(q, o)]
        offsets, buffers = [offsets[i] for i in keep], [buffers[i] for i in keep]
        for _ in range(8):
            if len(offsets) >= want or len(keep) == 0 and nxt >= store.max_offset_in_queue(q[1], q[2]):
                break
            r = store.get_message(q[1], q[2], nxt, want - len(offsets), tag_filter=req.tag_filter,
                                  record_filter=req.record_filter)
            if r.status is not S.FOUND:
                nxt = max(nxt, r.next_begin_offset) if r.status is S.NO_MATCHED_MESSAGE else nxt
                break
            for o, b in zip(r.queue_offsets, r.buffers, strict=True):
                if not st.is_resolved(q, o):
                    offsets.append(o)
                    buffers.append(b)
            nxt = r.next_begin_offset
        return offsets, buffers, nxt

    def _read(self, req: PopRequest, topic: str, qid: int, offset: int,
              want: int) -> tuple[int, GetMessageResult] | None:  # fmt: skip
        """The read at ``offset``, once more from where the store says when the offset is out of its queue."""
        store = self.core.broker.store
        r = store.get_message(topic, qid, offset, want, tag_filter=req.tag_filter, record_filter=req.record_filter)
        if r.status not in _MOVED:
            return offset, r
        if r.status is S.OFFSET_OVERFLOW_BADLY and self.core.log.local.max_offset_in_queue(topic, qid) >= offset:
            return None  # beyond what is confirmed (replicated) yet: the messages exist, not visible yet
        moved = r.next_begin_offset
        self.core.logger.warning("pop_offset_corrected", topic=topic, queue=qid, group=req.group, offset=offset,
                                 to=moved, status=r.status.name)
        self._skip((req.group, topic, qid), offset, moved, jump=True)
        r = store.get_message(topic, qid, moved, want, tag_filter=req.tag_filter, record_filter=req.record_filter)
        return (moved, r) if r.status not in _MOVED else None

    def _skip(self, q: QKey, start: int, to: int, *, jump: bool = False) -> None:
        """Offsets read past without a delivery (filtered out): not in flight. ``jump``: the queue no longer holds
        ``start`` (its messages expired, or a new master's queue is shorter than this state): go on at ``to``."""
        qs = self.core.state.queues[q]
        qs.next = to if jump else max(qs.next, to)
        if qs.order:
            if jump:
                qs.resolved = {o for o in qs.resolved if o >= to}
                qs.counts = {o: n for o, n in qs.counts.items() if o >= to}
                qs.floor = to
            for o in range(max(start, qs.floor), to):
                qs.counts.pop(o, None)
                qs.resolved.add(o)
            qs.advance_floor()
        self.core.state.moved.add(q)

    def _hand_out(self, req: PopRequest, q: QKey, start: int, offsets: list[int], buffers: list[bytes | memoryview],
                  nxt: int, size: int, out: PopOutcome) -> None:  # fmt: skip
        core = self.core
        _, topic, qid = q
        counts = tuple(core.state.delivered_count(q, o) for o in offsets) if req.order else ()
        held = range(start, nxt) if nxt - start == len(offsets) else tuple(offsets)  # every offset read: a range
        ck = Checkpoint(req.group, topic, qid, start, out.pop_time, req.invisible, held, nxt, req.order, counts)
        if ck.key in core.state.cks:  # a reset let this queue be read from the same start in the same ms: next pop
            return
        if out.deferred:
            core.state.apply_ck(ck)
            core.defer(ck)
        else:
            res = core.append(ck)
            if not res.ok:
                core.counters.ck_failures += 1
                core.logger.warning("pop_checkpoint_refused", topic=topic, queue=qid, group=req.group,
                                    status=res.status.name)
                return
            core.state.apply_ck(ck)
        if topic != req.topic:  # a retry topic: the messages go out under their topic, with their checkpoint
            broker = core.broker.cfg.broker_name
            buffers = [as_topic(b, req.topic, build_extra_info(start, out.pop_time, req.invisible, out.revive_qid,
                                                              topic, broker, qid, o))
                       for b, o in zip(buffers, offsets, strict=True)]
        out.buffers.extend(buffers)
        core.broker.stats_manager.on_get(req.group, topic, len(offsets), size, 0.0)
        out.info.add_queue(topic, qid, start, offsets)
        if req.order:
            out.info.add_order_counts(topic, qid, dict(zip(offsets, counts, strict=True)))


def as_topic(record: bytes | memoryview, topic: str, pop_ck: str) -> bytes:
    """A stored retry-topic record re-encoded under ``topic`` with its checkpoint string (RocketMQ's
    PopMessageProcessor rewrites retry messages the same way)."""
    ext, _ = decode_record(record)
    props = dict(ext.properties)
    props.setdefault(POP_CK, pop_ck)
    inner = MessageInner(topic=topic, queue_id=ext.queue_id, body=ext.body, flag=ext.flag, properties=props,
                         sys_flag=ext.sys_flag, born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                         store_host=ext.store_host, reconsume_times=ext.reconsume_times,
                         prepared_transaction_offset=ext.prepared_transaction_offset)  # fmt: skip
    return encode_record(inner, queue_offset=ext.queue_offset, phys_offset=ext.commit_log_offset,
                         store_timestamp=ext.store_timestamp)
