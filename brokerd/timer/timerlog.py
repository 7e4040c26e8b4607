"""The timer log (RIP-43's TimerLog): an append-only file of fixed 48-byte entries, one per timer the wheel holds,
each linked to the previous entry of its granule (the wheel keeps the newest). Derived from the timer topic like a
consume queue: it is cut back to the last snapshot after a crash and appended again from there.

Entry (little-endian): prev position (q), due ms (q), queue offset of the parked message in the timer topic (q),
its commit-log offset (q), the granule it is placed in (q), its record size (i), magic (I).

Files ``timerlog/<20-digit start position>`` of ``ENTRIES_PER_FILE`` entries, written with ``pwrite`` (entries are
buffered and written at the end of each loop step) and read with ``pread`` through a small block cache: the state
lives in the page cache and on disk, not in the process (no mapping, no Python object per timer).
"""

from __future__ import annotations

import os
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Final, NamedTuple

from brokerd.fsutil import fsync_fd, fsync_path

ENTRY: Final = struct.Struct("<qqqqqiI")
ENTRY_SIZE: Final = ENTRY.size  # 48
MAGIC: Final = 0x544D4C31  # "TML1"
ENTRIES_PER_BLOCK: Final = 1365
BLOCK: Final = ENTRIES_PER_BLOCK * ENTRY_SIZE  # a read's size (64 KiB - 16): whole entries
ENTRIES_PER_FILE: Final = ENTRIES_PER_BLOCK * 192
FILE_SIZE: Final = ENTRIES_PER_FILE * ENTRY_SIZE  # 12 MiB: whole blocks
CACHED_BLOCKS: Final = 32


class Entry(NamedTuple):
    pos: int
    prev: int
    due: int
    qoff: int
    phys: int
    place: int
    size: int


def encode_entry(prev: int, due: int, qoff: int, phys: int, place: int, size: int) -> bytes:
    return ENTRY.pack(prev, due, qoff, phys, place, size, MAGIC)


def decode_entry(buf: bytes | bytearray | memoryview, at: int, pos: int) -> Entry:
    """The entry at ``buf[at:]`` (timer-log position ``pos``); ValueError when it is not one."""
    prev, due, qoff, phys, place, size, magic = ENTRY.unpack_from(buf, at)
    if magic != MAGIC:
        raise ValueError(f"no timer-log entry at {pos}")
    return Entry(pos, prev, due, qoff, phys, place, size)


def file_name(pos: int) -> str:
    return f"{pos:020d}"


class TimerLog:
    """Segments of entries under ``directory``; ``end`` is the next position written."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.fds: dict[int, int] = {}  # segment base -> fd
        self.end = 0
        self.written = 0  # entries below it are in the files; [written, end) in ``_pending``
        self._pending = bytearray()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._unsynced: set[int] = set()

    def open(self, end: int) -> None:
        """Open the segments, cut back to ``end`` (a snapshot's): later entries are dropped."""
        self.dir.mkdir(parents=True, exist_ok=True)
        bases = sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit())
        for base in bases:
            if base >= end and base != end - end % FILE_SIZE:
                os.unlink(self.dir / file_name(base))
                continue
            self.fds[base] = os.open(self.dir / file_name(base), os.O_RDWR)
        last = end - end % FILE_SIZE
        if end % FILE_SIZE and last not in self.fds:
            self.close()
            raise ValueError(f"timer log segment {file_name(last)} is missing")
        for base, fd in self.fds.items():
            if os.fstat(fd).st_size < min(FILE_SIZE, end - base):
                self.close()
                raise ValueError(f"timer log segment {file_name(base)} is shorter than its entries")
        if last in self.fds:
            os.ftruncate(self.fds[last], end - last)
            self._unsynced.add(last)
        self.end = self.written = end
        self._pending.clear()
        self._cache.clear()

    def reset(self, start: int = 0) -> None:
        """Drop every segment; the log starts over at ``start`` (a segment boundary)."""
        self.close()
        if self.dir.exists():
            for p in self.dir.iterdir():
                if p.name.isdigit():
                    os.unlink(p)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.end = self.written = start - start % FILE_SIZE
        self._pending.clear()

    def append(self, prev: int, due: int, qoff: int, phys: int, place: int, size: int) -> int:
        """Buffer an entry; returns its position (written to the file by ``flush``)."""
        pos = self.end
        self._pending += ENTRY.pack(prev, due, qoff, phys, place, size, MAGIC)
        self.end = pos + ENTRY_SIZE
        if len(self._pending) >= BLOCK:
            self.flush()
        return pos

    def flush(self) -> None:
        """Write the buffered entries (pwrite, split at segment ends)."""
        data = memoryview(self._pending)
        pos = self.written
        while data:
            base = pos - pos % FILE_SIZE
            fd = self.fds.get(base)
            if fd is None:
                fd = self.fds[base] = os.open(self.dir / file_name(base), os.O_RDWR | os.O_CREAT, 0o644)
            n = min(len(data), base + FILE_SIZE - pos)
            written = os.pwrite(fd, data[:n], pos - base)
            if written <= 0:
                raise OSError(f"short write to the timer log at {pos}")
            self._unsynced.add(base)
            pos += written
            data = data[written:]
        data.release()
        self.written = pos
        self._pending.clear()

    def read(self, pos: int) -> Entry:
        """The entry at ``pos`` (ValueError when there is none)."""
        if pos >= self.written:
            at = pos - self.written
            if pos >= self.end or at < 0:
                raise ValueError(f"timer-log position {pos} beyond the end {self.end}")
            return decode_entry(self._pending, at, pos)
        block = pos // BLOCK
        data = self._cache.get(block)
        start = block * BLOCK
        if data is None or pos + ENTRY_SIZE > start + len(data):
            data = self._read_block(start)
        else:
            self._cache.move_to_end(block)
        return decode_entry(data, pos - start, pos)

    def _read_block(self, start: int) -> bytes:
        base = start - start % FILE_SIZE
        fd = self.fds.get(base)
        if fd is None:
            raise ValueError(f"timer-log position {start} is in no segment")
        n = min(BLOCK, base + FILE_SIZE - start, self.written - start)
        data = os.pread(fd, n, start - base)
        block = start // BLOCK
        self._cache[block] = data
        if len(self._cache) > CACHED_BLOCKS:
            self._cache.popitem(last=False)
        return data

    def sync_targets(self) -> list[tuple[int, Path]]:
        """The (fd, path) of the segments written since the last call (what ``sync`` makes durable)."""
        out = [(self.fds[b], self.dir / file_name(b)) for b in sorted(self._unsynced) if b in self.fds]
        self._unsynced.clear()
        return out

    @staticmethod
    def sync(targets: list[tuple[int, Path]], directory: Path) -> None:
        """fsync the given segments and the directory (a worker thread may run it; the fds stay open meanwhile:
        ``close`` and ``drop_below`` are loop calls that happen after the awaited sync)."""
        for fd, path in targets:
            fsync_fd(fd, path, data_only=True)
        fsync_path(directory)

    def drop_below(self, pos: int) -> int:
        """Delete the segments wholly below ``pos``; returns how many."""
        dropped = 0
        for base in sorted(self.fds):
            if base + FILE_SIZE > pos or base + FILE_SIZE > self.written:
                break
            os.close(self.fds.pop(base))
            os.unlink(self.dir / file_name(base))
            self._unsynced.discard(base)
            dropped += 1
        if dropped:
            self._cache.clear()
        return dropped

    @property
    def first(self) -> int:
        return min(self.fds) if self.fds else self.written - self.written % FILE_SIZE

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self._cache.clear()
        self._unsynced.clear()
