"""File write-ahead log for Raft records (see storage.py for the record kinds and replay rules).

Layout: `<dir>/wal-<seq:016d>.log` segments. Each record is `[u32 length][u32 crc32][msgpack payload]`.
`append` writes all records of one Ready with a single write() and at most one fsync. `rotate` writes
a new self-contained segment to a temp file, fsyncs it, renames it into place, fsyncs the directory
and only then deletes older segments, so a crash leaves either the old or the new set complete.

Recovery (`open`): segments are replayed in order; a bad or short record at the end of the *last*
segment is a torn write and is truncated away (and the truncation fsynced); anywhere else it is
corruption and `StorageCorruptionError` is raised. Every recovered segment is then fsynced: records that
survived a process crash only in the page cache become durable before the node acknowledges them.

Not thread-safe: one writer at a time (the driver serialises all disk work through one task).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Final

import msgpack
import structlog

from brokerd.fsutil import fsync_fd, fsync_path
from controller.raft.storage import Record, StorageCorruptionError, WalState, replay

_HEADER = struct.Struct(">II")
MAX_RECORD_BYTES: Final = 1 << 30
_PREFIX, _SUFFIX = "wal-", ".log"

log = structlog.get_logger().bind(component="raft_wal")


def encode_record(rec: Record) -> bytes:
    payload: bytes = msgpack.packb(list(rec))
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def scan_records(data: bytes) -> tuple[list[Record], int]:
    """Decode records from `data`; returns (records, length of the valid prefix)."""
    out: list[Record] = []
    pos, n = 0, len(data)
    while n - pos >= _HEADER.size:
        length, crc = _HEADER.unpack_from(data, pos)
        start, end = pos + _HEADER.size, pos + _HEADER.size + length
        if length == 0 or length > MAX_RECORD_BYTES or end > n:
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            rec = msgpack.unpackb(payload)
        except Exception:
            break
        if not isinstance(rec, list) or not rec:
            break
        out.append(tuple(rec))
        pos = end
    return out, pos


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class WriteAheadLog:
    def __init__(self, directory: str | Path, *, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.fsync = fsync
        self._fd: int | None = None
        self._seq = 0
        self.truncated_bytes = 0  # torn tail removed by the last open()

    def _segment(self, seq: int) -> Path:
        return self.dir / f"{_PREFIX}{seq:016d}{_SUFFIX}"

    def _segments(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.dir.iterdir():
            if p.name.startswith(_PREFIX) and p.name.endswith(_SUFFIX):
                try:
                    out.append((int(p.name[len(_PREFIX) : -len(_SUFFIX)]), p))
                except ValueError:
                    continue
        return sorted(out)

    def open(self) -> WalState:
        self.dir.mkdir(parents=True, exist_ok=True)
        for p in self.dir.glob("*.tmp"):
            p.unlink()
        state = WalState()
        segments = self._segments()
        for k, (seq, path) in enumerate(segments):
            data = path.read_bytes()
            records, valid = scan_records(data)
            if valid < len(data):
                if k != len(segments) - 1:
                    raise StorageCorruptionError(f"{path}: bad record at byte {valid} in a sealed segment")
                self._truncate(path, valid, len(data))
            replay(records, state)
            self._seq = seq
        if not segments:
            self._seq = 1
        path = self._segment(self._seq)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self.fsync:
            if not segments:
                fsync_path(self.dir)
            # What we just read may sit only in the page cache (appends written without fsync, or the
            # write of a Ready the process died in). The core treats every recovered entry as stable
            # and acknowledges it to leaders, so it must be durable before anything is sent: otherwise
            # a later power loss could drop an entry a leader already counted toward a commit.
            for _, seg in segments:
                fsync_path(seg)
        return state

    def _truncate(self, path: Path, valid: int, size: int) -> None:
        self.truncated_bytes = size - valid
        log.warning("wal_torn_tail_truncated", path=str(path), valid_bytes=valid, dropped_bytes=size - valid)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, valid)
            if self.fsync:
                fsync_fd(fd, path, reset=True)
        finally:
            os.close(fd)

    def append(self, records: list[Record], *, sync: bool) -> None:
        assert self._fd is not None, "WAL not open"
        if not records:
            return
        write_all(self._fd, b"".join(encode_record(r) for r in records))
        if sync and self.fsync:
            fsync_fd(self._fd, self._segment(self._seq), data_only=True)

    def rotate(self, records: list[Record]) -> None:
        """Start a new segment holding exactly `records` (a full state) and delete the older ones."""
        assert self._fd is not None, "WAL not open"
        new_seq = self._seq + 1
        final = self._segment(new_seq)
        tmp = final.with_name(final.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, b"".join(encode_record(r) for r in records))
            if self.fsync:
                fsync_fd(fd, tmp)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        if self.fsync:
            fsync_path(self.dir)
        os.close(self._fd)
        self._fd = os.open(final, os.O_WRONLY | os.O_APPEND)
        self._seq = new_seq
        for seq, path in self._segments():
            if seq < new_seq:
                path.unlink()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
