"""The whole local log as the broker's own services read it: every record this broker holds, confirmed or not.

Under HA the store holds consumer reads at the confirm offset (``MessageStore.max_offset_in_queue``,
``get_message``). The services that keep their progress in the commit log (brokerd/logbatch.py: the timer
service, POP revive) must see their own queues whole: a new master's unconfirmed tail holds batches it must not
deliver again, and a batch bracketed from the confirmed end of its marker queue would miss its own last markers.
``LocalLog`` reads the consume queues to their end and the records with ``pread`` (``MessageStore.read_local``:
the pages a service reads far back — a timer due in hours — do not stay mapped in the process). It never reads the
tier: what it cannot find locally is not there. Appends go to the store as they are.

Synchronous, no asyncio; the store's event loop thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, NamedTuple, Protocol

from brokerd.message import MAGIC_BLANK, MAGIC_V1, MAGIC_V2, CorruptRecordError, MessageExt, MessageInner, decode_record
from brokerd.store.config import StoreConfig
from brokerd.store.consume_queue import ENTRY
from brokerd.store.queue_store import ConsumeQueueStore
from brokerd.store.results import PutMessageResult

_HEAD: Final = 8  # a record's size and magic


class LocalStore(Protocol):
    """What the view needs of ``brokerd.store.message_store.MessageStore``."""

    cfg: StoreConfig
    queue_store: ConsumeQueueStore

    @property
    def max_phy_offset(self) -> int: ...

    def append_message(self, msg: MessageInner) -> PutMessageResult: ...

    def append_messages(self, msgs: list[MessageInner]) -> PutMessageResult: ...

    def read_local(self, phys: int, size: int) -> bytes | None: ...


class Entry(NamedTuple):
    """A consume-queue entry: the record of queue offset ``qoff`` is ``size`` bytes at commit-log offset ``phys``."""

    qoff: int
    phys: int
    size: int
    tags: int


class LocalLog:
    def __init__(self, store: LocalStore) -> None:
        self.store = store

    @property
    def segment_size(self) -> int:
        return self.store.cfg.mapped_file_size_commit_log

    @property
    def max_phy_offset(self) -> int:
        return self.store.max_phy_offset

    def append_message(self, msg: MessageInner) -> PutMessageResult:
        """``MessageStore.append_message``: appended now, never waiting for a flush or replicas."""
        return self.store.append_message(msg)

    def append_messages(self, msgs: list[MessageInner]) -> PutMessageResult:
        """``MessageStore.append_messages``: one synchronous run, never waiting for a flush or replicas."""
        return self.store.append_messages(msgs)

    # ------------------------------------------------------------------ queues

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.store.queue_store.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's next offset, confirmed or not."""
        cq = self.store.queue_store.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def entries(self, topic: str, queue_id: int, start: int, end: int) -> list[Entry]:
        """The entries of ``[start, end)``, clamped to the queue; holes skipped."""
        cq = self.store.queue_store.get(topic, queue_id)
        if cq is None:
            return []
        out = []
        for first, data in cq.chunks(max(start, cq.min_offset), end):
            for i, (phys, size, tags) in enumerate(ENTRY.iter_unpack(data)):
                if size > 0:
                    out.append(Entry(first + i, phys, size, tags))
        return out

    def entry(self, topic: str, queue_id: int, offset: int) -> Entry | None:
        found = self.entries(topic, queue_id, offset, offset + 1)
        return found[0] if found and found[0].qoff == offset else None

    # ------------------------------------------------------------------ records

    def read(self, phys: int, size: int) -> bytes | None:
        """``size`` bytes at ``phys`` (None outside the written local segments)."""
        return self.store.read_local(phys, size)

    def raw_at(self, phys: int) -> bytes | None:
        """The record starting at ``phys``, undecoded (None when there is none: a blank filler, the end, garbage)."""
        head = self.read(phys, _HEAD)
        if head is None:
            return None
        size, magic = int.from_bytes(head[:4], "big", signed=True), int.from_bytes(head[4:], "big", signed=True)
        if magic not in (MAGIC_V1, MAGIC_V2) or size <= _HEAD:
            return None
        return self.read(phys, size)

    def record_at(self, phys: int) -> MessageExt | None:
        """The record starting at ``phys``, decoded (None when there is none)."""
        raw = self.raw_at(phys)
        return _decoded(raw, -1) if raw is not None else None

    def record(self, phys: int, size: int) -> MessageExt | None:
        """The record of ``size`` bytes at ``phys``, decoded (None when it is not there or not a record)."""
        raw = self.read(phys, size)
        return _decoded(raw, size) if raw is not None else None

    def walk(self, start: int) -> Iterator[tuple[int, bytes]]:
        """(offset, bytes) of each record from ``start`` (a record boundary) in log order, over the blank filler at
        a segment's end into the next segment; it stops at the end of the log or at anything that is not a record."""
        phys, seg = start, self.segment_size
        while phys < self.store.max_phy_offset:
            head = self.read(phys, _HEAD)
            if head is not None and int.from_bytes(head[4:], "big", signed=True) == MAGIC_BLANK:
                phys = (phys // seg + 1) * seg
                continue
            raw = self.raw_at(phys) if head is not None else None
            if raw is None:
                return
            yield phys, raw
            phys += len(raw)


def _decoded(raw: bytes, size: int) -> MessageExt | None:
    try:
        ext, _ = decode_record(raw)
    except CorruptRecordError:
        return None
    return ext if size < 0 or ext.store_size == size else None
