"""Store checkpoint (``${root}/checkpoint``): durable positions recovery starts from.

Layout (big-endian, 48 bytes): magic "RMQC", version, commit-log flushed offset, logics offset
(consume queues and index are durable for all records below it), last store timestamp, clean flag,
CRC-32 of the preceding bytes. Written to a temporary file, fsynced, then renamed over the old one.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from zlib import crc32

from brokerd.fsutil import fsync_path

MAGIC: Final = b"RMQC"
VERSION: Final = 1
_BODY: Final = struct.Struct(">4siqqqi")
_CRC: Final = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commit_log_flushed: int
    logics_offset: int
    store_timestamp: int
    clean: bool

    def encode(self) -> bytes:
        body = _BODY.pack(MAGIC, VERSION, self.commit_log_flushed, self.logics_offset, self.store_timestamp,
                          1 if self.clean else 0)  # fmt: skip
        return body + _CRC.pack(crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint | None:
        if len(data) != _BODY.size + _CRC.size:
            return None
        body = data[: _BODY.size]
        if _CRC.unpack_from(data, _BODY.size)[0] != crc32(body):
            return None
        magic, version, flushed, logics, ts, clean = _BODY.unpack(body)
        if magic != MAGIC or version != VERSION or flushed < 0 or logics < 0:
            return None
        return cls(flushed, logics, ts, bool(clean))


def load_checkpoint(path: Path) -> Checkpoint | None:
    try:
        return Checkpoint.decode(path.read_bytes())
    except FileNotFoundError:
        return None


def save_checkpoint(path: Path, cp: Checkpoint) -> None:
    """Atomically replace the checkpoint (worker thread or shutdown)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, cp.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)
