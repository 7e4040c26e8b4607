"""Consume queues: ``consumequeue/<topic>/<queueId>/<20-digit byte offset>`` files of 20-byte entries.

Entry = commit-log physical offset (int64) + record size (int32) + tags code (int64). Logical offset n
lives at byte n * 20. An entry with size 0 is a hole (never written) and is skipped by readers.

Concurrency contract: single writer; call only from the event loop thread (``sync`` excepted).
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import structlog

from brokerd.store.allocate import Allocator
from brokerd.store.config import CQ_UNIT_SIZE
from brokerd.store.mapped_file import MappedFile, file_name, parse_file_name

ENTRY: Final = struct.Struct(">qiq")
_SIZE_AT: Final = struct.Struct(">i")

log = structlog.get_logger(component="store.consumequeue")


class ConsumeQueue:
    """One topic/queue. ``max_offset`` = next logical offset to write; ``min_offset`` = first valid one."""

    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int,
                 allocator: Allocator | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = root / topic / str(queue_id)
        self.file_size = file_size
        self.units_per_file = file_size // CQ_UNIT_SIZE
        self.files: list[MappedFile] = []
        self.max_offset = 0
        self.min_offset = 0
        self.flushed_offset = 0
        self.dir_dirty = False
        self.allocator = allocator

    # ------------------------------------------------------------ load / recover

    def load(self) -> None:
        bases = sorted(b for b in (parse_file_name(p.name) for p in self.dir.iterdir()) if b is not None)
        for base in bases:
            if base % self.file_size:
                log.warning("consume_queue_file_misaligned", topic=self.topic, queue_id=self.queue_id, base=base)
                continue
            self.files.append(MappedFile.open_existing(self.dir / file_name(base), base, self.file_size, random_access=True))
        if self.files:
            self.min_offset = self.files[0].base // CQ_UNIT_SIZE
            self.max_offset = self.min_offset

    def recover(self, phys_limit: int) -> None:
        """Keep the leading run of written entries with phys < ``phys_limit``; drop the rest.

        Entries are written in order, so the written end is found by binary search on "size > 0" in the
        last file (or the one before, when the last is empty), and the first entry at or after
        ``phys_limit`` by binary search on phys (entries are in commit-log order). If a power loss left
        holes, the result may be short; re-dispatch from ``phys_limit`` rewrites those entries in place.
        """
        if not self.files:
            return
        last = self.files[-1]
        end = last.base // CQ_UNIT_SIZE + _written_count(last)
        if end == last.base // CQ_UNIT_SIZE and len(self.files) > 1:
            prev = self.files[-2]
            end = prev.base // CQ_UNIT_SIZE + _written_count(prev)
        self.max_offset = max(end, self.min_offset)
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= phys_limit:
                hi = mid
            else:
                lo = mid + 1
        self._set_end(lo)

    def truncate_to(self, offset: int) -> None:
        """Drop entries at logical offsets >= ``offset``."""
        if offset < self.max_offset:
            self._set_end(offset)

    def _set_end(self, offset: int) -> None:
        keep = [f for f in self.files if f.base // CQ_UNIT_SIZE < offset] or self.files[:1]
        for f in self.files[len(keep) :]:
            f.destroy()
            self.dir_dirty = True
        self.files = keep
        if keep:
            last = keep[-1]
            offset = max(offset, last.base // CQ_UNIT_SIZE)
            pos = min(last.size, offset * CQ_UNIT_SIZE - last.base)
            last.zero_range(pos, _last_nonzero_end(last, pos))
            last.wrote = pos
        self.max_offset = offset
        self.min_offset = min(self.min_offset, offset)
        self.flushed_offset = min(self.flushed_offset, offset)

    # ------------------------------------------------------------ write

    def put(self, queue_offset: int, phys: int, size: int, tags_code: int) -> None:
        """Write the entry for ``queue_offset`` (normally == max_offset; later offsets leave holes)."""
        byte_pos = queue_offset * CQ_UNIT_SIZE
        f = self.files[-1] if self.files else None
        if f is None or byte_pos >= f.end or byte_pos < f.base:
            empty = not self.files
            f = self._file_for_write(byte_pos)
            if empty:  # a replica that starts mid-log: the queue begins at its first entry, not its file's start
                self.min_offset = queue_offset
        pos = byte_pos - f.base
        if pos + CQ_UNIT_SIZE > f.reserved:
            f.reserve_to(pos + CQ_UNIT_SIZE)
        ENTRY.pack_into(f.mm, pos, phys, size, tags_code)
        if queue_offset >= self.max_offset:
            self.max_offset = queue_offset + 1

    def _file_for_write(self, byte_pos: int) -> MappedFile:
        base = byte_pos - byte_pos % self.file_size
        for f in self.files:
            if f.base == base:
                return f
        if self.files and base < self.files[0].base:
            raise ValueError(f"queue offset {byte_pos // CQ_UNIT_SIZE} is below the first file of {self.topic}")
        staged = self.allocator.take(self.dir / file_name(base)) if self.allocator is not None else None
        if staged is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            staged = MappedFile.create(self.dir, base, self.file_size, random_access=True)
        f = staged
        if not self.files:
            self.min_offset = self.max_offset = base // CQ_UNIT_SIZE
        self.files.append(f)
        self.files.sort(key=lambda x: x.base)
        self.dir_dirty = True
        return f

    # ------------------------------------------------------------ read

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        """(phys, size, tags) at ``offset`` or None when its file is missing / out of range."""
        if offset < self.min_offset or offset >= self.max_offset:
            return None
        f = self._file_for_read(offset)
        if f is None:
            return None
        phys, size, tags = ENTRY.unpack_from(f.mm, offset * CQ_UNIT_SIZE - f.base)
        return phys, size, tags

    def _file_for_read(self, offset: int) -> MappedFile | None:
        if not self.files:
            return None
        byte_pos = offset * CQ_UNIT_SIZE
        idx = (byte_pos - self.files[0].base) // self.file_size
        if 0 <= idx < len(self.files):
            f = self.files[idx]
            if f.base <= byte_pos < f.end:
                return f
        for f in self.files:
            if f.base <= byte_pos < f.end:
                return f
        return None

    def has_file_for(self, offset: int) -> bool:
        """The file that holds ``offset`` exists (a reader past the end of a missing one rolls to the next file)."""
        return self._file_for_read(offset) is not None

    def chunks(self, offset: int, end: int) -> Iterator[tuple[int, bytes]]:
        """The entries [offset, min(end, max_offset)) as (first queue offset, bytes), one piece per file; it ends at a
        missing file."""
        q, end = offset, min(end, self.max_offset)
        while q < end:
            f = self._file_for_read(q)
            if f is None:
                return
            lo = q * CQ_UNIT_SIZE - f.base
            hi = min(end * CQ_UNIT_SIZE - f.base, f.size)
            if hi <= lo:
                return
            yield q, f.mm[lo:hi]
            q += (hi - lo) // CQ_UNIT_SIZE

    def roll_next_file(self, offset: int) -> int:
        return offset + self.units_per_file - offset % self.units_per_file

    def visible_max_offset(self, phys_limit: int) -> int:
        """The max offset a reader may see when only records ending at or below ``phys_limit`` are visible
        (entries are in commit-log order, so a binary search from the tail)."""
        lo, hi = self.min_offset, self.max_offset
        if lo >= hi or self.last_phys_end() <= phys_limit:
            return hi
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[1] > 0 and e[0] + e[1] > phys_limit:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def last_phys_end(self) -> int:
        e = self.entry(self.max_offset - 1) if self.max_offset > self.min_offset else None
        return e[0] + e[1] if e else -1

    # ------------------------------------------------------------ expiry

    def correct_min_offset(self, min_phys: int) -> None:
        """Move min_offset to the first entry pointing at or after ``min_phys`` (binary search)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is None or e[1] > 0 and e[0] >= min_phys:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = lo

    def delete_expired_files(self) -> int:
        """Delete files (never the last) whose entries all lie below min_offset."""
        n = 0
        while len(self.files) > 1 and self.files[0].end // CQ_UNIT_SIZE <= self.min_offset:
            self.files.pop(0).destroy()
            self.dir_dirty = True
            n += 1
        return n

    # ------------------------------------------------------------ flush / close

    def take_sync(self) -> tuple[list[Path], list[MappedFile], int] | None:
        """Loop thread: what to fsync for entries written since the last flush (None = nothing).

        Returns (directories to fsync, files to fsync, offset that becomes flushed); the caller runs
        ``mapped_file.sync_all`` in a worker thread and then sets ``flushed_offset``.
        """
        upto = self.max_offset
        if upto == self.flushed_offset and not self.dir_dirty:
            return None
        dirs = [self.dir, self.dir.parent, self.dir.parent.parent] if self.dir_dirty else []
        self.dir_dirty = False
        lo = self.flushed_offset * CQ_UNIT_SIZE
        hi = upto * CQ_UNIT_SIZE
        return dirs, [f for f in self.files if f.end > lo and f.base < hi], upto

    def total_size(self) -> int:
        return len(self.files) * self.file_size

    def close(self) -> None:
        for f in self.files:
            f.close()

    def destroy(self) -> None:
        for f in self.files:
            f.destroy()
        self.files = []
        shutil.rmtree(self.dir, ignore_errors=True)


_ZERO_STEP: Final = bytes(65536)


def _written_count(f: MappedFile) -> int:
    """Number of leading entries with size > 0 in ``f`` (binary search; probes may land in holes: read_at)."""
    lo, hi = 0, f.size // CQ_UNIT_SIZE
    while lo < hi:
        mid = (lo + hi) // 2
        if _SIZE_AT.unpack(f.read_at(mid * CQ_UNIT_SIZE + 8, _SIZE_AT.size))[0] > 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _last_nonzero_end(f: MappedFile, pos: int) -> int:
    """End of the possibly stale region after ``pos``: scan 64 KiB steps until an all-zero step (read_at)."""
    end = pos
    p = pos
    while p < f.size:
        n = min(len(_ZERO_STEP), f.size - p)
        if f.read_at(p, n) != _ZERO_STEP[:n]:
            end = p + n
        else:
            break
        p += n
    return end
