"""The store's batch append: ``MessageStore.append_messages`` for a synchronous batch of broker-originated messages
(the timer firing, POP revive, the delay levels, a client's batch), any mix of topics and queues.

A batch is appended as *runs*: a run takes the messages from ``start`` that fit the active commit-log segment, lays
their records out back to back in one buffer, assigns queue offsets in call order, writes the buffer (one
``pwrite`` per segment, the first record's 8-byte header last: a write torn by a killed process leaves a zero
header recovery stops at), then puts their consume-queue entries and key-index entries in log order. The driver
(``BatchAppender.append``) rolls to the next segment (the blank filler, as ``CommitLog.append``) and runs again
until every message is stored, then the store notifies the dispatch listeners once per queue with its newest
entry (long polling compares offsets, as after the C send lane or a reput).

Two implementations of a run answer the same ``Run``: ``run_python`` (the reference) and the C
``brokerd._native.BatchAppender`` (brokerd/csrc/store_batch.c), used when built and ``BROKERD_NATIVE`` is not 0.
tests/unit/store/test_batch_append_diff.py feeds the same batches through both and compares the files byte for
byte. A batch the C run cannot take as it is (``FALLBACK_REASONS``: a message of another type, a non-str
property, an int out of the record's range, a DELAY value ``int()`` reads its own way ...) is run by Python,
counted in ``fallbacks``.

Invariants (the store's, kept by both): every message is validated before anything is written (all or nothing:
MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED store nothing); queue offsets are consecutive in call order; a record
that does not fit the segment opens the next one; a failed write stores nothing of that run (the messages before
it stay stored; the put answers SERVICE_NOT_AVAILABLE and the store stops writes); a failed consume-queue or index
put stops the dispatch (the records stay stored; the store sets WRITE_LOGICS_QUEUE_ERROR and
``MessageStore.retry_dispatch`` redoes it).

Concurrency contract: the store's event loop thread; a run never yields.
"""

from __future__ import annotations

import enum
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple
from zlib import crc32

from brokerd.message import (
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_V4,
    HEADER_V4_SIZE,
    SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    MessageInner,
    encode_properties,
)
from brokerd.native import native
from brokerd.store.commit_log import CommitLog, CreateFileError, write_records
from brokerd.store.consume_queue import ConsumeQueue
from brokerd.store.dispatch import Dispatcher
from brokerd.store.index import IndexService
from brokerd.store.mapped_file import MappedFile
from brokerd.store.queue_store import ConsumeQueueStore
from brokerd.store.results import PutMessageResult, PutStatus

FALLBACK_REASONS: Final = ("type", "fields", "body", "topic", "properties", "host", "delay")
"""Why a batch is run by Python (store_batch.c's WHY_*, same order)."""
REFUSALS: Final = {1: PutStatus.MESSAGE_ILLEGAL, 2: PutStatus.PROPERTIES_SIZE_EXCEEDED}
_I16: Final = struct.Struct(">h")


def now_ms() -> int:
    """The store time of a batch's messages that carry none (a function: tests set the clock)."""
    return time.time_ns() // 1_000_000


Validate = Callable[[MessageInner, bytes], PutStatus | None]
Notes = dict[tuple[str, int], tuple[int, int, int]]


class RunEnd(enum.IntEnum):
    DONE = 0  # every message from ``start`` is stored
    ROLL = 1  # the next one does not fit the segment
    WRITE_FAILED = 2  # ``write_error``: nothing of this run is stored
    REFUSED = 3  # ``info``: the status (REFUSALS) of the first invalid message; nothing written
    PYTHON = 4  # ``info``: why (FALLBACK_REASONS) the C run leaves the batch to Python; nothing written


class Run(NamedTuple):
    """What one run did (the C run answers the same tuple)."""

    end: int  # RunEnd
    info: int | None
    done: int  # messages stored from ``start``
    wrote_end: int  # the segment's write position after them
    dispatched_end: int  # log end of the last record dispatched (-1: none)
    last_ts: int  # store timestamp of the last record stored
    first_phys: int
    nbytes: int
    first_qoff: int
    ids: str  # offset message ids joined with commas
    notes: Notes  # (topic, queue id) -> (queue offset, tags code, record end) of its newest entry dispatched
    dispatch_error: BaseException | None
    write_error: BaseException | None


@dataclass(slots=True)
class BatchOutcome:
    """What the store does after a batch: the result, the positions' timestamp, the listeners' notes, errors."""

    result: PutMessageResult
    last_ts: int = 0  # 0: nothing stored
    notes: Notes = field(default_factory=dict)
    create_error: OSError | None = None
    write_error: BaseException | None = None
    dispatch_error: BaseException | None = None


class BatchAppender:
    """The batch append of one store's components (made again with them at every start)."""

    def __init__(self, commit_log: CommitLog, dispatcher: Dispatcher, queue_store: ConsumeQueueStore,
                 index: IndexService | None, *, validate: Validate, id_prefix: str, max_body: int,
                 delay_levels: list[int], use_native: bool = True) -> None:  # fmt: skip
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.queue_store = queue_store
        self.validate = validate
        self.id_prefix = id_prefix
        self.fallbacks: dict[str, int] = dict.fromkeys(FALLBACK_REASONS, 0)
        self.runs = {"native": 0, "python": 0}
        self._native: Any = None
        if use_native and native is not None and hasattr(native, "BatchAppender"):
            self._native = native.BatchAppender(
                MessageInner, commit_log.encoder.host, ConsumeQueue.put, queue_store.get_or_create,
                index.current_file if index is not None else None, index.put_keys if index is not None else None,
                commit_log.store_ip, commit_log.store_port, id_prefix, max_body, commit_log.segment_size,
                SCHEDULE_TOPIC, list(delay_levels))  # fmt: skip

    @property
    def native(self) -> bool:
        """The C run is used (else every run is Python's)."""
        return self._native is not None

    # ------------------------------------------------------------ the driver

    def append(self, msgs: list[MessageInner], ts: int) -> BatchOutcome:
        """Store ``msgs`` (non-empty; the store checked it is writeable), ``ts`` the store time of those without
        one. Positions (segment write end, valid end, dispatched) are moved here; the caller sets the store's last
        timestamp, reports the errors and notifies the listeners (``BatchOutcome``)."""
        props = None if self._native is not None else self.encode_all(msgs)
        if isinstance(props, PutStatus):
            return BatchOutcome(PutMessageResult(props))
        out = BatchOutcome(PutMessageResult(PutStatus.PUT_OK))
        runs: list[Run] = []
        start, cl = 0, self.commit_log
        while True:
            f = cl.files[-1] if cl.files else None
            try:
                f = f or cl.ensure_active()
            except CreateFileError as exc:
                out.result, out.create_error = PutMessageResult(PutStatus.CREATE_MAPPED_FILE_FAILED), exc
                break
            if props is None:
                run = self.run_native(msgs, start, ts, f, out.dispatch_error is None)
                if run.end == RunEnd.PYTHON:
                    self.fallbacks[FALLBACK_REASONS[run.info or 0]] += 1
                    props = self.encode_all(msgs)
                    if isinstance(props, PutStatus):
                        return BatchOutcome(PutMessageResult(props))  # only at start == 0: nothing stored
                    continue
                if run.end == RunEnd.REFUSED:
                    return BatchOutcome(PutMessageResult(REFUSALS[run.info or 1]))
            else:
                run = self.run_python(msgs, start, ts, props, f, out.dispatch_error is None)
            self._settle(f, run, out)
            if run.done:
                runs.append(run)
            start += run.done
            if run.end == RunEnd.WRITE_FAILED:
                out.result, out.write_error = PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE), run.write_error
                break
            if run.end == RunEnd.DONE:
                out.result = self._result(msgs, ts, runs)
                break
            try:
                cl.roll(f)
            except CreateFileError as exc:
                out.result, out.create_error = PutMessageResult(PutStatus.CREATE_MAPPED_FILE_FAILED), exc
                break
            except OSError as exc:  # the blank filler's write
                out.result, out.write_error = PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE), exc
                break
        return out

    def _settle(self, f: MappedFile, run: Run, out: BatchOutcome) -> None:
        """The positions the run moved, its notes and dispatch error into ``out``."""
        if run.done:
            self.commit_log.appended(f, run.wrote_end, run.last_ts)
            d = self.dispatcher
            d.valid_end = f.base + run.wrote_end
            if run.dispatched_end >= 0:
                d.dispatched = run.dispatched_end
            out.last_ts = run.last_ts
            out.notes.update(run.notes)
        if run.dispatch_error is not None and out.dispatch_error is None:
            out.dispatch_error = run.dispatch_error

    def _result(self, msgs: list[MessageInner], ts: int, runs: list[Run]) -> PutMessageResult:
        first, last = runs[0], runs[-1]
        ids = first.ids if len(runs) == 1 else ",".join(r.ids for r in runs)
        end = last.first_phys + last.nbytes  # a run's records are contiguous in one segment
        return PutMessageResult(PutStatus.PUT_OK, first.first_phys, sum(r.nbytes for r in runs), ids, first.first_qoff,
                                msgs[0].store_timestamp or ts, len(msgs), end)  # fmt: skip

    def encode_all(self, msgs: list[MessageInner]) -> list[bytes] | PutStatus:
        """Every message's encoded properties, or the status of the first one the store refuses."""
        out: list[bytes] = []
        validate = self.validate
        for m in msgs:
            props = encode_properties(m.properties)
            bad = validate(m, props)
            if bad is not None:
                return bad
            out.append(props)
        return out

    # ------------------------------------------------------------ one run

    def run_native(self, msgs: list[MessageInner], start: int, ts: int, f: MappedFile, dispatch: bool) -> Run:
        """The C run (brokerd/csrc/store_batch.c)."""
        self.runs["native"] += 1
        d = self.dispatcher
        return Run(*self._native.run(msgs, start, ts, d.next_queue_offsets, self.queue_store.queues, f.fd, f.base,
                                     f.wrote, f.size, dispatch))  # fmt: skip

    def run_python(self, msgs: list[MessageInner], start: int, ts: int, props: list[bytes], f: MappedFile,
                   dispatch: bool) -> Run:  # fmt: skip
        """The reference run: the validated messages from ``start`` (``props``: their encoded properties, indexed
        like ``msgs``) that fit the segment ``f``."""
        self.runs["python"] += 1
        cl = self.commit_log
        enc, nq = cl.encoder, self.dispatcher.next_queue_offsets
        topics, hosts, host = enc.topics, enc.hosts, enc.host
        store_ip, store_port, pack = cl.store_ip, cl.store_port, HEADER_V4.pack
        local: dict[tuple[str, int], int] = {}
        buf = bytearray()
        recs: list[tuple[MessageInner, tuple[str, int], int, int, int, int, bool]] = []
        pos, end = f.wrote, RunEnd.DONE
        limit = f.size - END_FILE_MIN_BLANK_LENGTH
        for i in range(start, len(msgs)):
            m, p = msgs[i], props[i]
            prefix, magic = topics.get(m.topic) or enc.topic_prefix(m.topic)
            body = m.body
            size = HEADER_V4_SIZE + len(body) + len(prefix) + 2 + len(p)
            if pos + size > limit:
                end = RunEnd.ROLL
                break
            key = (m.topic, m.queue_id)
            to_cq = not m.sys_flag & TRANSACTION_PREPARED_TYPE
            qoff = 0
            if to_cq:
                qoff = local.get(key, -1)
                if qoff < 0:
                    qoff = nq.get(key, 0)
                local[key] = qoff + 1
            sts = m.store_timestamp or ts
            phys = f.base + pos
            born = m.born_host
            buf += pack(size, magic, crc32(body) & 0x7FFFFFFF, m.queue_id, m.flag, qoff, phys, m.sys_flag & ~0x30,
                        m.born_timestamp, hosts.get(born[0]) or host(born[0]), born[1], sts, store_ip, store_port,
                        m.reconsume_times, m.prepared_transaction_offset, len(body))  # fmt: skip
            buf += body
            buf += prefix
            buf += _I16.pack(len(p))
            buf += p
            recs.append((m, key, phys, size, qoff, sts, to_cq))
            pos += size
        if not recs:
            return Run(end, None, 0, f.wrote, -1, 0, 0, 0, 0, "", {}, None, None)
        try:
            write_records(f, f.wrote, buf)
        except OSError as exc:
            return Run(RunEnd.WRITE_FAILED, None, 0, f.wrote, -1, 0, 0, 0, 0, "", {}, None, exc)
        nq.update(local)
        notes: Notes = {}
        dispatched, error = self._dispatch(recs, notes) if dispatch else (-1, None)
        prefix_id = self.id_prefix
        ids = ",".join([f"{prefix_id}{r[2]:016X}" for r in recs])
        first = recs[0]
        return Run(end, None, len(recs), pos, dispatched, recs[-1][5], first[2], pos - f.wrote, first[4], ids, notes,
                   error, None)  # fmt: skip

    def _dispatch(self, recs: list[tuple[MessageInner, tuple[str, int], int, int, int, int, bool]],
                  notes: Notes) -> tuple[int, BaseException | None]:  # fmt: skip
        """Consume-queue and index entries of the written records, in log order; (end of the last record
        dispatched or -1, the failure that stopped it)."""
        put = self.dispatcher.put_inline
        dispatched = -1
        for m, key, phys, size, qoff, sts, to_cq in recs:
            try:
                tags = put(m, key, phys, size, qoff, sts, to_cq)
            except Exception as exc:  # noqa: BLE001 - the records are stored: the store stops writes, retries it
                return dispatched, exc
            dispatched = phys + size
            if to_cq:
                notes[key] = (qoff, tags, dispatched)
        return dispatched, None
