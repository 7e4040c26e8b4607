"""BrokerMetadata: one broker's hub + five managers, and the master -> slave snapshot/replay primitives.

Replication model (RIP-81 style; the transport is a later issue):
* master: `snapshot()` captures every table, every DataVersion and the position `(stream, seq)` the state
  reflects; every later local mutation reaches the hub's observers as a `MetadataChange` with seq + 1.
* slave: `apply_snapshot(bytes)` replaces its tables and adopts the master's DataVersions and position;
  `apply_change(change)` then applies records in seq order:
  - seq <= applied seq of the same stream -> ignored, returns False (idempotent re-delivery);
  - seq == applied + 1 -> applied, returns True;
  - a gap, a different stream (master restarted or another broker was promoted) or no snapshot yet ->
    `MetadataSyncGap`: the caller re-bootstraps from a fresh snapshot.
  Applied records do not go through `hub.emit` (they are not local mutations and consume no local seq);
  the hub's applied-observers are told instead. The DataVersion carried by each record is adopted verbatim,
  so the slave's versions equal the master's after the same prefix of records.
* Snapshots are taken on the master: a node that applies replicated records describes its position by
  `applied_position`, not by its own hub's `(stream, seq)`.
* The applied position is kept in memory only: after a slave restart it re-bootstraps from a snapshot.

Not thread-safe: event loop thread only (snapshot encoding is synchronous and consistent).
"""

from __future__ import annotations

import os
from typing import Any, Final

import msgpack
import structlog

from .hook import (
    KIND_CONSUMER_OFFSET,
    KIND_DELAY_OFFSET,
    KIND_MESSAGE_REQUEST_MODE,
    KIND_SUBSCRIPTION_GROUP,
    KIND_TOPIC,
    MetadataChange,
    MetadataHub,
)
from .manager import ConfigManager, ExportParts
from .offsets import ConsumerOffsetManager, DelayOffsetManager
from .persist import PersistJob
from .request_mode import MessageRequestModeManager
from .subscription import SubscriptionGroupManager
from .topic import TopicConfigManager

SNAPSHOT_FORMAT: Final = 1
_SECTIONS: Final = ("topics", "subscriptionGroups", "consumerOffsets", "delayOffsets", "messageRequestModes")


class MetadataSyncGap(Exception):
    """The slave cannot apply this change record in order; it must re-bootstrap from a snapshot."""


class BrokerMetadata:
    """Bundles the hub and the five managers of one broker: `topics`, `subscriptions` (alias
    `subscription_groups`), `offsets` (alias `consumer_offsets`), `delay_offsets` and `request_modes` (POP/PULL
    per topic and group)."""

    def __init__(self, config_dir: str, *, cluster_name: str, broker_name: str,
                 auto_create_topic_enable: bool = True, auto_create_subscription_group: bool = True,
                 default_topic_queue_nums: int = 8, hub: MetadataHub | None = None,
                 cluster_topic_enable: bool = True, broker_topic_enable: bool = True,
                 trace_topic_enable: bool = False, persist_on_change: bool = True,
                 consumer_offset_version_step: int = 500, delay_offset_version_step: int = 200) -> None:
        self.config_dir = config_dir
        self.hub = hub if hub is not None else MetadataHub()
        self.topics = TopicConfigManager(
            config_dir, self.hub, cluster_name=cluster_name, broker_name=broker_name,
            auto_create_topic_enable=auto_create_topic_enable, default_topic_queue_nums=default_topic_queue_nums,
            cluster_topic_enable=cluster_topic_enable, broker_topic_enable=broker_topic_enable,
            trace_topic_enable=trace_topic_enable, persist_on_change=persist_on_change)
        self.subscriptions = SubscriptionGroupManager(
            config_dir, self.hub, auto_create_subscription_group, persist_on_change=persist_on_change)
        self.offsets = ConsumerOffsetManager(config_dir, self.hub, version_step=consumer_offset_version_step)
        self.delay_offsets = DelayOffsetManager(config_dir, self.hub, version_step=delay_offset_version_step)
        self.request_modes = MessageRequestModeManager(config_dir, self.hub, persist_on_change=persist_on_change)
        self._applied_stream: str | None = None
        self._applied_seq = 0
        self._log = structlog.get_logger().bind(component="broker_metadata", broker=broker_name)

    @property
    def subscription_groups(self) -> SubscriptionGroupManager:
        """Alias of `subscriptions`."""
        return self.subscriptions

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager:
        """Alias of `offsets`."""
        return self.offsets

    def _managers(self) -> dict[str, ConfigManager[Any, Any]]:
        return {"topics": self.topics, "subscriptionGroups": self.subscriptions,
                "consumerOffsets": self.offsets, "delayOffsets": self.delay_offsets,
                "messageRequestModes": self.request_modes}

    # ----- files -----

    def load(self) -> None:
        """Load every file (each falls back to its .bak; MetadataLoadError names a file that is corrupt)."""
        os.makedirs(self.config_dir, exist_ok=True)
        self.topics.load()
        self.subscriptions.load()
        self.offsets.load()
        self.delay_offsets.load()
        self.request_modes.load()

    def persist_all(self, *, force: bool = False) -> int:
        """Write every dirty file (all with `force`); returns how many were written. Tries every file, then
        re-raises the first OSError."""
        written, first_error = 0, None
        for mgr in self._managers().values():
            try:
                written += 1 if mgr.persist(force=force) else 0
            except OSError as e:
                self._log.error("metadata_persist_failed", path=mgr.path, error=str(e))
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return written

    def prepare_persist_all(self, *, force: bool = False) -> list[PersistJob]:
        """Encode the dirty files now; run the jobs off the loop (`asyncio.to_thread(job.run)`)."""
        jobs = [mgr.prepare_persist(force=force) for mgr in self._managers().values()]
        return [j for j in jobs if j is not None]

    # ----- replication -----

    @property
    def applied_position(self) -> tuple[str | None, int]:
        """(stream, seq) of the last snapshot/change applied from a master; (None, 0) before any."""
        return self._applied_stream, self._applied_seq

    def snapshot(self) -> bytes:
        """msgpack snapshot of all tables and DataVersions, at position (hub.stream_id, hub.seq)."""
        doc: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "stream": self.hub.stream_id, "seq": self.hub.seq}
        for section, mgr in self._managers().items():
            doc[section] = mgr.export_state()
        out: bytes = msgpack.packb(doc, use_bin_type=True)
        return out

    def apply_snapshot(self, data: bytes) -> None:
        """Replace every table with the snapshot's (all or nothing), adopt its DataVersions and position,
        then persist all files. Malformed input raises ValueError and changes nothing; an OSError from the
        persist leaves the state applied and the files dirty for the next persist."""
        stream, seq, doc = _decode_snapshot(data)
        managers = self._managers()
        backup = {section: mgr.export_state() for section, mgr in managers.items()}
        try:
            for section, mgr in managers.items():
                mgr.import_state(doc[section])
        except (ValueError, TypeError, KeyError) as e:
            for section, mgr in managers.items():
                mgr.import_state(backup[section])
            raise ValueError(f"metadata snapshot rejected: {e}") from e
        self._applied_stream, self._applied_seq = stream, seq
        self._log.info("metadata_snapshot_applied", stream=stream, seq=seq,
                       topics=len(self.topics.all()), groups=len(self.subscriptions.all()))
        self.persist_all(force=True)

    def apply_change(self, change: MetadataChange) -> bool:
        """Apply one replicated change record (see module doc). True if applied, False if a duplicate.
        Raises MetadataSyncGap when the record cannot be applied in order, ValueError when malformed."""
        change.validate()
        if self._applied_stream is None:
            raise MetadataSyncGap("no snapshot applied yet; bootstrap from a master snapshot first")
        if change.stream != self._applied_stream:
            raise MetadataSyncGap(
                f"change stream {change.stream!r} differs from the applied stream {self._applied_stream!r}")
        if change.seq <= self._applied_seq:
            return False
        if change.seq != self._applied_seq + 1:
            raise MetadataSyncGap(f"gap in change records: applied seq {self._applied_seq}, got {change.seq}")
        self._manager_of(change.kind).apply_replicated(change)
        self._applied_seq = change.seq
        self.hub.notify_applied(change)
        return True


    # ----- RIP-81: change records from the commit log -----

    def apply_record(self, kind: str, op: str, key: str, value: Any, data_version: dict[str, int]) -> None:
        """Apply a master's change record read from the (replicated) commit log, in log order: the same entry
        semantics as ``brokerd.sync.image.merge`` (replace; offsets merge queue maps; delete drops), the record's
        DataVersion adopted. Emits nothing (the applied-observers are told). Malformed: ValueError, no change."""
        change = MetadataChange(kind, op, key, value, data_version, 1, "log")
        change.validate()
        self._manager_of(kind).apply_replicated(change)
        self.hub.notify_applied(change)

    def _manager_of(self, kind: str) -> ConfigManager[Any, Any]:
        managers: dict[str, ConfigManager[Any, Any]] = {
            KIND_TOPIC: self.topics, KIND_SUBSCRIPTION_GROUP: self.subscriptions,
            KIND_CONSUMER_OFFSET: self.offsets, KIND_DELAY_OFFSET: self.delay_offsets,
            KIND_MESSAGE_REQUEST_MODE: self.request_modes}
        return managers[kind]

    def export_sections(self) -> dict[str, Any]:
        """Every table's document (``ConfigManager.export_state``), keyed as snapshots name them."""
        return {section: mgr.export_state() for section, mgr in self._managers().items()}

    def export_parts(self) -> dict[str, ExportParts]:
        """``export_sections`` in parts (``ConfigManager.export_parts``)."""
        return {section: mgr.export_parts() for section, mgr in self._managers().items()}

    def adopt_sections(self, sections: dict[str, Any]) -> None:
        """Take a master's tables wholesale (a snapshot): all or nothing; ValueError when malformed."""
        managers = self._managers()
        backup = {section: mgr.export_state() for section, mgr in managers.items()}
        try:
            for section, mgr in managers.items():
                mgr.adopt_state(sections[section])
        except (ValueError, TypeError, KeyError) as e:
            for section, mgr in managers.items():
                mgr.import_state(backup[section])
            raise ValueError(f"metadata snapshot rejected: {e}") from e


def _decode_snapshot(data: bytes) -> tuple[str, int, dict[str, Any]]:
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated exception types
        raise ValueError(f"metadata snapshot is not valid msgpack: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
        raise ValueError("metadata snapshot: unknown layout or format version")
    stream, seq = doc.get("stream"), doc.get("seq")
    if not isinstance(stream, str) or not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError("metadata snapshot: bad stream/seq")
    for section in _SECTIONS:
        if not isinstance(doc.get(section), dict):
            raise ValueError(f"metadata snapshot: missing section {section}")
    return stream, seq, doc
