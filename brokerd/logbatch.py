"""Exactly-once deliveries through the commit log: batches bracketed by marker records.

Services that store messages on the broker's own behalf — the POP revive service re-putting un-acked messages
into retry topics, the timer service putting due messages into their real topics — must neither lose nor repeat a
delivery across a crash, a power loss or a failover to a slave. Their progress lives in the commit log itself, so
any prefix of the log (what recovery keeps, what a slave received) carries a consistent picture:

* a batch is appended as one synchronous run ``[BEGIN, d1 .. dn, END]``: BEGIN and END are marker records on the
  service's marker queue (``topic``/``queue_id``). Appends never yield to the loop (``MessageStore.append_messages``),
  so no other record lands between a batch's records;
* a prefix of the log therefore shows each batch as done (END present), not started (no BEGIN) or **cut**: BEGIN
  is the last marker of the queue and some of its deliveries follow it. BEGIN carries the digest of each delivery
  (``delivery_digest``), so the deliveries that were made are the records right after BEGIN (over the blank filler
  at a segment's end) that match its digests, in order: nothing is added to a delivery (a consumer sees the
  message as the service built it), and a record another writer appended after the cut (a client's send, another
  service's record) does not match. ``find_cut_batch`` returns them; the service completes the batch with
  ``close_cut_batch`` (an END marker carrying what it decided) and delivers the rest in a new batch.

The markers' bodies are the service's own payload (its progress, e.g. which checkpoints a revive batch resolved):
BEGIN's is wrapped in an envelope with the digests (``encode_begin``) and every read here (``read_markers``,
``Marker.body``) hands the payload back as it was given; the service rebuilds its state by reading its marker queue
through ``read_markers``. A batch must fit in ``MAX_BATCH_BYTES``. Reads go through ``LocalLog`` (the whole local
log: not held at the confirm offset).

Pure of asyncio: the caller waits for the put acknowledgement (flush / replicas) of ``end_offset`` as it needs.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from brokerd.locallog import LocalLog
from brokerd.message import (
    CorruptRecordError,
    MessageExt,
    MessageInner,
    decode_record,
    encode_properties,
    record_layout,
    record_size,
)
from brokerd.message.constants import TAGS
from brokerd.store.results import PutMessageResult

TAG_BEGIN: Final = "BEGIN"
TAG_END: Final = "END"
TAG_STATE: Final = "STATE"
MAX_BATCH_BYTES: Final = 4 * 1024 * 1024

_ENVELOPE: Final = struct.Struct(">4sI")  # magic, number of digests; the digests (u32 each) and the payload follow
_MAGIC: Final = b"LBB1"


class BatchFormatError(ValueError):
    """A BEGIN body that is not a batch envelope."""


# ---------------------------------------------------------------------------------------------- digests


def _digest(topic: str, queue_id: int, reconsume_times: int, born_ts: int, body: bytes | memoryview,
            props: bytes | memoryview) -> int:  # fmt: skip
    head = f"{topic}\0{queue_id}\0{reconsume_times}\0{born_ts}\0".encode()
    return zlib.crc32(props, zlib.crc32(body, zlib.crc32(head)))


def delivery_digest(msg: MessageInner, props: bytes | None = None) -> int:
    """What identifies a delivery's record in the log: CRC-32 of its topic, queue, reconsume times, born timestamp,
    body and properties as stored (``props``: ``encode_properties(msg.properties)`` when the caller has it). A
    delivery carries its message's unique key and the service's own marks (the firing time of a timer, the first
    pop time of a revive copy): a record right after a cut batch matching the next expected digest would have to
    be that very delivery — a client sending the same message again has another born timestamp and lacks them."""
    if props is None:
        props = encode_properties(msg.properties)
    return _digest(msg.topic, msg.queue_id, msg.reconsume_times, msg.born_timestamp, msg.body, props)


def record_digest(raw: bytes, ext: MessageExt) -> int:
    """``delivery_digest`` of the stored record ``raw`` (decoded: ``ext``)."""
    _, _, _, topic_pos, topic_len = record_layout(raw, 0, ext.store_size)
    props = memoryview(raw)[topic_pos + topic_len + 2 : ext.store_size]
    return _digest(ext.topic, ext.queue_id, ext.reconsume_times, ext.born_timestamp, ext.body, props)


def encode_begin(payload: bytes, digests: Sequence[int]) -> bytes:
    """BEGIN's body: the envelope (the digests of the deliveries, in order) around the service's payload."""
    return b"".join((_ENVELOPE.pack(_MAGIC, len(digests)), struct.pack(f">{len(digests)}I", *digests), payload))


def decode_begin(body: bytes) -> tuple[bytes, tuple[int, ...]]:
    """(payload, digests) of a BEGIN body; BatchFormatError when it is not one."""
    if len(body) < _ENVELOPE.size:
        raise BatchFormatError("BEGIN: too short for its envelope")
    magic, n = _ENVELOPE.unpack_from(body)
    end = _ENVELOPE.size + 4 * n
    if magic != _MAGIC or len(body) < end:
        raise BatchFormatError("BEGIN: not a batch envelope")
    return body[end:], struct.unpack_from(f">{n}I", body, _ENVELOPE.size)


# ---------------------------------------------------------------------------------------------- markers


@dataclass(frozen=True, slots=True)
class Marker:
    tag: str  # TAG_BEGIN / TAG_END / TAG_STATE, or the service's own
    body: bytes  # the service's payload (BEGIN: without the envelope; b"" when the envelope is unreadable)
    queue_offset: int
    phys: int
    size: int
    store_timestamp: int
    digests: tuple[int, ...] = ()  # BEGIN: of its deliveries, in order

    @property
    def end(self) -> int:
        """Where the marker's record ends in the commit log."""
        return self.phys + self.size


@dataclass(frozen=True, slots=True)
class CutBatch:
    begin: Marker
    delivered: list[MessageExt]  # the batch's deliveries found in the log, in log order


def _marker(ext: MessageExt) -> Marker:
    tag, body = ext.tags or "", ext.body
    digests: tuple[int, ...] = ()
    if tag == TAG_BEGIN:
        try:
            body, digests = decode_begin(body)
        except BatchFormatError:
            body = b""
    return Marker(tag, body, ext.queue_offset, ext.commit_log_offset, ext.store_size, ext.store_timestamp, digests)


class MarkedLog:
    """Bracketed batches on one marker queue of the whole local log."""

    def __init__(self, local: LocalLog, topic: str, queue_id: int, *,
                 store_host: tuple[str, int] = ("127.0.0.1", 0)) -> None:  # fmt: skip
        self.local = local
        self.topic = topic
        self.queue_id = queue_id
        self.store_host = store_host

    def marker(self, tag: str, body: bytes) -> MessageInner:
        """A marker record of this queue (BEGIN only through ``append_batch``)."""
        now = time.time_ns() // 1_000_000
        return MessageInner(topic=self.topic, queue_id=self.queue_id, body=body, flag=0, properties={TAGS: tag},
                            sys_flag=0, born_timestamp=now, born_host=self.store_host, store_host=self.store_host)

    # ------------------------------------------------------------------ appends

    def append_batch(self, begin_body: bytes, deliveries: list[MessageInner], end_body: bytes) -> PutMessageResult:
        """Append ``[BEGIN, *deliveries, END]`` in one synchronous run (BEGIN: ``begin_body`` in the envelope with
        the deliveries' digests; the deliveries as they are). On a failed append the log may hold a cut batch: the
        caller treats it as after a crash (``find_cut_batch``). Returns the store's result (``end_offset``: what to
        wait for). ValueError when the batch exceeds ``MAX_BATCH_BYTES``."""
        digests, size = [], len(begin_body) + len(end_body) + 4 * len(deliveries)
        for d in deliveries:
            props = encode_properties(d.properties)
            digests.append(delivery_digest(d, props))
            size += record_size(d.topic, len(d.body), len(props))
        if size > MAX_BATCH_BYTES and len(deliveries) > 1:
            raise ValueError(f"batch of {len(deliveries)} deliveries ({size} bytes) exceeds {MAX_BATCH_BYTES}")
        begin = self.marker(TAG_BEGIN, encode_begin(begin_body, digests))
        return self.local.append_messages([begin, *deliveries, self.marker(TAG_END, end_body)])

    def append_markers(self, tag: str, bodies: Sequence[bytes]) -> PutMessageResult:
        """Standalone markers in one run (a checkpoint of the service's state, in parts)."""
        if tag == TAG_BEGIN:
            raise ValueError("a BEGIN marker is appended with its batch (append_batch)")
        return self.local.append_messages([self.marker(tag, b) for b in bodies])

    def close_cut_batch(self, end_body: bytes) -> PutMessageResult:
        """The END marker of the cut batch (the last marker is its BEGIN)."""
        return self.local.append_messages([self.marker(TAG_END, end_body)])

    # ------------------------------------------------------------------ reads

    def read_markers(self, from_offset: int, max_nums: int = 256, *, durable_end: int | None = None) -> list[Marker]:
        """Up to ``max_nums`` markers from queue offset ``from_offset`` (clamped to the queue's min; fewer at its
        end; only those whose record ends at or below ``durable_end`` when given). An entry whose record the local
        log does not hold, or holds garbage, is skipped."""
        out: list[Marker] = []
        local = self.local
        for e in local.entries(self.topic, self.queue_id, from_offset, from_offset + max_nums):
            if durable_end is not None and e.phys + e.size > durable_end:
                break
            raw = local.read(e.phys, e.size)
            if raw is None:
                continue
            try:
                ext, _ = decode_record(raw)
            except CorruptRecordError:
                continue
            out.append(_marker(ext))
        return out

    def last_marker(self) -> Marker | None:
        end = self.local.max_offset_in_queue(self.topic, self.queue_id)
        if end <= self.local.min_offset_in_queue(self.topic, self.queue_id):
            return None
        found = self.read_markers(end - 1, 1)
        return found[0] if found else None

    def find_cut_batch(self) -> CutBatch | None:
        """The batch whose BEGIN is the queue's last marker (no END after it), with the deliveries of it that
        the log holds: the records right after BEGIN matching its digests, in order. None when the last batch is
        complete."""
        last = self.last_marker()
        if last is None or last.tag != TAG_BEGIN:
            return None
        delivered: list[MessageExt] = []
        want = last.digests
        if want:
            for _, raw in self.local.walk(last.end):
                try:
                    ext, _ = decode_record(raw)
                    if record_digest(raw, ext) != want[len(delivered)]:
                        break
                except CorruptRecordError:
                    break
                delivered.append(ext)
                if len(delivered) == len(want):
                    break
        return CutBatch(last, delivered)
