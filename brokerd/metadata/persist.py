"""Crash-safe JSON config files with a `.bak` of the previous version (RocketMQ `ConfigManager` style).

Write protocol (`atomic_write`), chosen so that at every instant `path` holds a complete document:
1. write `path.tmp`, flush, fsync;
2. if `path` exists: hard-link it to `path.bak.tmp` (copy if links are unsupported) and rename that over
   `path.bak`, so `.bak` is the previous complete version;
3. rename `path.tmp` over `path`;
4. fsync the directory.
A crash before step 3 leaves the old `path` intact; a leftover `.tmp` is ignored and overwritten later.

Load protocol (`load_document`): parse and decode `path`; if it is missing, empty, unparsable or has the
wrong shape, use `path.bak`. When the main file was corrupt and the backup was used, the corrupt file is
moved aside to `path.corrupt` (kept for inspection; it also stops the next write from rotating the corrupt
file over the good `.bak`). If a file exists but neither it nor the backup decodes, `MetadataLoadError`
names the file: we never silently start empty over a corrupt file.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import structlog

from brokerd import durability
from brokerd.fsutil import fsync_path

T = TypeVar("T")

log = structlog.get_logger().bind(component="metadata_persist")

# fastjson writes Map<Integer, Long> keys unquoted ({0:12}); accept that when reading real RocketMQ files.
_BARE_INT_KEY = re.compile(rb"([{,]\s*)(-?\d+)(\s*:)")


class MetadataLoadError(Exception):
    """A metadata file exists but neither it nor its .bak could be read; the message names the file."""


def encode_json(doc: Any) -> bytes:
    out: bytes = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    return out


def parse_json(data: bytes, *, bare_int_keys: bool = False) -> Any:
    if not data.strip():
        raise ValueError("file is empty")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        if not bare_int_keys:
            raise ValueError(f"invalid JSON: {first}") from first
        try:
            return orjson.loads(_BARE_INT_KEY.sub(rb'\1"\2"\3', data))
        except orjson.JSONDecodeError:
            raise ValueError(f"invalid JSON: {first}") from first


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
        if durability.ENABLED:
            durability.content_synced(path)


def _rotate_backup(path: str) -> None:
    bak, bak_tmp = path + ".bak", path + ".bak.tmp"
    try:
        os.unlink(bak_tmp)
    except FileNotFoundError:
        pass
    try:
        os.link(path, bak_tmp)
    except OSError:
        shutil.copyfile(path, bak_tmp)
        with open(bak_tmp, "rb") as f:
            os.fsync(f.fileno())
            if durability.ENABLED:
                durability.content_synced(bak_tmp)
    os.replace(bak_tmp, bak)


def atomic_write(path: str, data: bytes, *, keep_backup: bool = True) -> None:
    """Durably replace `path` with `data` (see module doc). Raises OSError on failure; `path` stays valid."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    _write_synced(tmp, data)
    if keep_backup and os.path.exists(path):
        _rotate_backup(path)
    os.replace(tmp, path)
    fsync_path(directory)


def _read_and_decode(path: str, decode: Callable[[Any], T], bare_int_keys: bool) -> T:
    with open(path, "rb") as f:
        data = f.read()
    doc = parse_json(data, bare_int_keys=bare_int_keys)
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    return decode(doc)


def load_document(path: str, decode: Callable[[Any], T], *, bare_int_keys: bool = False) -> T | None:
    """Load `path` (falling back to `path.bak`); None when neither exists. See module doc."""
    bak = path + ".bak"
    main_exists, bak_exists = os.path.exists(path), os.path.exists(bak)
    main_error: Exception | None = None
    if main_exists:
        try:
            return _read_and_decode(path, decode, bare_int_keys)
        except (OSError, ValueError, TypeError, KeyError) as e:
            main_error = e
            log.warning("metadata_file_corrupt", path=path, error=str(e))
    if bak_exists:
        try:
            result = _read_and_decode(bak, decode, bare_int_keys)
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise MetadataLoadError(
                f"cannot load metadata file {path}: {main_error or 'missing'}; backup {bak} is also bad: {e}"
            ) from e
        if main_exists:
            os.replace(path, path + ".corrupt")
            fsync_path(os.path.dirname(os.path.abspath(path)))
        log.warning("metadata_loaded_from_backup", path=bak, main_error=str(main_error or "missing"))
        return result
    if main_exists:
        raise MetadataLoadError(f"cannot load metadata file {path}: {main_error} (and no backup {bak})")
    return None


@dataclass(frozen=True)
class PersistJob:
    """An encoded document ready to be written, so the blocking write can run off the event loop:
    `job = mgr.prepare_persist(); await asyncio.to_thread(job.run)`.

    Jobs of one file are serialised by a lock and carry a generation: a job older than what is already on
    disk is skipped, so an overlapping synchronous persist and background job never write a stale version
    last. On failure the manager is marked dirty again so the next periodic persist retries."""

    path: str
    data: bytes
    generation: int
    _owner: ConfigFile

    def run(self) -> None:
        self._owner.write_job(self)


class ConfigFile:
    """Shared persistence plumbing for one manager: file path, dirty flag, encode -> atomic write."""

    def __init__(self, path: str, encode: Callable[[], Any], *, bare_int_keys: bool = False) -> None:
        self.path = path
        self._encode = encode
        self._bare_int_keys = bare_int_keys
        self.dirty = False
        self._generation = 0
        self._written_generation = 0
        self._write_lock = threading.Lock()

    def load(self, decode: Callable[[Any], T]) -> T | None:
        return load_document(self.path, decode, bare_int_keys=self._bare_int_keys)

    def mark_dirty(self) -> None:
        self.dirty = True

    def prepare(self, *, force: bool = False) -> PersistJob | None:
        """Encode now (on the loop thread) and clear the dirty flag; None when clean and not forced."""
        if not (self.dirty or force):
            return None
        data = encode_json(self._encode())
        self.dirty = False
        self._generation += 1
        return PersistJob(self.path, data, self._generation, self)

    def write_job(self, job: PersistJob) -> None:
        with self._write_lock:
            if job.generation <= self._written_generation:
                return
            try:
                atomic_write(job.path, job.data)
            except BaseException:
                self.dirty = True
                raise
            self._written_generation = job.generation

    def persist(self, *, force: bool = False) -> bool:
        """Write synchronously if dirty (or forced). Returns True if a file was written; raises OSError."""
        job = self.prepare(force=force)
        if job is None:
            return False
        job.run()
        return True

    def persist_logged(self) -> None:
        """Persist after a mutation; a failure is logged and left dirty for the periodic persist to retry."""
        try:
            self.persist()
        except OSError as e:
            log.error("metadata_persist_failed", path=self.path, error=str(e))
