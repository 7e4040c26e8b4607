"""Message key index: ``index/<20-digit sequence>`` fixed-size hash files (our own format).

File layout:
  header (48 bytes, big-endian): magic "RMQI", version, begin_ts, begin_phy, end_ts, end_phy, index_count
  slots: ``max_hash_slot_num`` x uint32 (native byte order) = number of the newest entry in the chain, 0 = empty
  entries: ``max_index_num`` x 3 uint64 (native byte order): key hash << 32 | previous entry number,
           phys offset, store timestamp. Entry 0 is unused.

Native byte order lets the hot path use ``memoryview.cast`` item access instead of struct calls; the
files are host-local (a replica rebuilds its own index from the commit log).

Keys are ``topic + "#" + key`` hashed with CRC-32. Readers verify candidates against the record
(the index may hold stale entries after truncation), so the index never needs rewriting.

Concurrency contract: single writer; call only from the event loop thread (``sync`` excepted).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Final
from zlib import crc32

import structlog

from brokerd.native import native
from brokerd.store.allocate import Allocator
from brokerd.store.mapped_file import MappedFile, file_name, parse_file_name, sync_all

MAGIC: Final = b"RMQI"
VERSION: Final = 2
HEADER: Final = struct.Struct(">4siqq")  # magic, version, begin_ts, begin_phy
TAIL: Final = struct.Struct(">qqi")  # end_ts, end_phy, index_count (at byte 24)
HEADER_SIZE: Final = 48
SLOT_SIZE: Final = 4
ENTRY_SIZE: Final = 24
ENTRY: Final = struct.Struct("=3Q")  # an entry as the views see it (native byte order)
SCAN_BYTES: Final = 2048 * ENTRY_SIZE

log = structlog.get_logger(component="store.index")

INDEX_PUT = native.index_put if native is not None and hasattr(native, "index_put") else None
"""The C put loop (brokerd/csrc/index.c) when built; ``IndexService._put_python`` is the reference."""


def key_hash(topic: str, key: str) -> int:
    """CRC-32 of ``topic#key`` (UTF-8)."""
    return crc32(key.encode("utf-8", "replace"), crc32(f"{topic}#".encode("utf-8", "replace")))


class IndexFile:
    """One hash file. The header is a hint written at flush/close; ``count`` is recovered on open by
    scanning forward over entries written after the last header write (store ts is never 0)."""

    def __init__(self, mf: MappedFile, slots: int, max_entries: int) -> None:
        self.mf = mf
        self.slots = slots
        self.max_entries = max_entries
        self.entries_pos = HEADER_SIZE + slots * SLOT_SIZE
        mf.reserve_to(self.entries_pos)  # the header and every slot (written at random), before anything is read
        mm = mf.mm
        whole = memoryview(mm)
        self.slot_view = whole[HEADER_SIZE : self.entries_pos].cast("I")
        self.ent_view = whole[self.entries_pos : self.entries_pos + max_entries * ENTRY_SIZE].cast("Q")
        whole.release()
        magic, version, self.begin_ts, self.begin_phy = HEADER.unpack_from(mm, 0)
        self.end_ts, self.end_phy, self.count = TAIL.unpack_from(mm, 24)
        if magic != MAGIC or version != VERSION or not 0 < self.count <= max_entries:
            self.begin_ts = self.begin_phy = self.end_ts = self.end_phy = 0
            self.count = 1
        self._scan_unrecorded()
        self.write_header()

    def _scan_unrecorded(self) -> None:
        """Count the entries written after the last header write, read through the descriptor (the scan ends in
        the unwritten part, maybe a hole: see ``MappedFile.read_at``)."""
        end = self.entries_pos + self.max_entries * ENTRY_SIZE
        while self.count < self.max_entries:
            pos = self.entries_end(0)
            chunk = self.mf.read_at(pos, min(SCAN_BYTES, end - pos))
            if len(chunk) < ENTRY_SIZE:  # the file is shorter than it should be: what it holds is counted
                return
            for _word, phys, ts in ENTRY.iter_unpack(chunk[: len(chunk) - len(chunk) % ENTRY_SIZE]):
                if ts == 0:
                    return
                if self.count == 1:
                    self.begin_ts, self.begin_phy = ts, phys
                self.end_ts, self.end_phy = ts, phys
                self.count += 1

    def entries_end(self, more: int) -> int:
        """Where the entries end in the file once ``more`` are added."""
        return self.entries_pos + (int(self.count) + more) * ENTRY_SIZE

    @staticmethod
    def size_for(slots: int, max_entries: int) -> int:
        return HEADER_SIZE + slots * SLOT_SIZE + max_entries * ENTRY_SIZE

    def write_header(self) -> None:
        HEADER.pack_into(self.mf.mm, 0, MAGIC, VERSION, self.begin_ts, self.begin_phy)
        TAIL.pack_into(self.mf.mm, 24, self.end_ts, self.end_phy, self.count)

    def room(self) -> int:
        return int(self.max_entries - self.count)

    def lookup(self, h: int, begin_ts: int, end_ts: int, limit: int) -> list[int]:
        """Phys offsets of entries with hash ``h`` and ts in [begin_ts, end_ts], newest first."""
        out: list[int] = []
        ent = self.ent_view
        n = self.slot_view[h % self.slots]
        while 0 < n < self.count and len(out) < limit:
            word = ent[n * 3]
            ts = ent[n * 3 + 2]
            if word >> 32 == h and begin_ts <= ts <= end_ts:
                out.append(ent[n * 3 + 1])
            prev = word & 0xFFFFFFFF
            if prev >= n:
                break
            n = prev
        return out

    def close(self, *, write_header: bool = True) -> None:
        if self.mf.closed:
            return
        if write_header:
            self.write_header()
        self.slot_view.release()
        self.ent_view.release()
        self.mf.close()

    def destroy(self) -> None:
        self.close(write_header=False)
        self.mf.destroy()


class IndexService:
    PREFAULT = 256 << 10

    def __init__(self, directory: Path, slots: int, max_entries: int, allocator: Allocator | None = None) -> None:
        self.allocator = allocator
        self.dir = directory
        self.slots = slots
        self.max_entries = max_entries
        self.files: list[IndexFile] = []
        self.file_size = IndexFile.size_for(slots, max_entries)
        self._dirty: set[int] = set()
        self._cur: IndexFile | None = None
        self._topic_seeds: dict[str, int] = {}

    def load(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        seqs = sorted(s for s in (parse_file_name(p.name) for p in self.dir.iterdir()) if s is not None)
        for seq in seqs:
            path = self.dir / file_name(seq)
            if path.stat().st_size != self.file_size:
                log.warning("index_file_size_mismatch_dropped", file=path.name)
                path.unlink()
                continue
            mf = MappedFile.open_existing(path, seq, self.file_size, random_access=True)
            self.files.append(IndexFile(mf, self.slots, self.max_entries))
        if self.files:
            self._cur = self.files[-1]
            self._dirty.add(self._cur.mf.base)

    def _writable(self, need: int) -> IndexFile:
        if self.files and self.files[-1].room() >= need:
            return self.files[-1]
        seq = self.files[-1].mf.base + 1 if self.files else 0
        mf = self.allocator.take(self.dir / file_name(seq)) if self.allocator is not None else None
        if mf is None:
            mf = MappedFile.create(self.dir, seq, self.file_size, random_access=True)
        f = IndexFile(mf, self.slots, self.max_entries)
        self.files.append(f)
        self._dirty.add(-1)
        log.info("index_file_created", seq=seq)
        return f

    def prepare(self) -> None:
        """Have the allocator create the first index file when there is none."""
        if not self.files and self.allocator is not None:
            self.allocator.request(self.dir / file_name(0), 0, self.file_size, self.PREFAULT, random_access=True)

    def current_file(self) -> IndexFile | None:
        """The file ``put_keys`` writes into now (None before the first): the C send lane writes the entries that
        fit in its reserved space directly (brokerd/csrc/lane_index.c) and sets its ``count``, ``begin_*`` and
        ``end_*`` as ``put_keys`` would; the rest it leaves to ``put_keys``."""
        return self._cur

    def put_keys(self, topic: str, keys: list[str], phys: int, ts: int) -> None:
        """Index ``keys`` of the record at ``phys`` (hot path: no header write, see IndexFile)."""
        f = self._cur
        if f is None or f.count + len(keys) > f.max_entries:
            f = self._cur = self._writable(len(keys))
            self._dirty.add(f.mf.base)
        seed = self._topic_seeds.get(topic)
        if seed is None:
            seed = self._topic_seeds[topic] = crc32(f"{topic}#".encode("utf-8", "replace"))
        end = f.entries_end(len(keys))
        if end > f.mf.reserved:
            f.mf.reserve_to(end)
        if INDEX_PUT is not None:
            n = INDEX_PUT(f.slot_view, f.ent_view, f.slots, f.count, f.max_entries, seed, keys, phys, ts)
        else:
            n = self._put_python(f, seed, keys, phys, ts)
        if f.count == 1:
            f.begin_ts, f.begin_phy = ts, phys
        f.count = n
        f.end_ts = ts
        f.end_phy = phys

    @staticmethod
    def _put_python(f: IndexFile, seed: int, keys: list[str], phys: int, ts: int) -> int:
        """The reference of ``native.index_put`` (brokerd/csrc/index.c): entries for ``keys``; the new count."""
        slot_view = f.slot_view
        ent = f.ent_view
        slots = f.slots
        n = f.count
        for key in keys:
            try:
                h = crc32(key.encode(), seed)
            except UnicodeEncodeError:
                h = crc32(key.encode("utf-8", "replace"), seed)
            s = h % slots
            prev = slot_view[s]
            i = n * 3
            ent[i] = h << 32 | (prev if prev < n else 0)
            ent[i + 1] = phys
            ent[i + 2] = ts
            slot_view[s] = n
            n += 1
        return int(n)

    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        """Candidate phys offsets (newest first, de-duplicated); the caller verifies each record."""
        h = key_hash(topic, key)
        seen: set[int] = set()
        out: list[int] = []
        for f in reversed(self.files):
            if f.count <= 1 or f.begin_ts > end_ts or f.end_ts < begin_ts:
                continue
            for phys in f.lookup(h, begin_ts, end_ts, max_num * 4 + 16):
                if phys not in seen:
                    seen.add(phys)
                    out.append(phys)
        return out

    @property
    def last_update(self) -> tuple[int, int]:
        for f in reversed(self.files):
            if f.count > 1:
                return f.end_ts, f.end_phy
        return 0, 0

    def delete_below(self, min_phys: int) -> int:
        """Delete index files (never the last) whose newest entry points below ``min_phys``."""
        n = 0
        while len(self.files) > 1 and self.files[0].end_phy < min_phys:
            self.files.pop(0).destroy()
            self._dirty.add(-1)
            n += 1
        return n

    def take_dirty(self) -> tuple[bool, list[MappedFile]]:
        """Loop thread: (directory changed, files written) since the last call; pass to ``sync``."""
        dirty, self._dirty = self._dirty, set()
        if self._cur is not None:
            self._dirty.add(self._cur.mf.base)  # the current file keeps receiving entries
        files = [f for f in self.files if f.mf.base in dirty]
        for f in files:
            f.write_header()
        return -1 in dirty, [f.mf for f in files]

    def sync(self, dirty: tuple[bool, list[MappedFile]]) -> None:
        """Worker thread: fsync what ``take_dirty`` returned."""
        sync_all([self.dir] if dirty[0] else [], dirty[1])

    def total_size(self) -> int:
        return len(self.files) * self.file_size

    def close(self) -> None:
        for f in self.files:
            f.close()
