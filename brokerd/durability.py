"""Test-only power-loss journal: what each successful fsync made durable, so a harness can rebuild the state a
power loss would leave (tests/chaos/harness/powerloss.py; docs/chaos.md).

Off unless the environment variable ``BROKERD_POWERLOSS_JOURNAL`` names a journal file when the process
starts. Callers guard every hook with ``if durability.ENABLED:`` (one module attribute read), so an ordinary
run pays nothing. When on, every sync of a store file, a metadata file or a Raft file appends one JSON line:

* ``{"op": "len", "path", "id", "len", "size", "reset"}`` — a file's bytes ``[0, len)`` are durable and its
  durable size is ``size`` (a preallocated segment: ``len`` is the written extent, ``size`` the full size).
  ``reset`` marks a truncation (the durable extent may shrink);
* ``{"op": "blob", "path", "id", "sha"}`` — a small file rewritten whole is durable with this content (kept
  under ``<journal>.blobs/<sha>``), so a rename over it that is not made durable can be undone;
* ``{"op": "dir", "path", "id", "seq", "entries": {name: id}}`` — a directory's entries as they were before its
  fsync; ``seq`` orders the samples (two threads may journal their syncs in the other order).

``id`` is ``"<inode>:<generation>"`` (the generation from ``FS_IOC_GETVERSION`` where the filesystem has one),
so a reused inode number is not mistaken for the old file. Lengths and listings are sampled *before* the sync
starts and recorded only after it succeeded: whatever they cover was written before the sync, so it is durable;
anything later is not claimed. The journal itself is written with plain ``write`` (it is the oracle, not
subject to the simulated power loss: the harness SIGKILLs the process, so the page cache survives).
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import mmap
import os
import stat
import struct
import threading
from pathlib import Path
from typing import Any, Final

import orjson

JOURNAL_ENV: Final = "BROKERD_POWERLOSS_JOURNAL"
_FS_IOC_GETVERSION: Final = 0x80087601
_PAGE: Final = mmap.PAGESIZE
_SEQ = itertools.count()  # orders samples taken on different threads (next() is atomic under the GIL)


def file_id(fd: int, st: os.stat_result | None = None) -> str:
    """``inode:generation`` of an open file (generation 0 where the filesystem has none)."""
    ino = (st or os.fstat(fd)).st_ino
    try:
        gen = struct.unpack("q", fcntl.ioctl(fd, _FS_IOC_GETVERSION, bytes(8)))[0] & 0xFFFFFFFF
    except OSError:
        gen = 0
    return f"{ino}:{gen}"


def path_id(path: str | Path) -> str | None:
    """``file_id`` of a path (file or directory); None when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return file_id(fd)
    finally:
        os.close(fd)


def nonzero_extent(buf: Any, size: int) -> int:
    """End of the written part of an append-only buffer (non-zero prefix, zero suffix): a binary search for the
    first all-zero page, then the last non-zero byte before it. Wrong for files written out of order."""
    zero = bytes(_PAGE)
    pages = -(-size // _PAGE)
    lo, hi = 0, pages  # pages [0, lo) hold data, pages [hi, pages) are zero
    while lo < hi:
        mid = (lo + hi) // 2
        if buf[mid * _PAGE : min(size, (mid + 1) * _PAGE)] != zero[: min(_PAGE, size - mid * _PAGE)]:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return 0
    start = (lo - 1) * _PAGE
    last = bytes(buf[start : min(size, lo * _PAGE)])
    return start + len(last.rstrip(b"\0"))


class Journal:
    """The append-only journal of one process (thread-safe: syncs happen on worker threads)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.blobs = path + ".blobs"
        os.makedirs(self.blobs, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.write({"op": "start", "pid": os.getpid()})

    def write(self, rec: dict[str, Any]) -> None:
        line = orjson.dumps(rec) + b"\n"
        with self._lock:
            os.write(self._fd, line)

    def blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        target = os.path.join(self.blobs, sha)
        if not os.path.exists(target):
            tmp = f"{target}.{threading.get_ident()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        return sha


def _open_journal() -> Journal | None:
    path = os.environ.get(JOURNAL_ENV)
    return Journal(path) if path else None


JOURNAL: Final[Journal | None] = _open_journal()
ENABLED: Final = JOURNAL is not None

Note = dict[str, Any]


def _journal() -> Journal:
    assert JOURNAL is not None, "durability hooks are called only when ENABLED"
    return JOURNAL


def before_fd_sync(fd: int, path: str | Path, *, length: int | None = None, reset: bool = False) -> Note:
    """Sample a file or directory just before ``fsync(fd)``: its size (or ``length``: the durable extent of a
    preallocated file) or, for a directory, its entries. Pass the result to ``record`` once the sync succeeded."""
    st = os.fstat(fd)
    ident = file_id(fd, st)
    if stat.S_ISDIR(st.st_mode):
        seq = next(_SEQ)
        return {"op": "dir", "path": os.path.abspath(path), "id": ident, "seq": seq, "entries": _entries(path)}
    size = st.st_size
    return {"op": "len", "path": os.path.abspath(path), "id": ident, "len": size if length is None else length,
            "size": size, "reset": reset}


class _Pread:
    """Slices of a file read through its descriptor: a hole reads as zeros without faulting a page in (a read
    fault on a hole of a tmpfs mapping allocates a page: SIGBUS when the filesystem is full)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __getitem__(self, s: slice) -> bytes:
        return os.pread(self.fd, s.stop - s.start, s.start)


def before_mapped_sync(fd: int, path: str | Path, wrote: int, size: int) -> Note:
    """Sample a preallocated mapped file before its sync: ``len`` is the larger of the writer's position
    (``wrote``: exact for commit-log segments) and the written extent found in the mapping (consume-queue files
    are written through the mapping in order; ``wrote`` is stale for them). The harness's restore policy says
    which files are append-only (docs/chaos.md)."""
    note = before_fd_sync(fd, path, length=0)
    note["wrote"] = wrote
    note["extent"] = nonzero_extent(_Pread(fd), size)
    note["len"] = max(wrote, note["extent"])
    note["size"] = size
    return note


def _entries(path: str | Path) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with os.scandir(path) as it:
            for e in it:
                ident = path_id(e.path)
                if ident is not None:
                    out[e.name] = ident
    except OSError:
        pass
    return out


def record(note: Note) -> None:
    """The sync that ``note`` was sampled for succeeded: journal it."""
    _journal().write(note)


def fd_synced(fd: int, path: str | Path, *, reset: bool = False) -> None:
    """A file written by one thread was just synced (its size now is what the sync covered)."""
    record(before_fd_sync(fd, path, reset=reset))


def content_synced(path: str | Path) -> None:
    """A small file rewritten whole was just synced (or renamed into place after its sync): keep its content,
    so the harness can put it back when a later rename over it is lost. Never raises: a failure is journaled
    as an ``error`` record (the harness reports them)."""
    j = _journal()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        j.write({"op": "error", "path": os.path.abspath(path), "error": repr(e)})
        return
    try:
        st = os.fstat(fd)
        data = os.pread(fd, st.st_size, 0)
        j.write({"op": "blob", "path": os.path.abspath(path), "id": file_id(fd, st), "sha": j.blob(data),
                 "size": len(data)})
    except OSError as e:
        j.write({"op": "error", "path": os.path.abspath(path), "error": repr(e)})
    finally:
        os.close(fd)
