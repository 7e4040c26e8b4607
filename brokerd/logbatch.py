"""Exactly-once deliveries through the commit log: batches bracketed by marker records.

Services that store messages on the broker's own behalf — the POP revive service re-putting un-acked messages
into retry topics, the timer service putting due messages into their real topics — must neither lose nor repeat a
delivery across a crash, a power loss or a failover to a slave. Their progress lives in the commit log itself, so
any prefix of the log (what recovery keeps, what a slave received) carries a consistent picture:

* a batch is appended as one synchronous run ``[BEGIN, d1 .. dn, END]``: BEGIN and END are marker records on the
  service's marker queue (``topic``/``queue_id``), each delivery carries the property ``BATCH_PROPERTY`` naming
  its batch (the BEGIN marker's queue offset). Appends never yield to the loop (``MessageStore.append_messages``),
  so no other record lands between a batch's records;
* a prefix of the log therefore shows each batch as done (END present), not started (no BEGIN) or **cut**: BEGIN
  is the last marker of the queue and the records right after it that carry its id are exactly the deliveries
  that were made. ``find_cut_batch`` returns them; the service completes the batch with ``close_cut_batch``
  (an END marker carrying what it decided) and delivers the rest in a new batch.

The markers' bodies are the service's own payload (its progress, e.g. which checkpoints a revive batch
resolved): the service rebuilds its state by reading its marker queue. A batch must fit in one commit-log segment
read (``MAX_BATCH_BYTES``) so that finding a cut batch reads a bounded range.

Pure of asyncio: the caller waits for the put acknowledgement (flush / replicas) of ``end_offset`` as it needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final, Protocol

from brokerd.message import MessageExt, MessageInner, decode_record
from brokerd.message.constants import TAGS
from brokerd.store.results import GetMessageResult, GetMessageStatus, PutMessageResult, PutStatus

BATCH_PROPERTY: Final = "__BATCH"
"""Property of each delivery: ``<marker topic>@<queue id>@<BEGIN's queue offset>`` (ignored by clients)."""

TAG_BEGIN: Final = "BEGIN"
TAG_END: Final = "END"
TAG_STATE: Final = "STATE"
MAX_BATCH_BYTES: Final = 4 * 1024 * 1024


class BatchStore(Protocol):
    """What the bracketing needs of the message store (``brokerd.store.message_store.MessageStore``)."""

    def append_messages(self, msgs: list[MessageInner]) -> PutMessageResult: ...

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int) -> GetMessageResult: ...

    def look_message_by_offset(self, phys_offset: int) -> bytes | None: ...

    @property
    def max_phy_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Marker:
    tag: str  # TAG_BEGIN / TAG_END / TAG_STATE
    body: bytes
    queue_offset: int
    phys: int
    size: int
    store_timestamp: int


@dataclass(frozen=True, slots=True)
class CutBatch:
    begin: Marker
    delivered: list[MessageExt]  # the batch's deliveries found in the log, in log order


class MarkedLog:
    """Bracketed batches on one marker queue of one store."""

    def __init__(self, store: BatchStore, topic: str, queue_id: int, *, segment_size: int,
                 store_host: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.store = store
        self.topic = topic
        self.queue_id = queue_id
        self.segment_size = segment_size  # the commit log's (mapped_file_size_commit_log)
        self.store_host = store_host

    def batch_id(self, begin_queue_offset: int) -> str:
        return f"{self.topic}@{self.queue_id}@{begin_queue_offset}"

    def marker(self, tag: str, body: bytes) -> MessageInner:
        now = time.time_ns() // 1_000_000
        return MessageInner(topic=self.topic, queue_id=self.queue_id, body=body, flag=0, properties={TAGS: tag},
                            sys_flag=0, born_timestamp=now, born_host=self.store_host, store_host=self.store_host)

    def append_batch(self, begin_body: bytes, deliveries: list[MessageInner], end_body: bytes) -> PutMessageResult:
        """Append ``[BEGIN, *deliveries, END]`` in one synchronous run (each delivery gets ``BATCH_PROPERTY``).
        On a failed append the log may hold a cut batch: the caller treats it as after a crash
        (``find_cut_batch``). Returns the store's result (``end_offset``: what to wait for)."""
        size = len(begin_body) + len(end_body) + sum(len(d.body) + 256 for d in deliveries)
        if size > MAX_BATCH_BYTES and len(deliveries) > 1:
            raise ValueError(f"batch of {len(deliveries)} deliveries ({size} bytes) exceeds {MAX_BATCH_BYTES}")
        bid = self.batch_id(self.store.max_offset_in_queue(self.topic, self.queue_id))
        for d in deliveries:
            d.properties[BATCH_PROPERTY] = bid
        return self.store.append_messages([self.marker(TAG_BEGIN, begin_body), *deliveries,
                                           self.marker(TAG_END, end_body)])

    def append_state(self, body: bytes) -> PutMessageResult:
        """A standalone marker (a checkpoint of the service's state; also what closes a cut batch)."""
        return self.store.append_messages([self.marker(TAG_STATE, body)])

    def close_cut_batch(self, end_body: bytes) -> PutMessageResult:
        """The END marker of the cut batch (the last marker is its BEGIN)."""
        return self.store.append_messages([self.marker(TAG_END, end_body)])

    def read_markers(self, from_offset: int, max_nums: int = 256) -> list[Marker]:
        """Markers from queue offset ``from_offset`` (fewer at the end of the queue; clamped to the queue's min)."""
        start = max(from_offset, self.store.min_offset_in_queue(self.topic, self.queue_id))
        r = self.store.get_message(self.topic, self.queue_id, start, max_nums)
        if r.status is not GetMessageStatus.FOUND:
            return []
        out: list[Marker] = []
        for buf in r.buffers:
            ext, _ = decode_record(buf)
            out.append(Marker(ext.tags or "", ext.body, ext.queue_offset, ext.commit_log_offset, ext.store_size,
                              ext.store_timestamp))
        return out

    def last_marker(self) -> Marker | None:
        end = self.store.max_offset_in_queue(self.topic, self.queue_id)
        if end <= self.store.min_offset_in_queue(self.topic, self.queue_id):
            return None
        found = self.read_markers(end - 1, 1)
        return found[0] if found else None

    def find_cut_batch(self) -> CutBatch | None:
        """The batch whose BEGIN is the queue's last marker (no END after it), with the deliveries of it that
        the log holds; None when the last batch is complete."""
        last = self.last_marker()
        if last is None or last.tag != TAG_BEGIN:
            return None
        bid = self.batch_id(last.queue_offset)
        delivered: list[MessageExt] = []
        phys = last.phys + last.size
        seg = self.segment_size
        while phys < self.store.max_phy_offset:
            raw = self.store.look_message_by_offset(phys)
            if raw is None:  # the blank filler at a segment's end: the batch continues in the next segment
                phys = (phys // seg + 1) * seg
                continue
            ext, _ = decode_record(raw)
            if ext.properties.get(BATCH_PROPERTY) != bid:
                break
            delivered.append(ext)
            phys += ext.store_size
        return CutBatch(last, delivered)


def put_ok(res: PutMessageResult) -> bool:
    return res.status is PutStatus.PUT_OK
