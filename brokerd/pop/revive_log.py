"""The revive log on the message store: appends of POP records and the rebuild of ``PopState`` from them.

Every record goes to queue 0 of the revive topic (``rmq_sys_REVIVE_LOG_<cluster>``) with a synchronous append,
so the records of one broker are in the order their effects were applied. A revive batch is one synchronous run
``[BEGIN, deliveries..., END]`` (``brokerd.logbatch`` on the same queue): its deliveries carry nothing of the
batch (a consumer of the retry topic or the DLQ sees the message as it was, plus RocketMQ's revive properties);
a batch cut by a crash or a failover is found by the digests BEGIN carries (``find_cut``) and closed with an END
saying how many of its deliveries exist before anything else is written (``ensure_closed``). A rebuild (start,
becoming master) reads the queue's last complete STATE snapshot and replays what follows it.

Reads see the whole local log, past the confirm offset (``brokerd.locallog``): a new master's log is its truth (an
ack it holds was acknowledged to a client only once replicated; a record past the confirm offset is simply not
confirmed yet). Synchronous, no asyncio: the caller waits for put acknowledgements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brokerd.locallog import LocalLog
from brokerd.logbatch import TAG_BEGIN, TAG_END, TAG_STATE, MarkedLog
from brokerd.message import MessageInner, tags_code_of
from brokerd.pop.records import (
    TAG_OPS,
    BatchBegin,
    BatchEnd,
    Op,
    RecordError,
    StateChunk,
    decode_ops,
    encode_ops,
    state_chunks,
)
from brokerd.pop.state import PopState
from brokerd.store.results import PutMessageResult, PutStatus

REVIVE_QUEUE = 0
STATE_CHUNK_BYTES = 1 << 20
STATE_CODE = tags_code_of(TAG_STATE)
READ_BATCH = 256


@dataclass(slots=True)
class Rebuilt:
    state: PopState
    records: int  # operations replayed after the snapshot
    snapshot_offset: int  # queue offset of the snapshot's first chunk (-1: none)
    open_batch: BatchBegin | None  # the log ends inside a revive batch (``close_cut`` must run first)
    bad_records: int


class ReviveLog:
    def __init__(self, local: LocalLog, topic: str, host: tuple[str, int]) -> None:
        self.topic = topic
        self.local = local
        self.marked = MarkedLog(local, topic, REVIVE_QUEUE, store_host=host)
        self.since_snapshot = 0  # records appended since the last snapshot
        self.last_end = 0  # commit-log end of the last append (what an answer waits for)
        self.cut_open = False  # the queue may end inside a revive batch: close it before writing
        self.on_cut_closed: Callable[[BatchBegin, int], None] | None = None

    # ------------------------------------------------------------------ appends

    def ensure_closed(self) -> bool:
        """A revive batch whose append failed part way (or that a crash cut) is closed before anything else is
        written to the queue; ``on_cut_closed(begin, delivered)`` tells the state which of its items were made."""
        if not self.cut_open:
            return True
        cut = self.find_cut()
        if cut is None:
            self.cut_open = False
            return True
        begin, delivered = cut
        res = self.marked.close_cut_batch(BatchEnd(True, delivered).encode())
        if not self._done(res, 1).ok:
            return False
        self.cut_open = False
        if begin is not None and self.on_cut_closed is not None:
            self.on_cut_closed(begin, delivered)
        return True

    def _done(self, res: PutMessageResult, n: int) -> PutMessageResult:
        if res.ok:
            self.since_snapshot += n
            self.last_end = res.end_offset
        return res

    def append_ops(self, ops: Sequence[Op]) -> PutMessageResult:
        """One ``ops`` record (the lean single-record append)."""
        if not self.ensure_closed():
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        res = self.local.append_message(self.marked.marker(TAG_OPS, encode_ops(ops)))
        return self._done(res, len(ops))

    def append_batch(self, begin: BatchBegin, deliveries: list[MessageInner]) -> PutMessageResult:
        """``[BEGIN, *deliveries, END]`` in one synchronous run (ValueError beyond ``logbatch.MAX_BATCH_BYTES``)."""
        if not self.ensure_closed():
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        res = self.marked.append_batch(begin.encode(), deliveries, BatchEnd().encode())
        if not res.ok:
            self.cut_open = True  # part of it may be in the log: closed before the next write
        return self._done(res, 2)

    def append_snapshot(self, state: PopState) -> PutMessageResult:
        if not self.ensure_closed():
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        chunks = state_chunks(state.snapshot(), STATE_CHUNK_BYTES)
        res = self.marked.append_markers(TAG_STATE, [c.encode() for c in chunks])
        if res.ok:
            self.since_snapshot = 0
            self.last_end = res.end_offset
        return res

    # ------------------------------------------------------------------ cut batches

    def find_cut(self) -> tuple[BatchBegin | None, int] | None:
        """The batch whose BEGIN is the queue's last marker (no END after it): its BEGIN (None when unreadable)
        and how many of its deliveries the log holds; None when the last batch is complete."""
        cut = self.marked.find_cut_batch()
        if cut is None:
            return None
        try:
            return BatchBegin.decode(cut.begin.body), len(cut.delivered)
        except RecordError:
            return None, len(cut.delivered)

    # ------------------------------------------------------------------ rebuild

    def _last_snapshot(self) -> tuple[PopState, int, int] | None:
        """(state, first chunk's queue offset, queue offset after the last chunk) of the newest whole snapshot."""
        lo = self.local.min_offset_in_queue(self.topic, REVIVE_QUEUE)
        off = self.local.max_offset_in_queue(self.topic, REVIVE_QUEUE) - 1
        while off >= lo:
            e = self.local.entry(self.topic, REVIVE_QUEUE, off)
            if e is None or e.tags != STATE_CODE:
                off -= 1
                continue
            found = self._read_snapshot(off, lo)
            if found is not None:
                return found
            off -= 1
        return None

    def _read_snapshot(self, last: int, lo: int) -> tuple[PopState, int, int] | None:
        tail = self._chunk_at(last)
        if tail is None or tail.index != tail.total - 1 or last - tail.index < lo:
            return None
        first = last - tail.index
        parts = [self._chunk_at(first + i) for i in range(tail.total)]
        if any(p is None or p.index != i for i, p in enumerate(parts)):
            return None
        try:
            return PopState.restore(b"".join(p.data for p in parts if p is not None)), first, last + 1
        except RecordError:
            return None

    def _chunk_at(self, offset: int) -> StateChunk | None:
        found = self.marked.read_markers(offset, 1)
        if not found or found[0].queue_offset != offset or found[0].tag != TAG_STATE:
            return None
        try:
            return StateChunk.decode(found[0].body)
        except RecordError:
            return None

    def rebuild(self, on_bad: Callable[[int, str], None] | None = None) -> Rebuilt:
        found = self._last_snapshot()
        state, snap_at, offset = (found if found is not None
                                  else (PopState(), -1, self.local.min_offset_in_queue(self.topic, REVIVE_QUEUE)))
        replay = _Replay(state, on_bad)
        end = self.local.max_offset_in_queue(self.topic, REVIVE_QUEUE)
        while offset < end:
            markers = self.marked.read_markers(offset, READ_BATCH)
            for m in markers:
                replay.one(m.tag, m.body, m.queue_offset)
            offset = markers[-1].queue_offset + 1 if markers else offset + READ_BATCH  # past a hole
        state.moved = set(state.queues)
        self.since_snapshot = replay.records
        return Rebuilt(state, replay.records, snap_at, replay.open, replay.bad)


class _Replay:
    def __init__(self, state: PopState, on_bad: Callable[[int, str], None] | None) -> None:
        self.state = state
        self.on_bad = on_bad
        self.open: BatchBegin | None = None
        self.records = 0
        self.bad = 0

    def one(self, tag: str, body: bytes, qoff: int) -> None:
        self.records += 1
        st = self.state
        try:
            if tag == TAG_OPS:
                ops = decode_ops(body)
                for op in ops:
                    st.apply(op)
                self.records += len(ops) - 1  # operations, not records: what a rebuild has to apply
            elif tag == TAG_BEGIN:
                self.open = BatchBegin.decode(body)
            elif tag == TAG_END:
                self._end(BatchEnd.decode(body))
        except RecordError as e:
            self.bad += 1
            if self.on_bad is not None:
                self.on_bad(qoff, str(e))

    def _end(self, end: BatchEnd) -> None:
        begin, self.open = self.open, None
        if begin is None:
            return
        delivered = begin.deliver[:end.delivered] if end.cut else begin.deliver
        self.state.apply_resolve((*begin.drop, *delivered))
