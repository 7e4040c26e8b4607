"""Metadata snapshots (RIP-81): the whole image (every table with its DataVersion, as ``ConfigManager.export_state``
documents) plus, per sync topic, the next queue offset of the change records it does not cover yet.

A snapshot is what a new or far-behind slave loads before tailing the records from those positions in its own
(replicated) log; the master writes one periodically into ``<config dir>/metadataSnapshots/`` (the last
``keep``) and builds one on demand for a slave (GET_METADATA_SNAPSHOT). The Spark compaction job reads and
writes the same format. msgpack; pure code except ``SnapshotStore``'s files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import msgpack

from brokerd.fsutil import fsync_path
from brokerd.metadata.manager import ExportParts
from brokerd.sync.image import SECTIONS
from brokerd.sync.records import SYNC_TOPICS

SNAPSHOT_FORMAT: Final = "rip81-snapshot/1"
SNAPSHOT_DIR: Final = "metadataSnapshots"
ENTRIES_PER_STEP: Final = 64  # ~0.1-0.2 ms of encoding between the encoder's yields


@dataclass(frozen=True)
class Snapshot:
    sections: dict[str, Any]  # "topics" / "subscriptionGroups" / "consumerOffsets" / "delayOffsets" documents
    positions: dict[str, int]  # sync topic -> next queue offset not covered
    created_ms: int = 0
    log_offset: int = -1  # commit-log offset up to which the records are covered (informational)

    def encode(self) -> bytes:
        out: bytes = msgpack.packb({"format": SNAPSHOT_FORMAT, "created": self.created_ms, "positions": self.positions,
                                    "logOffset": self.log_offset, "sections": self.sections}, use_bin_type=True)
        return out

    def head(self) -> Snapshot:
        """What the snapshot covers, without its sections (what ``SnapshotKeeper`` keeps of the latest one)."""
        return replace(self, sections={})

    @classmethod
    def decode(cls, data: bytes) -> Snapshot:
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several unrelated exception types
            raise ValueError(f"metadata snapshot is not valid msgpack: {e}") from e
        if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
            raise ValueError("metadata snapshot: unknown format")
        positions, sections = doc.get("positions"), doc.get("sections")
        if not isinstance(positions, dict) or set(positions) != set(SYNC_TOPICS):
            raise ValueError("metadata snapshot: positions must name every sync topic")
        if not all(isinstance(v, int) and v >= 0 for v in positions.values()):
            raise ValueError("metadata snapshot: bad position")
        if not isinstance(sections, dict) or not all(isinstance(sections.get(s), dict) for s in SECTIONS):
            raise ValueError("metadata snapshot: missing sections")
        return cls(sections, positions, int(doc.get("created") or 0), int(doc.get("logOffset", -1)))


def encode_steps(parts: Mapping[str, ExportParts], positions: dict[str, int], created_ms: int,
                 log_offset: int) -> Generator[None, None, bytes]:
    """``Snapshot(sections, ...).encode()`` of the sections ``parts`` lay out, the same bytes, written
    ``ENTRIES_PER_STEP`` table entries a step (``brokerd.loopwork.run_in_turns``: a large image's snapshot holds
    the loop ~2 ms at a time). Like the whole-image snapshot, the image may hold changes newer than ``positions``
    (taken first): replaying the records after them gives the same state."""
    p = msgpack.Packer(use_bin_type=True, autoreset=False)
    p.pack_map_header(5)
    for key, value in (("format", SNAPSHOT_FORMAT), ("created", created_ms), ("positions", positions),
                       ("logOffset", log_offset)):  # fmt: skip
        p.pack(key)
        p.pack(value)
    p.pack("sections")
    p.pack_map_header(len(parts))
    for section, part in parts.items():
        p.pack(section)
        p.pack_map_header(2)
        if part.version_first:
            p.pack("dataVersion")
            p.pack(part.data_version)
        p.pack(part.table_field)
        p.pack_map_header(part.count)
        for n, (key, value) in enumerate(part.entries, 1):
            p.pack(key)
            p.pack(value)
            if n % ENTRIES_PER_STEP == 0:
                yield
        if not part.version_first:
            p.pack("dataVersion")
            p.pack(part.data_version)
    out: bytes = p.bytes()
    return out


class SnapshotStore:
    """The snapshot files of one broker: ``snapshot-<created ms>.msgpack``, newest kept ``keep``."""

    def __init__(self, config_dir: str, keep: int = 2) -> None:
        self.dir = Path(config_dir) / SNAPSHOT_DIR
        self.keep = keep

    def write(self, snap: Snapshot) -> Path:
        return self.write_encoded(snap.encode(), snap.created_ms)

    def write_encoded(self, data: bytes, created_ms: int) -> Path:
        """A snapshot's encoding as the file of time ``created_ms`` (fsync'ed), the oldest beyond ``keep`` gone."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"snapshot-{created_ms or time.time_ns() // 1_000_000:015d}.msgpack"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(self.dir)
        for old in self.files()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def files(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if p.name.startswith("snapshot-") and p.suffix == ".msgpack")

    def latest(self) -> Snapshot | None:
        for path in reversed(self.files()):
            try:
                return Snapshot.decode(path.read_bytes())
            except (OSError, ValueError):
                continue
        return None
