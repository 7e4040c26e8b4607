"""Ahead-of-time creation of mapped files (RocketMQ's AllocateMappedFileService).

Creating a file (open + fallocate + mmap) and the first write into each of its pages cost 1.5-8 ms each on
ext4 (unwritten-extent conversion, journal); on the loop thread that is a stall of every connection of every
broker in the process. The store asks for files it will need soon (the next commit-log segment, a new
topic's consume-queue files, the first index file); one shared worker thread creates them under a staging
name in ``<store root>/.alloc/`` and prepares their first pages: pre-faulted for writing with
``MADV_POPULATE_WRITE`` for the files written through the mapping (consume queues, index: the ``random_access``
ones), only put in the page cache for commit-log segments (written with pwrite). When the loop thread then
needs the file, ``take`` renames it into place (one metadata syscall) instead of creating it.

A staged file is all zeros until taken, so nothing can tell a taken file from one created inline. Staged files
never have a store file name (they live in the staging directory), so recovery never sees them; whatever a
crash leaves there is removed by the next ``start``.

Concurrency contract: ``request``/``take``/``discard``/``close`` on the loop thread only; the worker thread
touches only the file it is creating and the ``Future`` it completes.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Final

import structlog

from brokerd.store.mapped_file import MappedFile

STAGING_DIR: Final = ".alloc"
MADV_POPULATE_WRITE: Final = 23  # Linux >= 5.14
_log = structlog.get_logger(component="store.allocate")


class _Worker:
    """The one allocation thread per process (shared by every broker of a container)."""

    _instance: _Worker | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-allocate")
        self.madvise = libc_madvise()

    @classmethod
    def get(cls) -> _Worker:
        with cls._guard:
            if cls._instance is None:
                cls._instance = _Worker()
            return cls._instance

    def populate(self, f: MappedFile, length: int, mapped: bool) -> None:
        """Make the first ``length`` bytes cheap to write: pre-faulted for writing through the mapping (``mapped``:
        consume-queue and index files; a no-op where the kernel lacks the advice), else only in the page cache
        (commit-log segments, written with pwrite: see ``mapped_file``)."""
        if length <= 0:
            return
        if not mapped:
            f.prefill(0, length)
            return
        if self.madvise is None:
            return
        with f.io_lock:
            if f.closed:
                return
            try:
                f.reserve_to(length)  # sparse: the pages written ahead need their blocks
            except OSError:
                return  # a full disk: the writer meets ENOSPC when it reserves, a clean error
            self.madvise(mapping_address(f), min(length, f.size), MADV_POPULATE_WRITE)


class Allocator:
    """One store's staged files, keyed by the final path they will be renamed to."""

    def __init__(self, root: Path, *, enabled: bool = True) -> None:
        self.staging = root / STAGING_DIR
        self.enabled = enabled
        self._pending: dict[Path, concurrent.futures.Future[MappedFile]] = {}
        self._worker: _Worker | None = None
        self._seq = 0

    @property
    def pending(self) -> int:
        """Files requested and not taken yet (each holds a descriptor and a mapping)."""
        return len(self._pending)

    def reset(self) -> None:
        """At start: remove files a previous run left staged."""
        shutil.rmtree(self.staging, ignore_errors=True)

    def request(self, path: Path, base: int, size: int, populate: int, *, random_access: bool = False) -> None:
        """Create ``path`` (``size`` bytes, logical ``base``) ahead of time; idempotent. ``random_access``: see
        ``MappedFile``."""
        if not self.enabled or path in self._pending:
            return
        if self._worker is None:
            self._worker = _Worker.get()
        self._seq += 1
        staged = self.staging / f"{self._seq:08d}-{path.name}"
        self._pending[path] = self._worker.pool.submit(self._create, self._worker, staged, base, size, populate,
                                                      random_access)

    @staticmethod
    def _create(worker: _Worker, staged: Path, base: int, size: int, populate: int, random_access: bool) -> MappedFile:
        staged.parent.mkdir(exist_ok=True)  # not parents: a store root removed meanwhile stays removed
        f = MappedFile.create(staged.parent, base, size, name=staged.name, random_access=random_access)
        try:
            worker.populate(f, populate, mapped=random_access)
        except BaseException:
            f.destroy()
            raise
        return f

    def take(self, path: Path) -> MappedFile | None:
        """The staged file for ``path``, renamed into place; None when none was requested or creating it failed
        (the caller then creates the file itself). Waits if the worker is still creating it."""
        fut = self._pending.pop(path, None)
        if fut is None:
            return None
        try:
            f = fut.result()
        except (OSError, ValueError) as exc:
            _log.warning("preallocation_failed", file=str(path), error=str(exc))
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():  # never replace a real file
                raise FileExistsError(f"{path} already exists")
            os.rename(f.path, path)
        except OSError as exc:
            _log.warning("preallocation_unusable", file=str(path), error=str(exc))
            f.destroy()
            return None
        f.path = path
        return f

    def discard(self, prefix: Path | None = None) -> None:
        """Drop staged files for paths under ``prefix`` (all when None); their files are deleted."""
        for path in [p for p in self._pending if prefix is None or p.is_relative_to(prefix)]:
            fut = self._pending.pop(path)
            if not fut.cancel():
                fut.add_done_callback(_destroy_result)

    def close(self) -> None:
        self.discard()


def _destroy_result(fut: concurrent.futures.Future[MappedFile]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().destroy()


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
