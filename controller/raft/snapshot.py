"""Snapshot image store: one file per image, written atomically (temp file, fsync, rename, fsync dir).

File `snap-<index:020d>-<term:020d>.snap` = magic, header (index, term, data length, crc32), data
(the state machine's msgpack bytes). After a successful save, older images are deleted. `load()`
returns the newest image and refuses (StorageCorruptionError) if that image is damaged, because the
WAL has already been compacted on its basis.

Not thread-safe: one writer at a time.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Final

from brokerd.fsutil import fsync_fd, fsync_path
from controller.raft.storage import StorageCorruptionError
from controller.raft.types import Snapshot
from controller.raft.wal import write_all

MAGIC: Final = b"RSNP\x01"
_HEADER = struct.Struct(">QQQI")


class SnapshotStore:
    def __init__(self, directory: str | Path, *, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.fsync = fsync

    def _images(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.dir.glob("snap-*.snap"):
            try:
                out.append((int(p.name.split("-")[1]), p))
            except (IndexError, ValueError):
                continue
        return sorted(out)

    def save(self, snap: Snapshot) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / f"snap-{snap.index:020d}-{snap.term:020d}.snap"
        tmp = final.with_name(final.name + ".tmp")
        header = MAGIC + _HEADER.pack(snap.index, snap.term, len(snap.data), zlib.crc32(snap.data))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, header + snap.data)
            if self.fsync:
                fsync_fd(fd, tmp)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        if self.fsync:
            fsync_path(self.dir)
        for index, path in self._images():
            if path != final and index <= snap.index:
                path.unlink()

    def load(self) -> Snapshot | None:
        if not self.dir.exists():
            return None
        for p in self.dir.glob("*.tmp"):
            p.unlink()
        images = self._images()
        if not images:
            return None
        path = images[-1][1]
        raw = path.read_bytes()
        hdr_end = len(MAGIC) + _HEADER.size
        if len(raw) < hdr_end or not raw.startswith(MAGIC):
            raise StorageCorruptionError(f"{path}: not a snapshot image")
        index, term, length, crc = _HEADER.unpack_from(raw, len(MAGIC))
        data = raw[hdr_end:]
        if len(data) != length or zlib.crc32(data) != crc:
            raise StorageCorruptionError(f"{path}: snapshot image damaged (length or checksum)")
        return Snapshot(index, term, data)
