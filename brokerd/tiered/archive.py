"""Read-only access to a broker set's tier, for tools that read a store's commit log below its local segments (the
metadata export and the compaction job: ``brokerd.sync.export``). The same backends as the broker, the newest
manifest version, ranged reads of the chunks it names; nothing is written and no broker is needed.

Where a store's tier is: the tiered service writes ``<storePathRootDir>/tieredStore.json`` (``LOCATOR``) when it
starts: the backend's location (POSIX: the broker set's directory; S3: endpoint, bucket, region, key prefix),
never credentials (an S3 reader takes them from its arguments or, as boto3 does, from the environment:
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``). ``store_tier(root)`` opens the tier of a store directory.

Reads fetch a window of the chunk from the record on (one ranged GET / pread for the records that follow close
by; a chunk is 16 MiB, a change record a few hundred bytes); the caller checks what it reads (the export checks
each record's topic, offsets, size and body CRC). A chunk the tier's retention removed meanwhile reads as absent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from brokerd.tiered.backend import TierBackend, backend_at
from brokerd.tiered.manifest import MANIFEST_PREFIX, Manifest

LOCATOR: Final = "tieredStore.json"
WINDOW: Final = 256 * 1024


def latest_manifest(backend: TierBackend, on_error: Callable[[str, Exception], None] | None = None) -> Manifest:
    """The newest readable manifest version (blocking); a torn or foreign object: the previous version counts."""
    for name in reversed(backend.list(MANIFEST_PREFIX)):
        try:
            return Manifest.decode(backend.get(name))
        except (OSError, ValueError) as exc:
            if on_error is not None:
                on_error(name, exc)
    return Manifest()


def write_locator(store_root: str | os.PathLike[str], backend: TierBackend) -> bool:
    """Record where ``backend``'s objects are in the store directory (atomically; only when it changed)."""
    path = Path(store_root) / LOCATOR
    doc = {"format": 1, **backend.location()}
    if read_locator(store_root) == doc:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return True


def read_locator(store_root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The tier location a store directory records (None: none, or unreadable)."""
    try:
        doc = json.loads((Path(store_root) / LOCATOR).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == 1 else None


class TierArchive:
    """A tier read-only: the store's ``TierView`` (``brokerd.store.tier``) for tools; reads block and never raise
    ``TierMiss``. The manifest is read at the first use (``refresh`` reads it again)."""

    def __init__(self, backend: TierBackend, *, window: int = WINDOW) -> None:
        self.backend = backend
        self.window = window
        self._manifest: Manifest | None = None
        self._buf_start = -1
        self._buf = b""
        self.fetches = 0
        self.fetched_bytes = 0

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:
            self._manifest = latest_manifest(self.backend)
        return self._manifest

    def refresh(self) -> Manifest:
        self._manifest, self._buf_start, self._buf = None, -1, b""
        return self.manifest

    @property
    def min_offset(self) -> int:
        return self.manifest.min_offset

    @property
    def end(self) -> int:
        return self.manifest.end

    def read(self, phys: int, size: int) -> bytes | None:
        """``size`` bytes at ``phys`` from the chunk holding them (None: no chunk holds them all, or it is gone)."""
        if not (self._buf_start <= phys and phys + size <= self._buf_start + len(self._buf)):
            c = self.manifest.chunk_at(phys)
            if c is None or size <= 0 or phys + size > c.end:
                return None
            lo = phys - c.start
            hi = min(c.end - c.start, lo + max(size, self.window))
            try:
                data = self.backend.get(c.name, lo, hi)
            except FileNotFoundError:  # the tier's retention removed it after the manifest was read
                return None
            if len(data) != hi - lo:
                return None
            self._buf_start, self._buf = phys, data
            self.fetches += 1
            self.fetched_bytes += len(data)
        pos = phys - self._buf_start
        return self._buf[pos : pos + size]


def store_tier(store_root: str | os.PathLike[str], *, access_key: str = "", secret_key: str = "") -> TierArchive | None:
    """The tier of a store directory (its ``LOCATOR``), read-only; None when the store records none."""
    loc = read_locator(store_root)
    if loc is None:
        return None
    return TierArchive(backend_at(loc, access_key=access_key, secret_key=secret_key))
