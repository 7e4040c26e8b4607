"""Fixed-size memory-mapped files (commit-log segments, consume-queue files, index files).

Commit-log segments are written with ``pwrite`` (``write_at``) and read through the mapping; consume-queue and
index files are written through the mapping. Writing a segment through a shared mapping cost far more in the
kernel than the copy (measured on our 2-vCPU VMs, 16 segments written in turn with a flush thread, as 16
brokers do: 0.7-1.1 GB/s through the mapping vs 2.7 GB/s with pwrite): every first touch of a page is a fault
that zero-fills up to ``read_ahead_kb`` of page cache ahead of the writer (8 MiB here), and every flush
write-protects each written page again (``folio_mkclean``), one TLB-shootdown IPI to the loop thread's CPU per
page. Pages that ``pwrite`` filled are never mapped writable, so a flush has nothing to write-protect.

Concurrency contract: writes and reads happen on the event loop thread only. A flush (``prepare_sync``, also
inside ``sync_all``, which may run in a worker thread) checks ``closed`` under each file's own ``io_lock`` and
duplicates the descriptor, then syncs the duplicate, so closing or deleting the file meanwhile is harmless.
``prefill`` (the allocator and the Warmer threads) holds the lock too, so the descriptor cannot be closed under
it.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from brokerd import durability
from brokerd.native import native
from brokerd.store.syncer import sync_close

_ZERO_CHUNK: Final = 1 << 20
RESERVE_CHUNK: Final = 64 << 10
"""Blocks a sparse file's writer reserves at a time (3,276 consume-queue entries)."""


def file_name(offset: int) -> str:
    return f"{offset:020d}"


def parse_file_name(name: str) -> int | None:
    if len(name) == 20 and name.isdigit():
        return int(name)
    return None


@dataclass(slots=True)
class SyncJob:
    """A flush's duplicated descriptors (directories, files) and, with the power-loss journal on, what each sync
    makes durable (recorded by ``synced`` once the syncs succeeded)."""

    dir_fds: list[int]
    file_fds: list[int]
    notes: list[durability.Note] | None

    def synced(self) -> None:
        for note in self.notes or ():
            durability.record(note)

    def run(self) -> None:
        """Sync (and close) the descriptors here and now, with the GIL released once for all of them (``sync_close``
        in brokerd/csrc/sync.c: syncing file by file from Python costs one forced GIL switch away from the event
        loop thread per file). Raises the first failure as OSError after trying all."""
        err = _sync_close(self.dir_fds, self.file_fds)
        if err:
            raise OSError(err, f"sync failed: {os.strerror(err)}")
        self.synced()


def prepare_sync(dirs: Iterable[Path], files: Iterable[MappedFile], *, missing_dirs_ok: bool = False) -> SyncJob:
    """Duplicate the descriptors of ``dirs`` and of the open ``files`` (each under its lock, so closing a file
    meanwhile is harmless) for a flush on another thread (``syncer.Syncer``) or ``sync_all``."""
    job = SyncJob([], [], [] if durability.ENABLED else None)
    try:
        for d in dirs:
            try:
                job.dir_fds.append(os.open(d, os.O_RDONLY | os.O_DIRECTORY))
            except FileNotFoundError:
                if not missing_dirs_ok:
                    raise
                continue
            if job.notes is not None:
                job.notes.append(durability.before_fd_sync(job.dir_fds[-1], d))
        for f in files:
            with f.io_lock:
                if not f.closed:
                    job.file_fds.append(os.dup(f.fd))
                    if job.notes is not None:
                        job.notes.append(durability.before_mapped_sync(f.fd, f.path, f.wrote, f.size))
    except BaseException:
        for fd in job.dir_fds + job.file_fds:
            os.close(fd)
        raise
    return job


def sync_all(dirs: Iterable[Path], files: Iterable[MappedFile], *, missing_dirs_ok: bool = False) -> None:
    """Worker thread: make the directories' entries and the files' written data durable (one flush, see
    ``SyncJob.run``)."""
    prepare_sync(dirs, files, missing_dirs_ok=missing_dirs_ok).run()


_sync_close: Callable[[list[int], list[int]], int] = native.sync_close if native is not None else sync_close


def reserve(fd: int, size: int, *, sparse: bool) -> None:
    """Size a new file: commit-log segments reserve all their blocks (``preallocate``); consume-queue and index
    files stay sparse, as RocketMQ's do: a broker with thousands of topics would otherwise reserve 6 MB per queue
    up front. Their writers reserve blocks ahead of what they write (``MappedFile.reserve_to``)."""
    if sparse:
        os.ftruncate(fd, size)
    else:
        preallocate(fd, size)


def preallocate(fd: int, size: int, start: int = 0) -> None:
    """Reserve disk blocks for ``[start, size)`` so writes through the mapping never hit ENOSPC (which would be
    SIGBUS: the process dies); a full disk raises OSError here instead."""
    try:
        os.posix_fallocate(fd, start, size - start)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            os.ftruncate(fd, size)
        else:
            raise


class MappedFile:
    """One file of ``size`` bytes starting at logical ``base``, mapped read/write."""

    __slots__ = ("path", "base", "size", "fd", "mm", "wrote", "closed", "last_store_ts", "io_lock", "warm_trigger",
                 "warmed", "reserved")  # fmt: skip

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
            # read-ahead: they are written with pwrite, so only reads fault, and consumers read sequentially.
            self._advise(mmap.MADV_RANDOM)
        self.wrote = 0
        self.closed = False
        self.last_store_ts = 0
        self.io_lock = threading.Lock()
        self.warm_trigger = size  # appends past this kick the Warmer (set when it tracks the file)
        self.warmed = 0
        self.reserved = 0 if random_access else size  # [0, reserved) has disk blocks (random-access files: sparse)

    @classmethod
    def create(cls, directory: Path, base: int, size: int, *, name: str | None = None,
               random_access: bool = False) -> MappedFile:
        path = directory / (name or file_name(base))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < size:
                reserve(fd, size, sparse=random_access)
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
                reserve(fd, size, sparse=random_access)
            elif actual > size:
                os.ftruncate(fd, size)
            return cls(path, base, size, fd, random_access=random_access)
        except BaseException:
            os.close(fd)
            raise

    @property
    def end(self) -> int:
        return self.base + self.size

    def read_at(self, pos: int, n: int) -> bytes:
        """Read through the descriptor, for scans that may reach unwritten parts of a sparse file: a hole reads as
        zeros without faulting a page in (on tmpfs a read fault on a hole allocates a page: SIGBUS when full)."""
        return os.pread(self.fd, n, pos)

    def reserve_to(self, end: int) -> None:
        """Give ``[0, end)`` disk blocks before it is written through the mapping (a sparse file: a page without
        a block on a full disk is SIGBUS, the death of every broker in the process), ``RESERVE_CHUNK`` ahead.
        Raises OSError (ENOSPC) instead; the store's writers treat it as any I/O error. Writers check
        ``end > self.reserved`` first: a call is due once per chunk."""
        new = min(self.size, -(-end // RESERVE_CHUNK) * RESERVE_CHUNK)
        if new > self.reserved:
            preallocate(self.fd, new, self.reserved)
            self.reserved = new

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``pos`` through the file descriptor (see the module doc). Raises OSError."""
        mv = memoryview(data)
        while mv:
            n = os.pwrite(self.fd, mv, pos)
            if n <= 0:
                raise OSError(errno.EIO, f"short write to {self.path}")
            mv = mv[n:]
            pos += n

    def prefill(self, start: int, length: int) -> bool:
        """Have the kernel put ``[start, start + length)`` in the page cache (zero-filled pages of a new file), so
        the writes that follow only copy. Never maps pages; releases the GIL. False when the file is closed."""
        with self.io_lock:
            if self.closed:
                return False
            os.posix_fadvise(self.fd, start, min(length, self.size - start), os.POSIX_FADV_WILLNEED)
            return True

    def zero_from(self, pos: int) -> None:
        """Zero bytes [pos, size) cheaply: shrink the file, then re-extend it (the filesystem zeroes)."""
        with self.io_lock:
            self.mm.close()
            os.ftruncate(self.fd, pos)
            preallocate(self.fd, self.size)
            self.mm = mmap.mmap(self.fd, self.size)
            os.fdatasync(self.fd)
            if durability.ENABLED:
                durability.record(durability.before_fd_sync(self.fd, self.path, length=pos, reset=True))
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
    """The one daemon thread (per process) that fills pages for every commit log's Warmer.

    One thread for all brokers of a container: a thread per broker would make 16 brokers fight the loop thread
    for the GIL (measured: 23k vs 34k msg/s at 16 brokers)."""

    _instance: _WarmThread | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.lanes: set[Warmer] = set()
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.disabled = not hasattr(os, "posix_fadvise")
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
    """Fills the page cache of one commit log's active segment ahead of its write position (on the shared thread,
    ``warmMappedFileEnable``).

    Allocating and zero-filling the pages of a new file is kernel work a write would otherwise do on the loop
    thread; ``posix_fadvise(WILLNEED)`` releases the GIL, so it is done on another core. Filling never changes
    file contents, so it may run while the loop thread writes. The loop thread only compares its write position
    with ``file.warm_trigger``.
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
        start = f.warmed  # page-aligned: the kernel fills whole pages
        length = min(self._chunk, min(f.size, _page_up(max(start + mmap.PAGESIZE, self._target))) - start)
        try:
            if not f.prefill(start, length):
                return False
        except OSError as exc:
            _log.warning("warmer_disabled", error=str(exc))
            self._shared.disabled = True
            return False
        f.warmed = start + length
        return True


def _page_up(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


_log = structlog.get_logger(component="store.warmer")
