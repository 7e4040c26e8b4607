"""A broker's metadata change records (RIP-81) read from its store directory, read-only, and the export file that
carries them elsewhere (an archive; the Spark compaction job, ``scripts/compact_metadata.py``).

Reading a store (``StoreReader``): the latest snapshot file under ``<root>/config/metadataSnapshots/`` (none: the
empty image, records from queue offset 0), then per sync topic the consume-queue entries of queue 0 from the
snapshot's position on (``consumequeue/<topic>/0/<20-digit byte offset>``, 20-byte entries: phys offset, size,
tags code), each record read from the commit-log segment holding it (``commitlog/<20-digit offset>``) or, below
the local segments, from the store's tier (tiered storage: the tier the store directory names,
``brokerd.tiered.archive``, read-only, with the broker's own backends), and checked (topic, queue offset, phys
offset, size, body CRC). Nothing is locked or written, so a running broker's store can be read. The first entry
not written yet, or a record that does not check (a torn tail, a write in flight), ends the topic: ``ends`` says
where, and the next read starts there. Records needed but gone (expired with their commit-log segment and not in
the tier, or below the queue's first file) raise ``RecordsExpired`` unless ``allow_gaps``.

Export file (``write_export`` / ``ExportReader``): ``RIP81EXP`` then frames ``[u32 length][u32 crc32][payload]``.
The first frame is a msgpack header: format, broker, created ms, source, the base snapshot
(``Snapshot.encode`` bytes or nil), the sync-topic table and the positions after the last record. Every other
frame is a block of records, each a msgpack array ``[topic index, queue offset, log offset, size, body]``
concatenated (body: the message body, ``SyncRecord.decode`` reads it). A torn last frame keeps its whole records
(a file cut mid-write); a frame whose CRC fails otherwise ends the file there.

Bodies stay undecoded here: ``RawRecord.record()`` decodes one; folding is ``brokerd.sync.image``'s job.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import struct
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal, NamedTuple

import msgpack

from brokerd.message import CorruptRecordError, body_crc, decode_record
from brokerd.store.tier import TierView
from brokerd.sync.records import SYNC_TOPICS, SyncRecord
from brokerd.sync.snapshot import Snapshot, SnapshotStore
from brokerd.tiered.archive import store_tier

EXPORT_MAGIC: Final = b"RIP81EXP"
EXPORT_FORMAT: Final = "rip81-export/1"
TOPICS: Final = tuple(sorted(SYNC_TOPICS))  # the topic table of files this module writes
BLOCK_RECORDS: Final = 65_536
CQ_ENTRY: Final = struct.Struct(">qiq")
FRAME: Final = struct.Struct(">IIc")  # payload length, crc32, kind
KIND_HEADER: Final = b"H"
KIND_BLOCK: Final = b"B"
KIND_TRAILER: Final = b"E"
_CQ_READ: Final = CQ_ENTRY.size * 4096
TierArg = TierView | None | Literal["auto"]  # "auto": the tier the store directory names (none: local only)


class RecordsExpired(Exception):
    """Records the image needs are no longer in the store (expired or never there): take a newer snapshot."""


class RawRecord(NamedTuple):
    """One change record as stored: its sync topic, queue offset (queue 0), commit-log offset and size, body."""

    topic: str
    queue_offset: int
    log_offset: int
    size: int
    body: bytes

    def record(self) -> SyncRecord:
        """The decoded change record (ValueError when the body is not one)."""
        return SyncRecord.decode(self.body, self.log_offset)


def broker_name_of(path: str | Path) -> str:
    """The default broker name of a store directory or export file: its base name (without the extension)."""
    p = Path(path).resolve()
    return p.stem if p.is_file() else p.name


# ------------------------------------------------------------------------------------------- store reading


class CommitLogFiles:
    """Read-only access to the commit-log segments (``commitlog/<20-digit base offset>``)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        found = []
        if directory.is_dir():
            found = sorted((int(p.name), p) for p in directory.iterdir() if len(p.name) == 20 and p.name.isdigit())
        self.bases = [b for b, _ in found]
        self.paths = [p for _, p in found]
        self.segment_size = self.paths[0].stat().st_size if self.paths else 0
        self._fds: dict[int, int] = {}

    @property
    def min_offset(self) -> int:
        return self.bases[0] if self.bases else 0

    def read(self, phys: int, size: int) -> bytes | None:
        """``size`` bytes at ``phys`` when they lie within one segment that exists, else None."""
        i = bisect.bisect_right(self.bases, phys) - 1
        if i < 0 or size <= 0 or phys - self.bases[i] + size > self.segment_size:
            return None
        fd = self._fds.get(i)
        if fd is None:
            try:
                fd = self._fds[i] = os.open(self.paths[i], os.O_RDONLY)
            except FileNotFoundError:  # deleted by the broker's clean task meanwhile
                return None
        data = os.pread(fd, size, phys - self.bases[i])
        return data if len(data) == size else None

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def queue_entries(queue_dir: Path, start: int) -> Iterator[tuple[int, int, int]]:
    """(queue offset, phys, size) of the written entries of one consume queue from ``start`` (or its first entry
    when that is later), up to the first entry not written (size 0: the end, or a hole a recovery will fill)."""
    if not queue_dir.is_dir():
        return
    files = sorted((int(p.name), p) for p in queue_dir.iterdir() if len(p.name) == 20 and p.name.isdigit())
    for base, path in files:
        skip = max(start * CQ_ENTRY.size - base, 0)
        with path.open("rb") as fh:
            fh.seek(skip)
            offset = (base + skip) // CQ_ENTRY.size
            while chunk := fh.read(_CQ_READ):
                usable = len(chunk) - len(chunk) % CQ_ENTRY.size
                for phys, size, _tags in CQ_ENTRY.iter_unpack(chunk[:usable]):
                    if size <= 0:
                        return
                    yield offset, phys, size
                    offset += 1
                if usable < len(chunk):
                    return


@dataclass
class ScanResult:
    """What one read of a store found: where each topic's records start and end, torn tails, expired records."""

    starts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)  # next queue offset not read, per sync topic
    torn: dict[str, int] = field(default_factory=dict)  # topic -> queue offset of the record that did not check
    expired: dict[str, tuple[int, int]] = field(default_factory=dict)  # topic -> (wanted, first available)
    records: int = 0
    log_end: int = -1  # commit-log end of the last record read


class StoreReader:
    """A broker's store directory, read-only: its latest metadata snapshot and the change records after it.
    ``tier``: where records below the local segments are read ("auto": the tier the store names, if any)."""

    def __init__(self, root: str | Path, *, config_dir: str | Path | None = None, allow_gaps: bool = False,
                 tier: TierArg = "auto") -> None:  # fmt: skip
        self.root = Path(root)
        self.config_dir = Path(config_dir) if config_dir is not None else self.root / "config"
        self.allow_gaps = allow_gaps
        self.log = CommitLogFiles(self.root / "commitlog")
        self.tier = store_tier(self.root) if tier == "auto" else tier
        self.result = ScanResult()

    def snapshot(self) -> Snapshot | None:
        """The newest readable snapshot file (None: there is none)."""
        return SnapshotStore(str(self.config_dir)).latest()

    def records(self, positions: dict[str, int] | None) -> Iterator[RawRecord]:
        """Every readable record at or after ``positions`` (None: from 0), topic after topic (sorted); each topic
        in queue (= log) order. ``self.result`` describes the read when the iterator is exhausted."""
        self.result = ScanResult()
        for topic in TOPICS:
            start = (positions or {}).get(topic, 0)
            self.result.starts[topic] = self.result.ends[topic] = start
            yield from self.topic_records(topic, start)

    def topic_records(self, topic: str, start: int) -> Iterator[RawRecord]:
        res = self.result
        expected = start
        for qoff, phys, size in queue_entries(self.root / "consumequeue" / topic / "0", start):
            if phys < self.log.min_offset and not self._in_tier(phys, size):
                continue  # its segment expired, and no tier holds it (the queue's head is cleaned later)
            if qoff != expected:
                self._gap(topic, expected, qoff)
            raw = self._read(topic, qoff, phys, size)
            if raw is None:
                res.torn[topic] = qoff
                return
            res.records += 1
            res.log_end = max(res.log_end, phys + size)
            expected = res.ends[topic] = qoff + 1
            yield raw
        last = self._last_entry(topic)
        if last is not None and last >= expected:  # entries after ``expected`` exist, all expired
            self._gap(topic, expected, last + 1)

    def _last_entry(self, topic: str) -> int | None:
        last = None
        for qoff, _, _ in queue_entries(self.root / "consumequeue" / topic / "0", self.result.ends[topic]):
            last = qoff
        return last

    def _gap(self, topic: str, wanted: int, first: int) -> None:
        self.result.expired[topic] = (wanted, first)
        if not self.allow_gaps:
            raise RecordsExpired(f"{topic}: records from queue offset {wanted} are needed, the store has them "
                                 f"from {first} only (expired): start from a newer snapshot")  # fmt: skip

    def _in_tier(self, phys: int, size: int) -> bool:
        tier = self.tier
        return tier is not None and tier.min_offset <= phys and phys + size <= tier.end

    def _read(self, topic: str, qoff: int, phys: int, size: int) -> RawRecord | None:
        data = self.log.read(phys, size) if phys >= self.log.min_offset else None
        if data is None and self.tier is not None and self._in_tier(phys, size):
            data = self.tier.read(phys, size)  # below the local log, or its segment expired meanwhile
        if data is None:
            return None
        try:
            msg, end = decode_record(data)
        except CorruptRecordError:
            return None
        if (end != size or msg.topic != topic or msg.queue_offset != qoff or msg.commit_log_offset != phys
                or body_crc(msg.body) != msg.body_crc):  # fmt: skip
            return None
        return RawRecord(topic, qoff, phys, size, msg.body)

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class StoreRecords:
    """A store's latest snapshot (None: none) and every change record after it, in log order per topic."""

    snapshot: Snapshot | None
    records: list[RawRecord]
    scan: ScanResult

    def decoded(self) -> list[SyncRecord]:
        """The readable records in commit-log order (unreadable bodies are left out)."""
        return decode_in_log_order(self.records)


def read_store(root: str | Path, *, config_dir: str | Path | None = None, allow_gaps: bool = False,
               positions: dict[str, int] | None = None, tier: TierArg = "auto") -> StoreRecords:  # fmt: skip
    """The latest snapshot and the records after its positions (``positions`` overrides them)."""
    with StoreReader(root, config_dir=config_dir, allow_gaps=allow_gaps, tier=tier) as reader:
        snap = reader.snapshot()
        start = positions if positions is not None else (snap.positions if snap is not None else None)
        records = list(reader.records(start))
        return StoreRecords(snap, records, reader.result)


def decode_in_log_order(raws: Iterable[RawRecord]) -> list[SyncRecord]:
    """Decode and sort by commit-log offset (the order the master wrote them); unreadable bodies are skipped."""
    out = []
    for raw in raws:
        try:
            out.append(raw.record())
        except ValueError:
            continue
    out.sort(key=lambda r: r.log_offset)
    return out


# ------------------------------------------------------------------------------------------- export files


def pack_records(raws: Iterable[RawRecord], topics: Sequence[str] = TOPICS) -> bytes:
    """One block payload: the records as concatenated msgpack arrays."""
    index = {t: i for i, t in enumerate(topics)}
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    for r in raws:
        packer.pack([index[r.topic], r.queue_offset, r.log_offset, r.size, r.body])
    out: bytes = packer.bytes()
    return out


def unpack_records(payload: bytes, topics: Sequence[str] = TOPICS) -> Iterator[RawRecord]:
    """The records of a block payload (a torn one: its whole records)."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(payload), 1 << 20))
    unpacker.feed(payload)
    for item in unpacker:
        ti, qoff, loff, size, body = item
        yield RawRecord(topics[ti], qoff, loff, size, body)


def _frame(kind: bytes, payload: bytes) -> bytes:
    return FRAME.pack(len(payload), zlib.crc32(payload), kind) + payload


@dataclass
class ExportStats:
    records: int = 0
    blocks: int = 0
    bytes: int = 0
    positions: dict[str, int] = field(default_factory=dict)


def write_export(path: str | Path, broker: str, snapshot: Snapshot | None, raws: Iterable[RawRecord], *,
                 source: str = "", created_ms: int | None = None,
                 block_records: int = BLOCK_RECORDS) -> ExportStats:  # fmt: skip
    """Write an export file (a temporary file renamed over ``path``): the header with ``snapshot``, the records
    in blocks, the trailer with the positions after them (per sync topic: after its last record, else the
    snapshot's)."""
    path = Path(path)
    stats = ExportStats(positions=dict(snapshot.positions) if snapshot is not None else {t: 0 for t in TOPICS})
    header = {"format": EXPORT_FORMAT, "broker": broker, "created": created_ms or time.time_ns() // 1_000_000,
              "source": source, "snapshot": snapshot.encode() if snapshot is not None else None,
              "topics": list(TOPICS)}  # fmt: skip
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(EXPORT_MAGIC + _frame(KIND_HEADER, msgpack.packb(header, use_bin_type=True)))
        block: list[RawRecord] = []
        for raw in raws:
            block.append(raw)
            stats.positions[raw.topic] = max(stats.positions.get(raw.topic, 0), raw.queue_offset + 1)
            if len(block) >= block_records:
                _write_block(fh, block, stats)
        _write_block(fh, block, stats)
        trailer = {"positions": stats.positions, "records": stats.records}
        fh.write(_frame(KIND_TRAILER, msgpack.packb(trailer, use_bin_type=True)))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    stats.bytes = path.stat().st_size
    return stats


def _write_block(fh: IO[bytes], block: list[RawRecord], stats: ExportStats) -> None:
    if not block:
        return
    fh.write(_frame(KIND_BLOCK, pack_records(block)))
    stats.records += len(block)
    stats.blocks += 1
    block.clear()


@dataclass
class ExportHeader:
    broker: str
    created_ms: int
    source: str
    snapshot: Snapshot | None
    topics: list[str]


class ExportReader:
    """An export file. ``header`` is read at once; ``blocks()`` yields the record-block payloads (a torn tail:
    its whole records), then ``complete`` tells whether the trailer was there and ``positions`` holds its
    positions (None: the file was cut short, take them from the records)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.complete = False
        self.positions: dict[str, int] | None = None
        with self.path.open("rb") as fh:
            if fh.read(len(EXPORT_MAGIC)) != EXPORT_MAGIC:
                raise ValueError(f"{self.path}: not a metadata export file")
            first = next(_frames(fh), None)
            if first is None or first[0] != KIND_HEADER or not first[2]:
                raise ValueError(f"{self.path}: metadata export without its header")
            self.header = _decode_header(first[1])
            self._data_start = fh.tell()

    def blocks(self) -> Iterator[bytes]:
        self.complete, self.positions = False, None
        with self.path.open("rb") as fh:
            fh.seek(self._data_start)
            for kind, payload, whole in _frames(fh):
                if kind == KIND_TRAILER and whole:
                    doc = msgpack.unpackb(payload, raw=False)
                    self.positions = {str(t): int(p) for t, p in doc["positions"].items()}
                    self.complete = True
                    return
                if kind == KIND_BLOCK:
                    yield payload if whole else _whole_records(payload)
                if not whole:
                    return

    def read_all(self) -> list[RawRecord]:
        """Every record of the file."""
        return [r for payload in self.blocks() for r in unpack_records(payload, self.header.topics)]


def _frames(fh: IO[bytes]) -> Iterator[tuple[bytes, bytes, bool]]:
    """(kind, payload, whole) per frame; a frame cut short comes last with whole=False; a bad CRC ends the file."""
    while head := fh.read(FRAME.size):
        if len(head) < FRAME.size:
            return
        length, crc, kind = FRAME.unpack(head)
        payload = fh.read(length)
        if len(payload) < length:
            yield kind, payload, False
            return
        if zlib.crc32(payload) != crc:
            return
        yield kind, payload, True


def _decode_header(payload: bytes) -> ExportHeader:
    doc = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise ValueError("metadata export: unknown format")
    snap = Snapshot.decode(doc["snapshot"]) if doc.get("snapshot") is not None else None
    topics = [str(t) for t in doc.get("topics") or ()]
    if set(topics) != set(SYNC_TOPICS):
        raise ValueError(f"metadata export: bad topic table {topics}")
    return ExportHeader(str(doc.get("broker") or ""), int(doc.get("created") or 0), str(doc.get("source") or ""),
                        snap, topics)  # fmt: skip


def _whole_records(payload: bytes) -> bytes:
    """The prefix of a torn block payload that holds whole records."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(payload), 1 << 20))
    unpacker.feed(payload)
    end = 0
    try:
        for _ in unpacker:
            end = unpacker.tell()
    except ValueError:  # garbage after the whole records
        pass
    return payload[:end]


def export_store(root: str | Path, out: str | Path, *, broker: str | None = None,
                 config_dir: str | Path | None = None, allow_gaps: bool = False,
                 tier: TierArg = "auto") -> tuple[ExportStats, ScanResult]:  # fmt: skip
    """Export a store's latest snapshot and the records after it (streamed: memory stays flat)."""
    with StoreReader(root, config_dir=config_dir, allow_gaps=allow_gaps, tier=tier) as reader:
        snap = reader.snapshot()
        raws = reader.records(snap.positions if snap is not None else None)
        stats = write_export(out, broker or broker_name_of(root), snap, raws, source=str(Path(root).resolve()))
        return stats, reader.result


def main(argv: list[str] | None = None) -> int:
    """``python -m brokerd.sync.export STORE_DIR OUT``: export a (possibly running) broker's metadata records."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("store_dir")
    ap.add_argument("out")
    ap.add_argument("--broker", help="name in the export (default: the store directory's name)")
    ap.add_argument("--config-dir", help="metadata config directory (default: STORE_DIR/config)")
    ap.add_argument("--allow-gaps", action="store_true", help="export even when needed records expired")
    ap.add_argument("--no-tier", action="store_true", help="read the local log only, not the store's tier")
    args = ap.parse_args(argv)
    try:
        stats, scan = export_store(args.store_dir, args.out, broker=args.broker, config_dir=args.config_dir,
                                   allow_gaps=args.allow_gaps, tier=None if args.no_tier else "auto")  # fmt: skip
    except RecordsExpired as exc:
        print(f"export failed: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the tier (or the store) could not be read
        print(f"export failed: {exc}", file=sys.stderr)
        return 1
    report: dict[str, Any] = {"out": args.out, "records": stats.records, "bytes": stats.bytes,
                              "positions": stats.positions, "torn": scan.torn, "expired": scan.expired}  # fmt: skip
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
