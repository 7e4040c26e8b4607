"""Epoch file (``${storePathRootDir}/epochFileCheckpoint``): which master epoch wrote which part of the log.

Spec §4.5 (format, append rule) and §4.4 (the AutoSwitch HA handshake's consistent-point search).

File format (RocketMQ ``CheckpointFile``, text, platform line separator)::

    <entry count>
    <CRC32 of the entry lines (each with its separator) & 0x7FFFFFFF>
    <epoch>-<startOffset>            one line per entry, oldest first

Entries are sorted by epoch; epochs and start offsets are both strictly increasing. An entry's end offset is
the next entry's start offset; the last entry is open-ended (the current max offset when comparing).

Durability: every mutation writes the whole file to ``<name>.tmp``, fsyncs it, renames it over the file and
fsyncs the directory; then the same content goes to ``<name>.bak`` the same way. Loading uses the main file,
or the backup when the main one is missing, empty or corrupt (bad count/CRC/syntax/order).

The entry logic is pure (``consistent_point``); only ``EpochFile`` touches files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from zlib import crc32

import structlog

from brokerd.fsutil import fsync_path

FILE_NAME: Final = "epochFileCheckpoint"
BACKUP_SUFFIX: Final = ".bak"
MAX_EPOCH: Final = (1 << 31) - 1  # int32 on the wire (HA handshake / transfer header)
MAX_OFFSET: Final = (1 << 63) - 1  # int64
_INT: Final = re.compile(r"\d{1,19}")
_ENTRY: Final = re.compile(r"(\d{1,10})-(\d{1,19})")


class EpochFileError(Exception):
    """The epoch file and its backup are both unreadable (the message names the files)."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int

    def to_line(self) -> str:
        return f"{self.epoch}-{self.start_offset}"


def _checksum(entries: Sequence[EpochEntry]) -> int:
    content = "".join(e.to_line() + os.linesep for e in entries)
    return crc32(content.encode()) & 0x7FFFFFFF


def encode(entries: Sequence[EpochEntry]) -> bytes:
    """The file content for ``entries`` (count line, CRC line, entry lines)."""
    body = "".join(e.to_line() + os.linesep for e in entries)
    return f"{len(entries)}{os.linesep}{_checksum(entries)}{os.linesep}{body}".encode()


def decode(data: bytes) -> list[EpochEntry]:
    """Parse file content; raises ValueError describing the first problem."""
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError("not ASCII text") from exc
    if len(lines) < 2 or not _INT.fullmatch(lines[0]) or not _INT.fullmatch(lines[1]):
        raise ValueError("missing or malformed count/CRC header lines")
    count, expected_crc = int(lines[0]), int(lines[1])
    if len(lines) - 2 != count:
        raise ValueError(f"entry count {count} but {len(lines) - 2} entry lines")
    entries: list[EpochEntry] = []
    for n, line in enumerate(lines[2:], start=3):
        m = _ENTRY.fullmatch(line)
        if m is None:
            raise ValueError(f"line {n}: malformed entry {line[:40]!r}")
        entries.append(EpochEntry(int(m.group(1)), int(m.group(2))))
    actual = _checksum(entries)
    if actual != expected_crc:
        raise ValueError(f"CRC mismatch: file says {expected_crc}, entries give {actual}")
    for prev, cur in zip(entries, entries[1:], strict=False):
        if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
            raise ValueError(f"entries out of order: {prev.to_line()} then {cur.to_line()}")
    if entries and (entries[-1].epoch > MAX_EPOCH or entries[-1].start_offset > MAX_OFFSET):
        raise ValueError("entry out of range")
    return entries


def _ends(entries: Sequence[EpochEntry], max_offset: int) -> dict[int, tuple[int, int]]:
    """epoch -> (start, end); the last entry ends at ``max_offset``."""
    out: dict[int, tuple[int, int]] = {}
    for i, e in enumerate(entries):
        end = entries[i + 1].start_offset if i + 1 < len(entries) else max_offset
        out[e.epoch] = (e.start_offset, end)
    return out


def consistent_point(local: Sequence[EpochEntry], other: Sequence[EpochEntry], local_max_offset: int,
                     other_max_offset: int) -> int:  # fmt: skip
    """Spec §4.4: walk ``local`` newest to oldest; at the first epoch ``other`` also has with the same start
    offset, return min(local end, other end) of that epoch (a last entry ends at its side's max offset).
    -1 when there is no such epoch (including either history being empty)."""
    theirs = _ends(other, other_max_offset)
    mine = _ends(local, local_max_offset)
    for e in reversed(local):
        match = theirs.get(e.epoch)
        if match is not None and match[0] == e.start_offset:
            return min(mine[e.epoch][1], match[1])
    return -1


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)


class EpochFile:
    """The epoch history of this broker's commit log, persisted on every change. Not thread-safe: use from
    one thread (the store's event loop, or its recovery thread before services start)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + BACKUP_SUFFIX)
        self._entries: list[EpochEntry] = []
        self.log = structlog.get_logger().bind(component="epoch_file", path=str(self.path))

    # ------------------------------------------------------------------ load / persist

    def load(self) -> None:
        """Read the main file, else the backup; neither existing means an empty history.

        Raises EpochFileError (naming both files) when no readable copy exists but one was expected."""
        main_err = self._try_read(self.path)
        if isinstance(main_err, list):
            self._entries = main_err
            return
        bak = self._try_read(self.backup_path)
        if isinstance(bak, list):
            if main_err is not None:
                self.log.warning("epoch_file_backup_used", reason=main_err, entries=len(bak))
            self._entries = bak
            return
        if main_err is None and bak is None:
            self._entries = []  # neither file exists (or the main one is empty): no history yet
            return
        raise EpochFileError(f"epoch file {self.path} unreadable ({main_err or 'missing or empty'}) and backup "
                             f"{self.backup_path} unreadable ({bak or 'missing or empty'})")  # fmt: skip

    @staticmethod
    def _try_read(path: Path) -> list[EpochEntry] | str | None:
        """Entries, or an error string (corrupt), or None (missing or empty)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"read failed: {exc}"
        if not data:
            return None
        try:
            return decode(data)
        except ValueError as exc:
            return str(exc)

    def _persist(self, entries: list[EpochEntry]) -> None:
        """Write ``entries`` (main, then backup) and only then adopt them: a failed write changes nothing."""
        data = encode(entries)
        _write_atomic(self.path, data)
        _write_atomic(self.backup_path, data)
        self._entries = entries

    # ------------------------------------------------------------------ queries

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else 0

    def end_offset(self, epoch: int) -> int | None:
        """End of ``epoch``'s range (the next entry's start); None when it is the open-ended last entry.
        Raises KeyError for an epoch not in the file."""
        for i, e in enumerate(self._entries):
            if e.epoch == epoch:
                return self._entries[i + 1].start_offset if i + 1 < len(self._entries) else None
        raise KeyError(epoch)

    def find_epoch_at(self, offset: int) -> EpochEntry | None:
        """The entry whose range [start, end) holds ``offset`` (the last one is open-ended)."""
        found: EpochEntry | None = None
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e
        return found

    def find_consistent_point(self, other: list[EpochEntry], local_max_offset: int, other_max_offset: int) -> int:
        return consistent_point(self._entries, other, local_max_offset, other_max_offset)

    # ------------------------------------------------------------------ mutations (each persisted)

    def append(self, epoch: int, start_offset: int) -> bool:
        """Add ``(epoch, start_offset)``; False (nothing changes) unless both are strictly larger than the last
        entry's (spec §4.5). ValueError for values outside int32 epoch / int64 offset."""
        if not 0 <= epoch <= MAX_EPOCH:
            raise ValueError(f"epoch {epoch} outside [0, {MAX_EPOCH}]")
        if not 0 <= start_offset <= MAX_OFFSET:
            raise ValueError(f"start_offset {start_offset} outside [0, {MAX_OFFSET}]")
        last = self.last_entry()
        if last is not None and (epoch <= last.epoch or start_offset <= last.start_offset):
            self.log.warning("epoch_append_rejected", epoch=epoch, start_offset=start_offset,
                             last_epoch=last.epoch, last_start_offset=last.start_offset)  # fmt: skip
            return False
        self._persist([*self._entries, EpochEntry(epoch, start_offset)])
        self.log.info("epoch_appended", epoch=epoch, start_offset=start_offset)
        return True

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Drop the entries starting at or after ``offset``."""
        kept = [e for e in self._entries if e.start_offset < offset]
        if len(kept) != len(self._entries):
            self._persist(kept)
            self.log.info("epoch_truncated_by_offset", offset=offset, entries=len(kept))

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Drop the entries whose epoch is >= ``epoch``."""
        kept = [e for e in self._entries if e.epoch < epoch]
        if len(kept) != len(self._entries):
            self._persist(kept)
            self.log.info("epoch_truncated_by_epoch", epoch=epoch, entries=len(kept))
