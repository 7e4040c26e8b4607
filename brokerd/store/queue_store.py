"""All consume queues of a store, plus the record parsing that dispatch needs."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from brokerd.message import (
    DELAY,
    SCHEDULE_TOPIC,
    TAGS,
    CorruptRecordError,
    ReadBuf,
    decode_properties,
    record_layout,
    tags_code_of,
)
from brokerd.store.allocate import Allocator
from brokerd.store.consume_queue import ConsumeQueue
from brokerd.store.mapped_file import MappedFile, file_name

_QID_QOFF: Final = struct.Struct(">i4xq")  # queue id at 12, queue offset at 20
_I64: Final = struct.Struct(">q")


class DispatchInfo:
    """What dispatching one stored record needs (parsed from the record itself)."""

    __slots__ = ("topic", "queue_id", "queue_offset", "sys_flag", "store_ts", "properties")

    def __init__(self, topic: str, queue_id: int, queue_offset: int, sys_flag: int, store_ts: int,
                 properties: dict[str, str]) -> None:  # fmt: skip
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.sys_flag = sys_flag
        self.store_ts = store_ts
        self.properties = properties


def parse_for_dispatch(buf: ReadBuf, pos: int, size: int) -> DispatchInfo:
    """Parse topic, queue id/offset, sysflag, store timestamp and properties of the record at ``pos``."""
    sysflag, _body_pos, _blen, topic_pos, tlen = record_layout(buf, pos, size)
    qid, qoff = _QID_QOFF.unpack_from(buf, pos + 12)
    ts_pos = pos + 48 + (20 if sysflag & 0x10 else 8)
    store_ts = _I64.unpack_from(buf, ts_pos)[0]
    topic = bytes(buf[topic_pos : topic_pos + tlen]).decode("utf-8", "replace")
    props_pos = topic_pos + tlen + 2
    raw = bytes(buf[props_pos : pos + size])
    return DispatchInfo(topic, qid, qoff, sysflag, store_ts, decode_properties(raw) if raw else {})


def compute_tags_code(topic: str, props: dict[str, str], store_ts: int, delay_levels_ms: list[int]) -> int:
    """Tags code a record gets in its consume queue (SCHEDULE_TOPIC_XXXX: the deliver timestamp)."""
    if topic == SCHEDULE_TOPIC:
        level = props.get(DELAY)
        if level and level.lstrip("-").isdigit() and int(level) > 0 and delay_levels_ms:
            return store_ts + delay_levels_ms[min(int(level), len(delay_levels_ms)) - 1]
    return tags_code_of(props.get(TAGS))


class ConsumeQueueStore:
    """``consumequeue/<topic>/<queueId>/`` for every queue. Loop thread only."""

    PREFAULT = 4 << 10  # the first page (204 entries) of a new queue: its first fault is what the first send waits on

    def __init__(self, root: Path, file_size: int, allocator: Allocator | None = None) -> None:
        self.root = root
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.allocator = allocator

    def load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for tdir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for qdir in sorted(p for p in tdir.iterdir() if p.is_dir()):
                if not qdir.name.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(self.root, tdir.name, int(qdir.name), self.file_size, self.allocator)
                cq.load()
                self.queues[(tdir.name, int(qdir.name))] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.root, topic, queue_id, self.file_size, self.allocator)
            self.queues[(topic, queue_id)] = cq
        return cq

    MAX_STAGED = 512
    """At most this many files waiting in the allocator: a burst of topic creations (thousands of topics, each
    with its queues) must not hold a descriptor and a mapping per queue; the rest are created on first use."""

    def prepare(self, topic: str, queue_nums: int) -> None:
        """Have the allocator create the first file of each queue of ``topic`` that has none yet."""
        if self.allocator is None or self.allocator.pending + queue_nums > self.MAX_STAGED:
            return
        for qid in range(queue_nums):
            cq = self.queues.get((topic, qid))
            if cq is None or not cq.files:
                path = self.root / topic / str(qid) / file_name(0)
                self.allocator.request(path, 0, self.file_size, self.PREFAULT, random_access=True)

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self.queues.values()))

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.queues})

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.queues if t == topic)

    def delete_topic(self, topic: str) -> int:
        keys = [k for k in self.queues if k[0] == topic]
        for k in keys:
            self.queues.pop(k).destroy()
        if self.allocator is not None:
            self.allocator.discard(self.root / topic)
        tdir = self.root / topic
        if tdir.is_dir() and not any(tdir.iterdir()):
            tdir.rmdir()
        return len(keys)

    def recover(self, phys_limit: int) -> None:
        for cq in self:
            cq.recover(phys_limit)

    def truncate_by_phys(self, phys: int) -> None:
        """Drop every entry pointing at ``phys`` or later."""
        for cq in self:
            lo, hi = cq.min_offset, cq.max_offset
            while lo < hi:
                mid = (lo + hi) // 2
                e = cq.entry(mid)
                if e is not None and e[1] > 0 and e[0] >= phys:
                    hi = mid
                else:
                    lo = mid + 1
            cq.truncate_to(lo)

    def correct_min(self, min_phys: int) -> int:
        """After commit-log deletion: move min offsets forward and delete fully expired files."""
        n = 0
        for cq in self:
            cq.correct_min_offset(min_phys)
            n += cq.delete_expired_files()
        return n

    def take_sync(self) -> list[tuple[ConsumeQueue, list[Path], list[MappedFile], int]]:
        out = []
        for cq in self:
            job = cq.take_sync()
            if job is not None:
                out.append((cq, job[0], job[1], job[2]))
        return out

    def total_size(self) -> int:
        return sum(cq.total_size() for cq in self.queues.values())

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()


__all__ = ["ConsumeQueueStore", "DispatchInfo", "parse_for_dispatch", "compute_tags_code", "CorruptRecordError"]
