"""Fixed-size memory-mapped files (commit-log segments, consume-queue files, index files).

Concurrency contract: writes and reads happen on the event loop thread only. ``fsync`` may run in a
worker thread: under the file's own ``io_lock`` it checks ``closed`` and duplicates the descriptor,
then syncs the duplicate, so closing or deleting the file meanwhile is harmless. The Warmer holds the
lock while it populates pages, so the mapping cannot be closed under it.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any, Final

import structlog

MADV_POPULATE_WRITE: Final = 23  # Linux >= 5.14
MADV_WILLNEED: Final = 3
_ZERO_CHUNK: Final = 1 << 20


def file_name(offset: int) -> str:
    return f"{offset:020d}"


def parse_file_name(name: str) -> int | None:
    if len(name) == 20 and name.isdigit():
        return int(name)
    return None


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate(fd: int, size: int) -> None:
    """Reserve disk blocks so writes through the mapping never hit ENOSPC (which would be SIGBUS)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            os.ftruncate(fd, size)
        else:
            raise


class MappedFile:
    """One file of ``size`` bytes starting at logical ``base``, mapped read/write."""

    __slots__ = ("path", "base", "size", "fd", "mm", "wrote", "closed", "last_store_ts", "io_lock", "warm_trigger",
                 "warmed")  # fmt: skip

    def __init__(self, path: Path, base: int, size: int, fd: int, *, random_access: bool = False) -> None:
        self.path = path
        self.base = base
        self.size = size
        self.fd = fd
        self.mm = mmap.mmap(fd, size)
        if random_access:
            # No fault-time read-ahead for files written a few bytes at a time (consume queues, index): on a
            # new (fallocated, unwritten) file every fault would zero-fill up to read_ahead_kb of page cache
            # (8 MiB on our VMs: pre-faulting the first 64 KiB of a 6 MB consume-queue file cached all of it,
            # 1.3-10 ms of kernel time per file, 730 MB for 16 brokers x 8 queues). Commit-log segments keep
            # read-ahead: they are written sequentially, so what it zero-fills is written next anyway.
            self._advise(mmap.MADV_RANDOM)
        self.wrote = 0
        self.closed = False
        self.last_store_ts = 0
        self.io_lock = threading.Lock()
        self.warm_trigger = size  # appends past this kick the Warmer (set when it tracks the file)
        self.warmed = 0

    @classmethod
    def create(cls, directory: Path, base: int, size: int, *, name: str | None = None,
               random_access: bool = False) -> MappedFile:
        path = directory / (name or file_name(base))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < size:
                preallocate(fd, size)
            return cls(path, base, size, fd, random_access=random_access)
        except BaseException:
            os.close(fd)
            raise

    def _advise(self, advice: int) -> None:
        try:
            self.mm.madvise(advice)
        except (OSError, ValueError):  # advice is only a hint
            pass

    @classmethod
    def open_existing(cls, path: Path, base: int, size: int, *, random_access: bool = False) -> MappedFile:
        """Open a file; a short one (interrupted creation) is extended with zeros, a long one truncated."""
        fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual < size:
                preallocate(fd, size)
            elif actual > size:
                os.ftruncate(fd, size)
            return cls(path, base, size, fd, random_access=random_access)
        except BaseException:
            os.close(fd)
            raise

    @property
    def end(self) -> int:
        return self.base + self.size

    def fsync(self) -> None:
        """Make the file's written pages durable; safe to call from a worker thread."""
        with self.io_lock:
            if self.closed:
                return
            fd = os.dup(self.fd)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def zero_from(self, pos: int) -> None:
        """Zero bytes [pos, size) cheaply: shrink the file, then re-extend it (the filesystem zeroes)."""
        with self.io_lock:
            self.mm.close()
            os.ftruncate(self.fd, pos)
            preallocate(self.fd, self.size)
            self.mm = mmap.mmap(self.fd, self.size)
            os.fdatasync(self.fd)
            self.warmed = 0

    def zero_range(self, start: int, end: int) -> None:
        """Write zeros over [start, end) through the mapping (for small ranges)."""
        pos = start
        while pos < end:
            n = min(_ZERO_CHUNK, end - pos)
            self.mm[pos : pos + n] = bytes(n)
            pos += n

    def close(self) -> None:
        with self.io_lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.mm.close()
            finally:
                os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class _WarmThread:
    """The one daemon thread (per process) that pre-faults pages for every commit log's Warmer.

    One thread for all brokers of a container: a thread per broker would make 16 brokers fight the loop thread
    for the GIL (measured: 23k vs 34k msg/s at 16 brokers)."""

    _instance: _WarmThread | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.lanes: set[Warmer] = set()
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.advice = MADV_POPULATE_WRITE
        self.madvise = libc_madvise()
        self.disabled = self.madvise is None
        if not self.disabled:
            threading.Thread(target=self._run, name="store-warmer", daemon=True).start()

    @classmethod
    def get(cls) -> _WarmThread:
        with cls._guard:
            if cls._instance is None:
                cls._instance = _WarmThread()
            return cls._instance

    def _run(self) -> None:
        while True:
            self.event.wait()
            self.event.clear()
            busy = True
            while busy and not self.disabled:
                with self.lock:
                    lanes = list(self.lanes)
                busy = False
                for lane in lanes:  # round robin, a few chunks per lane per round
                    busy = lane.work(rounds=4) or busy


class Warmer:
    """Pre-faults pages of one commit log's active segment ahead of its write position (on the shared thread).

    First-touch page faults cost more than encoding a record (about 10 us per 4 KiB page on the VMs we
    measured). ``madvise(MADV_POPULATE_WRITE)`` called through ctypes releases the GIL, so the faults are
    taken on another core. Populating never changes file contents, so it may run while the loop thread
    writes. The loop thread only compares its write position with ``file.warm_trigger``.
    """

    MIN_AHEAD = 512 << 10

    def __init__(self, ahead: int = 8 << 20, chunk: int = 1 << 20) -> None:
        # How far ahead to pre-fault adapts to the write rate: a busy log gets up to `ahead`, a slow one only
        # MIN_AHEAD, so a container of many mostly idle brokers does not pre-fault megabytes it never writes
        # (measured: 16 brokers sharing 1 core's load ran 1.6x slower with a fixed 8 MiB lead).
        self._max_ahead = ahead
        self._ahead = min(ahead, self.MIN_AHEAD)
        self._chunk = max(mmap.PAGESIZE, min(chunk, self._ahead) // mmap.PAGESIZE * mmap.PAGESIZE)
        self._last_kick = 0.0
        self._file: MappedFile | None = None
        self._target = 0
        self._shared = _WarmThread.get()
        with self._shared.lock:
            self._shared.lanes.add(self)

    def track(self, f: MappedFile, pos: int) -> None:
        """Loop thread: ``f`` is the active segment and the next write is at ``pos``."""
        self._file = f
        self.kick(pos)

    def kick(self, pos: int) -> None:
        now = time.monotonic()
        gap = now - self._last_kick
        self._last_kick = now
        if gap < 0.25:  # the writer came back within 250 ms: it writes fast, lead further
            self._ahead = min(self._max_ahead, self._ahead * 2)
        elif gap > 2.0:
            self._ahead = max(self.MIN_AHEAD, self._ahead // 2)
        f = self._file
        if f is not None:
            f.warm_trigger = f.size  # until the warmer has advanced
        self._target = pos + self._ahead
        self._shared.event.set()

    def stop(self) -> None:
        with self._shared.lock:
            self._shared.lanes.discard(self)
        self._file = None

    def work(self, rounds: int) -> bool:
        """Warm up to ``rounds`` chunks; True when more work remains."""
        f = self._file
        if f is None:
            return False
        for _ in range(rounds):
            if f is not self._file or f.warmed >= min(self._target, f.size):
                if f is self._file:
                    f.warm_trigger = max(0, f.warmed - self._ahead // 2)
                return False
            if not self._populate(f):
                return False
        return True

    def _populate(self, f: MappedFile) -> bool:
        shared = self._shared
        with f.io_lock:
            if f.closed or shared.disabled:
                return False
            start = f.warmed  # page-aligned: madvise needs an aligned address (else EINVAL)
            end = min(f.size, _page_up(max(start + mmap.PAGESIZE, self._target)))
            length = min(self._chunk, end - start)
            addr = mapping_address(f)
            rc = shared.madvise(addr + start, length, shared.advice)
            if rc != 0 and shared.advice == MADV_POPULATE_WRITE:
                shared.advice = MADV_WILLNEED  # older kernel: read-ahead at least allocates the pages
                rc = shared.madvise(addr + start, length, shared.advice)
            if rc != 0:
                _log.warning("warmer_disabled", errno=ctypes.get_errno())
                shared.disabled = True
                return False
            f.warmed = start + length
            return True


def libc_madvise() -> Any:
    """libc's madvise through ctypes (the call releases the GIL); None where it is not available."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


def mapping_address(f: MappedFile) -> int:
    """The address of ``f``'s mapping (the buffer export is released at once, so the mapping can still close)."""
    buf = ctypes.c_char.from_buffer(f.mm)
    addr = ctypes.addressof(buf)
    del buf
    return addr


def _page_up(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


_log = structlog.get_logger(component="store.warmer")
