"""The commit log: fixed-size segments ``commitlog/<20-digit start offset>`` holding records back to back.

When a record plus 8 bytes does not fit in the active segment, an 8-byte blank marker
(TOTALSIZE = remaining bytes, MAGIC = BLANK) ends the segment and the record opens the next one.

Records are written with pwrite and read through the segment's mapping (see ``mapped_file``).

Concurrency contract: single writer; call only from the event loop thread. The descriptors of ``sync_job`` are
synced on another thread (see ``mapped_file``).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from zlib import crc32

import structlog

from brokerd.message import (
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_V4_AFTER_MAGIC,
    HEADER_V4_SIZE,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    CorruptRecordError,
    MessageInner,
    RecordEncoder,
    verify_record,
)
from brokerd.store.allocate import Allocator
from brokerd.store.mapped_file import (
    MappedFile,
    SyncJob,
    Warmer,
    file_name,
    parse_file_name,
    prepare_sync,
)
from brokerd.store.tier import TierView

_SIZE_MAGIC: Final = struct.Struct(">ii")
HEADER_REST: Final = HEADER_V4_AFTER_MAGIC
_I16: Final = struct.Struct(">h")
_I64: Final = struct.Struct(">q")

log = structlog.get_logger(component="store.commitlog")


class RecordTooLarge(ValueError):
    pass


class CreateFileError(OSError):
    pass


class CommitLog:
    """Segmented append-only log of stored records."""

    def __init__(self, directory: Path, segment_size: int, store_host: tuple[str, int], *, warm: bool = True) -> None:
        self.dir = directory
        self.segment_size = segment_size
        self.store_host = store_host
        self.files: list[MappedFile] = []
        self.encoder = RecordEncoder()
        self._store_ip = self.encoder.host(store_host[0])
        self._store_port = store_host[1]
        self._warm = warm
        self.warmer: Warmer | None = None
        self.dir_dirty = False
        self.allocator: Allocator | None = None
        self._alloc_pos = segment_size  # appends ending past this position ask for the next segment
        self.tier: TierView | None = None  # reads below the local log fall back to it (tiered storage)

    # ------------------------------------------------------------ load / layout

    def load(self) -> None:
        """Open existing segments (sorted by start offset). Positions are set by recovery."""
        self.dir.mkdir(parents=True, exist_ok=True)
        bases = sorted(b for b in (parse_file_name(p.name) for p in self.dir.iterdir()) if b is not None)
        for i, base in enumerate(bases):
            if base % self.segment_size:
                raise ValueError(f"commit log file {file_name(base)} is not aligned to segment size {self.segment_size}")
            if i and base != bases[i - 1] + self.segment_size:
                raise ValueError(f"commit log files are not contiguous at {file_name(base)}")
            self.files.append(MappedFile.open_existing(self.dir / file_name(base), base, self.segment_size))
        for f in self.files:
            f.wrote = f.size  # refined by recovery for the tail

    @property
    def active(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else 0

    @property
    def max_offset(self) -> int:
        f = self.files[-1] if self.files else None
        return f.base + f.wrote if f is not None else 0

    def file_for(self, phys: int) -> MappedFile | None:
        if not self.files:
            return None
        idx = (phys - self.files[0].base) // self.segment_size
        if 0 <= idx < len(self.files):
            return self.files[idx]
        return None

    def roll_next_file(self, phys: int) -> int:
        return phys + self.segment_size - phys % self.segment_size

    def _new_file(self, base: int) -> MappedFile:
        f = self.allocator.take(self.dir / file_name(base)) if self.allocator is not None else None
        if f is None:
            try:
                f = MappedFile.create(self.dir, base, self.segment_size)
            except OSError as exc:
                raise CreateFileError(exc.errno, f"cannot create commit log file {file_name(base)}: {exc}") from exc
        self._alloc_pos = self.segment_size // 2
        self.files.append(f)
        self.dir_dirty = True
        if self.warmer is not None:
            self.warmer.track(f, 0)
        log.info("segment_created", base=base)
        return f

    def ensure_active(self, start: int = 0) -> MappedFile:
        f = self.active
        if f is None:
            f = self._new_file(start - start % self.segment_size)
            f.wrote = start % self.segment_size
        return f

    # ------------------------------------------------------------ append (hot path)

    def append(self, msg: MessageInner, props: bytes, queue_offset: int, store_ts: int) -> tuple[int, int]:
        """Append one record; return (physical offset, size). Raises RecordTooLarge / CreateFileError / OSError."""
        enc = self.encoder
        prefix, magic = enc.topics.get(msg.topic) or enc.topic_prefix(msg.topic)
        body = msg.body
        blen = len(body)
        tail = prefix + _I16.pack(len(props)) + props
        size = HEADER_V4_SIZE + blen + len(tail)
        if size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
            raise RecordTooLarge(f"record of {size} bytes does not fit a {self.segment_size}-byte segment")
        f = self.files[-1] if self.files else self.ensure_active()
        pos = f.wrote
        if pos + size + END_FILE_MIN_BLANK_LENGTH > f.size:
            f = self._roll(f)
            pos = 0
        phys = f.base + pos
        rec = bytearray(size)
        born = msg.born_host
        HEADER_REST.pack_into(
            rec, 8, crc32(body) & 0x7FFFFFFF, msg.queue_id, msg.flag, queue_offset, phys,
            msg.sys_flag & ~0x30, msg.born_timestamp, enc.hosts.get(born[0]) or enc.host(born[0]), born[1],
            store_ts, self._store_ip, self._store_port, msg.reconsume_times, msg.prepared_transaction_offset, blen,
        )  # fmt: skip
        rec[HEADER_V4_SIZE : HEADER_V4_SIZE + blen] = body
        rec[HEADER_V4_SIZE + blen :] = tail
        _SIZE_MAGIC.pack_into(rec, 0, size, magic)
        write_records(f, pos, rec)
        self.appended(f, pos + size, store_ts)
        return phys, size

    def appended(self, f: MappedFile, end: int, store_ts: int) -> None:
        """Records were written into the active segment ``f`` up to ``end`` (by ``append`` or the C send lane)."""
        f.wrote = end
        f.last_store_ts = store_ts
        if end > f.warm_trigger and self.warmer is not None:
            self.warmer.kick(end)
        if end > self._alloc_pos:
            self.prepare_next(f)

    PREFAULT = 1 << 20

    def prepare_next(self, f: MappedFile | None) -> None:
        """Have the allocator create the segment after ``f`` (the first one when None) off the loop thread."""
        self._alloc_pos = self.segment_size + 1
        if self.allocator is not None:
            base = f.end if f is not None else 0
            self.allocator.request(self.dir / file_name(base), base, self.segment_size, self.PREFAULT)

    @property
    def store_ip(self) -> bytes:
        """The 4 bytes of the store host written into every record."""
        return self._store_ip

    @property
    def store_port(self) -> int:
        return self._store_port

    def roll(self, f: MappedFile) -> MappedFile:
        """End the active segment ``f`` with the blank filler and open the next one (the store's batch append when
        its next record does not fit). Raises CreateFileError / OSError."""
        return self._roll(f)

    def _roll(self, f: MappedFile) -> MappedFile:
        if f.wrote < f.size:
            f.write_at(f.wrote, _SIZE_MAGIC.pack(f.size - f.wrote, MAGIC_BLANK))
            f.wrote = f.size
        return self._new_file(f.end)

    # ------------------------------------------------------------ raw append (replication)

    def append_raw(self, offset: int, data: bytes | memoryview) -> None:
        """Write raw log bytes at ``offset`` (== max_offset; an empty log may start at any segment start), splitting
        at segment boundaries."""
        if offset != self.max_offset and (self.files or offset % self.segment_size):
            raise ValueError(f"raw append at {offset} but the log ends at {self.max_offset}")
        mv = memoryview(data)
        pos = 0
        f = self.ensure_active(offset)
        while pos < len(mv):
            if f.wrote >= f.size:
                f = self._new_file(f.end)
            n = min(len(mv) - pos, f.size - f.wrote)
            f.write_at(f.wrote, mv[pos : pos + n])
            f.wrote += n
            pos += n

    # ------------------------------------------------------------ reads

    def _in_tier(self, phys: int) -> bool:
        t = self.tier
        return t is not None and phys < t.end and (not self.files or phys < self.files[0].base)

    def read(self, phys: int, size: int) -> bytes | None:
        f = self.file_for(phys)
        if f is None:
            return self.tier.read(phys, size) if self.tier is not None and self._in_tier(phys) else None
        pos = phys - f.base
        if size <= 0 or pos + size > f.wrote:
            return None
        return f.mm[pos : pos + size]

    def record_size_at(self, phys: int) -> int:
        """Size of the record at ``phys`` or -1 when none (blank, out of range, bad magic)."""
        f = self.file_for(phys)
        if f is None and self.tier is not None and self._in_tier(phys):
            head = self.tier.read(phys, 8)
            if head is None:
                return -1
            size, magic = _SIZE_MAGIC.unpack_from(head, 0)
            return int(size) if magic in (MAGIC_V1, MAGIC_V2) and size > 0 else -1
        if f is None or phys - f.base + 8 > f.wrote:
            return -1
        size, magic = _SIZE_MAGIC.unpack_from(f.mm, phys - f.base)
        if magic not in (MAGIC_V1, MAGIC_V2) or size <= 0 or phys - f.base + size > f.wrote:
            return -1
        return int(size)

    def store_timestamp_at(self, phys: int, size: int) -> int:
        f = self.file_for(phys)
        buf: bytes | mmap.mmap | None
        if f is None and self.tier is not None and self._in_tier(phys):
            buf, pos = self.tier.read(phys, min(size, 80)), 0
        elif f is None or phys - f.base + min(size, 80) > f.wrote:
            return -1
        else:
            buf, pos = f.mm, phys - f.base
        return -1 if buf is None else store_timestamp_in(buf, pos)

    def walk(self, start: int, limit: int) -> Iterator[tuple[int, MappedFile, int, int]]:
        """Yield (phys, file, file position, size) for complete records in [start, limit).

        A blank end-of-segment marker is yielded with size -1 (the next record is at ``file.end``).
        Stops at the first incomplete or unreadable record.
        """
        phys = start
        while phys < limit:
            f = self.file_for(phys)
            if f is None:
                return
            pos = phys - f.base
            if pos + 8 > f.wrote:
                return
            size, magic = _SIZE_MAGIC.unpack_from(f.mm, pos)
            if magic == MAGIC_BLANK:
                yield phys, f, pos, -1
                phys = f.end
                continue
            if size <= 0 or phys + size > limit or pos + size > f.wrote:
                return
            yield phys, f, pos, size
            phys += size

    def read_range(self, offset: int, max_bytes: int) -> memoryview:
        """Raw bytes from ``offset`` (no record boundaries implied): at most ``max_bytes``, never past the written
        end of the segment holding ``offset``; empty at the log end. A zero-copy view of the segment's mapping:
        the caller releases it before the segment may be closed (expiry, truncation, shutdown)."""
        if not self.min_offset <= offset <= self.max_offset:
            raise ValueError(f"read offset {offset} outside [{self.min_offset}, {self.max_offset}]")
        if max_bytes < 0:
            raise ValueError(f"max_bytes {max_bytes} < 0")
        f = self.file_for(offset)
        if f is None:
            return memoryview(b"")
        pos = offset - f.base
        n = min(max_bytes, f.wrote - pos)
        if n <= 0:
            return memoryview(b"")
        return memoryview(f.mm)[pos : pos + n]

    def read_raw(self, start: int, end: int) -> bytes:
        """Raw bytes [start, end) of one segment (no record boundaries implied)."""
        f = self.file_for(start)
        if f is None or end < start or end - f.base > f.wrote:
            raise ValueError(f"raw range [{start}, {end}) is not inside one written segment")
        return f.mm[start - f.base : end - f.base]

    # ------------------------------------------------------------ recovery support

    def scan_valid(self, start: int) -> int:
        """Verify records from ``start`` (a record boundary) and return the end of the valid log."""
        phys = start
        while True:
            f = self.file_for(phys)
            if f is None:
                return phys
            pos = phys - f.base
            if pos + 8 > f.size:
                return phys
            size, magic = _SIZE_MAGIC.unpack_from(f.mm, pos)
            if magic == MAGIC_BLANK:
                if size != f.size - pos:
                    return phys
                phys = f.end
                continue
            try:
                verify_record(f.mm, pos, f.size)
            except CorruptRecordError:
                return phys
            phys += size

    def set_end(self, end: int, *, zero_tail: bool) -> tuple[int, bool]:
        """Make ``end`` the log end: delete later files and zero the rest of the last one.

        Returns (segments deleted, whether non-zero bytes followed ``end`` in its segment).
        """
        keep = [f for f in self.files if f.base < end] or self.files[:1]
        deleted = len(self.files) - len(keep)
        for f in self.files[len(keep) :]:
            f.destroy()
            self.dir_dirty = True
        self.files = keep
        if not keep:
            return deleted, False
        last = keep[-1]
        pos = end - last.base
        dirty = pos < last.size and _nonzero(last, pos)
        if pos < last.size and (zero_tail or dirty):
            last.zero_from(pos)
        last.wrote = pos
        return deleted, dirty

    def truncate(self, offset: int) -> None:
        if offset < self.min_offset or offset > self.max_offset:
            raise ValueError(f"truncate offset {offset} outside [{self.min_offset}, {self.max_offset}]")
        if offset != self.max_offset:
            self.set_end(offset, zero_tail=True)

    # ------------------------------------------------------------ flush / delete

    def files_between(self, lo: int, hi: int) -> list[MappedFile]:
        return [f for f in self.files if f.end > lo and f.base < hi]

    def sync_job(self, files: list[MappedFile]) -> SyncJob:
        """The descriptors a flush of ``files`` syncs (and the directory's when segments were created/deleted),
        for the flush service's syncer."""
        dirs = [self.dir] if self.dir_dirty else []
        self.dir_dirty = False
        return prepare_sync(dirs, files)

    def sync_range(self, files: list[MappedFile]) -> None:
        """fsync ``files`` (and the directory when segments were created/deleted) now (recovery)."""
        self.sync_job(files).run()

    def delete_first(self, count: int) -> int:
        """Destroy the ``count`` oldest segments (never the active one); return how many were deleted."""
        n = min(count, len(self.files) - 1)
        for f in self.files[:n]:
            f.destroy()
        self.files = self.files[n:]
        if n:
            self.dir_dirty = True
        return n

    def total_size(self) -> int:
        return len(self.files) * self.segment_size

    def start_warming(self) -> None:
        """After recovery: start the warmer thread on the active segment from its write position."""
        if self._warm and self.warmer is None:
            self.warmer = Warmer()
        if self.warmer is not None and self.files:
            f = self.files[-1]
            f.warmed = f.wrote - f.wrote % mmap.PAGESIZE
            self.warmer.track(f, f.wrote)
        if self.files:
            self._alloc_pos = self.segment_size // 2

    def close(self) -> None:
        if self.warmer is not None:
            self.warmer.stop()
            self.warmer = None
        for f in self.files:
            f.close()


def store_timestamp_in(buf: bytes | memoryview | mmap.mmap, pos: int) -> int:
    """The store timestamp of the record at ``pos`` of ``buf``."""
    sysflag = struct.unpack_from(">i", buf, pos + 36)[0]
    ts_pos = pos + 48 + (20 if sysflag & BORNHOST_V6_FLAG else 8)
    return int(_I64.unpack_from(buf, ts_pos)[0])


def write_records(f: MappedFile, pos: int, data: bytes | bytearray | memoryview) -> None:
    """Write whole records at ``pos`` of ``f``, the first record's 8-byte size/magic header last: a write torn by
    a killed process leaves a zero header that recovery stops at (the C send lane does the same)."""
    mv = memoryview(data)
    f.write_at(pos + 8, mv[8:])
    f.write_at(pos, mv[:8])


def _nonzero(f: MappedFile, pos: int) -> bool:
    n = min(4096, f.size - pos)
    return any(f.mm[pos : pos + n])

