"""A slave applying its master's metadata change records (RIP-81) from its own replicated commit log.

No polling: the store's dispatch listener wakes it when a record of a sync topic becomes visible (with the confirm
hold: once replicated), and ``drain`` applies every visible record of the four sync topics in log order, each to
its table with ``BrokerMetadata.apply_record`` (the same entry semantics as ``brokerd.sync.image.merge``).

Positions (per sync topic, the next queue offset to apply) are written to
``<config dir>/metadataSyncPositions.json`` after the tables themselves (so the file never claims more than the
tables hold: replaying records from an older position gives the same tables, since application is a
last-write-wins fold in log order). A slave without positions, one whose positions point below its log (the
records expired), or one that was a master (what it wrote alone may have been truncated) bootstraps from a
snapshot of its master's image first (``install``), then tails.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

import structlog

from brokerd.message import decode_records
from brokerd.store.results import GetMessageResult, GetMessageStatus
from brokerd.sync.records import SYNC_TOPICS, SyncRecord
from brokerd.sync.snapshot import Snapshot

POSITIONS_FILE = "metadataSyncPositions.json"
BATCH = 256


class FollowedStore(Protocol):
    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_msg_bytes: int = ...) -> GetMessageResult: ...  # fmt: skip

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def add_dispatch_listener(self, cb: Any) -> None: ...

    def remove_dispatch_listener(self, cb: Any) -> None: ...


class FollowedMetadata(Protocol):
    @property
    def config_dir(self) -> str: ...

    def apply_record(self, kind: str, op: str, key: str, value: Any, data_version: dict[str, int]) -> None: ...

    def adopt_sections(self, sections: dict[str, Any]) -> None: ...

    def persist_all(self, *, force: bool = False) -> int: ...


class MetadataFollower:
    def __init__(self, store: FollowedStore, meta: FollowedMetadata, log: Any = None) -> None:
        self.store = store
        self.meta = meta
        self.log = log if log is not None else structlog.get_logger("metadata_follower")
        self.positions: dict[str, int] | None = None
        self.active = False
        self.gap = False  # records this slave needs are gone from its log: bootstrap again
        self._scheduled = False
        self.applied = 0
        self.bad_records = 0
        self.bootstraps = 0
        self.last_applied_ms = 0
        self._path = Path(meta.config_dir) / POSITIONS_FILE
        self._saved: dict[str, int] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> bool:
        """Follow the local log from the saved positions. False when a snapshot must be installed first."""
        if self.positions is None:
            self.positions = self._load()
        self.active = True
        self.store.add_dispatch_listener(self._on_dispatched)
        if self.needs_bootstrap():
            return False
        self.drain()
        return True

    def stop(self) -> None:
        if self.active:
            self.drain()
        self.active = False
        self.store.remove_dispatch_listener(self._on_dispatched)

    def forget(self) -> None:
        """This broker wrote metadata as a master: its positions say nothing about a new master's log."""
        self.positions = None
        self._path.unlink(missing_ok=True)
        self._saved = None

    def needs_bootstrap(self) -> bool:
        if self.positions is None or self.gap:
            return True
        return any(self.positions.get(t, 0) < self.store.min_offset_in_queue(t, 0) for t in SYNC_TOPICS)

    def install(self, snap: Snapshot) -> None:
        """Take the master's image and the positions it covers, then apply what the local log holds after them."""
        self.meta.adopt_sections(snap.sections)
        self.positions = dict(snap.positions)
        self.gap = False
        self.bootstraps += 1
        self.log.info("metadata_snapshot_installed", positions=self.positions, created=snap.created_ms)
        self.save()
        if self.active:
            self.drain()

    # ------------------------------------------------------------------ applying

    def _on_dispatched(self, topic: str, queue_id: int, queue_offset: int, tags: int) -> None:
        if topic in SYNC_TOPICS and self.active and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain_soon)

    def _drain_soon(self) -> None:
        self._scheduled = False
        if self.active:
            self.drain()

    def drain(self) -> int:
        """Apply every visible record after the positions (nothing before a bootstrap). Returns how many."""
        if self.positions is None or self.gap:
            return 0
        n = 0
        for topic in sorted(SYNC_TOPICS):
            n += self._drain_topic(topic)
        if n:
            self.applied += n
            self.last_applied_ms = _now_ms()
        return n

    def _drain_topic(self, topic: str) -> int:
        assert self.positions is not None
        n = 0
        while True:
            offset = self.positions.get(topic, 0)
            res = self.store.get_message(topic, 0, offset, BATCH, 16 * 1024 * 1024)
            if not res.buffers:
                if res.status is GetMessageStatus.OFFSET_TOO_SMALL:  # the records expired under us
                    self.gap = True
                    self.log.warning("metadata_records_expired", topic=topic, position=offset,
                                     min_offset=res.next_begin_offset)
                return n
            for buf in res.buffers:
                for msg in decode_records(bytes(buf)):
                    self._apply(msg.body, msg.commit_log_offset)
                    n += 1
            self.positions[topic] = res.next_begin_offset

    def _apply(self, body: bytes, log_offset: int) -> None:
        try:
            rec = SyncRecord.decode(body, log_offset)
            self.meta.apply_record(rec.kind, rec.op, rec.key, rec.value, rec.data_version)
        except ValueError as exc:  # a record this broker cannot read: skip it, loudly
            self.bad_records += 1
            self.log.error("metadata_record_unreadable", log_offset=log_offset, error=str(exc))

    # ------------------------------------------------------------------ positions file

    def save(self) -> None:
        """Persist the tables, then the positions they cover (synchronous; called periodically and on stop)."""
        if self.positions is None or self.positions == self._saved:
            return
        positions = dict(self.positions)
        self.meta.persist_all()
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.write_text(json.dumps(positions))
        os.replace(tmp, self._path)
        self._saved = positions

    def _load(self) -> dict[str, int] | None:
        try:
            raw = json.loads(self._path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.log.warning("metadata_positions_unreadable", path=str(self._path), error=str(exc))
            return None
        if not isinstance(raw, dict) or not all(isinstance(raw.get(t), int) for t in SYNC_TOPICS):
            return None
        self._saved = {t: int(raw[t]) for t in SYNC_TOPICS}
        return dict(self._saved)

    def stats(self) -> dict[str, Any]:
        return {"applied": self.applied, "badRecords": self.bad_records, "bootstraps": self.bootstraps,
                "positions": dict(self.positions or {}), "active": self.active}  # fmt: skip


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
