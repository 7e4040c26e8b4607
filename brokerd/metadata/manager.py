"""The generic metadata manager: one table, its DataVersion, its JSON file, and the single mutation choke point.

`ConfigManager[K, V]` owns what every broker metadata table shares:
* the in-memory table (`_table`, key K -> value V) and a read-only live view of it (`_view`);
* the DataVersion, bumped every `version_step` local puts and on every local delete (RocketMQ's
  consumerOffsetUpdateVersionStep / delayOffsetUpdateVersionStep; 1 = every change, as for topics/groups);
* the file (`persist.ConfigFile`: atomic write + `.bak` rotation on persist, `.bak` fallback on load);
* the RocketMQ JSON document `{"dataVersion": ..., <table_field>: {...}}` (key order per `version_first`),
  which is also the snapshot section (`export_state` / `import_state`);
* `apply_replicated`: a master's change record applied on a slave.

Every change of a single table entry, local or replicated, goes through `_commit` (see its docstring).
Whole-table replacement (`load`, `import_state`, `adopt_state`) swaps the table wholesale and emits nothing.

Subclasses set `FORMAT` (a `TableFormat`) and implement the codec hooks (`_encode_entry`, `_decode_entry`,
`_record_value`, `_key_from_record`, `_value_from_record`); the other hooks have defaults.
`NamedConfigManager` adds the shared logic of the two tables of named frozen configs (topics, groups).

Not thread-safe: call from the event loop thread only.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from structlog.typing import FilteringBoundLogger

from .hook import OP_DELETE, OP_PUT, ChangeValue, MetadataChange, MetadataHub
from .jsonfields import get_object
from .persist import ConfigFile, PersistJob
from .version import DataVersion

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class TableFormat:
    """How one table is stored (file and JSON document) and named in its change records."""

    kind: str  # MetadataChange.kind of this table's records
    file_name: str  # file name inside the config dir, e.g. "topics.json"
    table_field: str  # the table's key in the JSON document, e.g. "topicConfigTable"
    context: str  # names the document in error messages, e.g. "topics"
    version_first: bool = True  # "dataVersion" before the table in the document (RocketMQ's key order)
    bare_int_keys: bool = False  # accept fastjson's unquoted int map keys when reading the file
    version_step_key: str = "versionStep"  # config key of `version_step`, named by its validation error


@dataclass(frozen=True, slots=True)
class ExportParts:
    """A table's document (``ConfigManager.export_state``) in parts, for an encoder that gives the loop turns
    between entries: the entries are read from a copy of the table's entry list (a later change may still show in
    an entry's value: the entry is encoded when reached)."""

    table_field: str
    data_version: dict[str, int]
    version_first: bool  # "dataVersion" before the table, as in the document
    count: int
    entries: Iterator[tuple[str, Any]]  # (document key, document value), in table order


class ConfigManager(abc.ABC, Generic[K, V]):
    """One metadata table with its DataVersion and file; every entry change passes `_commit`."""

    FORMAT: ClassVar[TableFormat]

    def __init__(self, config_dir: str, hub: MetadataHub, *, persist_on_change: bool,
                 version_step: int = 1) -> None:
        fmt = self.FORMAT
        if isinstance(version_step, bool) or version_step < 1:
            raise ValueError(f"{fmt.version_step_key}: must be >= 1, got {version_step}")
        self._hub = hub
        self._persist_on_change = persist_on_change
        self._version_step = version_step
        self._updates = 0
        self._dv = DataVersion(timestamp=hub.now_ms())
        self._table: dict[K, V] = {}
        self._view: Mapping[K, V] = MappingProxyType(self._table)
        self._file = ConfigFile(os.path.join(config_dir, fmt.file_name), self._file_document,
                                bare_int_keys=fmt.bare_int_keys)
        self._table.update(self._initial_table())

    # ----- reads -----

    @property
    def data_version(self) -> DataVersion:
        """A copy: mutating it does not affect the manager."""
        return self._dv.copy()

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def dirty(self) -> bool:
        return self._file.dirty

    # ----- load / persist / snapshot state -----

    def load(self) -> None:
        """Load the file (or its .bak) over `_initial_table()` (file values win). A missing file leaves the
        initial table and the DataVersion as they are; a corrupt one raises `MetadataLoadError`."""
        state = self._file.load(self._decode_state)
        self._table.clear()
        self._table.update(self._initial_table())
        if state is not None:
            table, dv = state
            self._table.update(table)
            self._dv = dv
        self._on_loaded(from_file=state is not None)

    def persist(self, *, force: bool = False) -> bool:
        """Write the file now if dirty (or forced). True if written; raises OSError (left dirty)."""
        return self._file.persist(force=force)

    def prepare_persist(self, *, force: bool = False) -> PersistJob | None:
        """Encode now; run the returned job off the loop. None when clean and not forced."""
        return self._file.prepare(force=force)

    def export_state(self) -> dict[str, Any]:
        """The file document in RocketMQ's JSON shape (also this table's snapshot section)."""
        return self._document(dict(self._encode_entry(key, value) for key, value in self._table.items()))

    def export_parts(self) -> ExportParts:
        """``export_state`` in parts (its entries encoded as they are read)."""
        items = list(self._table.items())
        fmt = self.FORMAT
        return ExportParts(fmt.table_field, self._dv.to_json(), fmt.version_first, len(items),
                           (self._encode_entry(key, value) for key, value in items))

    def _document(self, table: Mapping[str, Any]) -> dict[str, Any]:
        if self.FORMAT.version_first:
            return {"dataVersion": self._dv.to_json(), self.FORMAT.table_field: table}
        return {self.FORMAT.table_field: table, "dataVersion": self._dv.to_json()}

    def _file_document(self) -> dict[str, Any]:
        """What the file's JSON encoder gets (encoded at once, on the loop): ``export_state``, or a document the
        encoder turns into the same bytes more cheaply."""
        return self.export_state()

    def import_state(self, doc: dict[str, Any]) -> None:
        """Replace the whole table and DataVersion (slave snapshot bootstrap). Emits nothing; a malformed
        document raises ValueError and changes nothing."""
        table, dv = self._decode_state(doc)
        self._table.clear()
        self._table.update(table)
        self._dv = dv
        self._file.mark_dirty()

    def adopt_state(self, doc: Any, *, if_version_differs: bool = False) -> bool:
        """Replace the whole table and DataVersion with another broker's document (a slave adopting its
        master's table, RocketMQ's SlaveSynchronize): the document's entries over `_initial_table()` (as
        `load()` builds the table from a file, so built-in entries the document lacks stay), and its
        DataVersion. Nothing changes when the result equals the current table and DataVersion, or, with
        `if_version_differs`, when the DataVersions are equal (RocketMQ compares only those for topics and
        groups). True when replaced. Emits nothing; marks the file dirty. A malformed document raises
        ValueError and changes nothing."""
        table, dv = self._decode_state(doc)
        if if_version_differs and dv == self._dv:
            return False
        merged = self._initial_table()
        merged.update(table)
        if dv == self._dv and merged == self._table:
            return False
        self._table.clear()
        self._table.update(merged)
        self._dv = dv
        self._file.mark_dirty()
        return True

    def apply_replicated(self, change: MetadataChange) -> None:
        """Apply a master's change record (slave side): emits nothing, adopts the record's DataVersion.
        A malformed record raises ValueError and changes nothing."""
        key = self._key_from_record(change)
        dv = DataVersion.from_json(change.data_version)
        value = self._value_from_record(key, change) if change.op == OP_PUT else None
        self._commit(key, change.op, value, adopt=dv)

    # ----- the choke point -----

    def _commit(self, key: K, op: str, value: V | None = None, *,
                adopt: DataVersion | None = None) -> MetadataChange | None:
        """THE single choke point: every change of one table entry, of every manager, passes here.

        In order: update the in-memory table (`_store` for a put, remove for a delete); advance the
        DataVersion (local: bump every `version_step` puts and on every delete; replicated: adopt the
        master's `adopt` verbatim); mark the file dirty; for a local change emit exactly one
        `MetadataChange` through the hub (replicated records are not re-emitted: `BrokerMetadata` notifies
        the hub's applied-observers); then persist at once when `persist_on_change` (a failed write is
        logged and left dirty for the periodic persist). Returns the emitted change (None when replicated).

        On a master with incremental metadata sync (RIP-81) the hub's journal writes the change record into
        the commit log *before* anything changes here: when it refuses (raises), the table, the DataVersion and
        the file stay as they were, so an update never exists without its record. Keep every mutation routed
        through this method and do not add a second path that changes `_table` entry by entry.
        """
        if op == OP_PUT and value is None:
            raise ValueError(f"{self.FORMAT.kind}: a put needs a value")
        if op not in (OP_PUT, OP_DELETE):
            raise ValueError(f"{self.FORMAT.kind}: unknown op {op!r}")
        if adopt is None:
            dv, updates = self._next_version(force=op == OP_DELETE)
            journal = self._hub.journal
            if journal is not None:  # the record first: if it cannot be written, nothing changes
                record = None if value is None else self._record_value(value)
                journal.write(self.FORMAT.kind, op, self._record_key(key), record, dv.to_json(), key not in self._table)
            self._dv, self._updates = dv, updates
        else:
            self._dv = adopt
        if op == OP_PUT:
            assert value is not None
            self._store(key, value)
        else:
            self._table.pop(key, None)
        self._file.mark_dirty()
        change = None if adopt is not None else self._emit(key, op, value)
        if self._persist_on_change:
            self._file.persist_logged()
        return change

    def _emit(self, key: K, op: str, value: V | None) -> MetadataChange:
        record = None if value is None else self._record_value(value)
        return self._hub.emit(self.FORMAT.kind, op, self._record_key(key), record, self._dv.to_json())

    def _next_version(self, *, force: bool) -> tuple[DataVersion, int]:
        """The DataVersion and update counter after one more local change (nothing is changed yet)."""
        updates = self._updates + 1
        if not force and updates < self._version_step:
            return self._dv, updates
        dv = self._dv.copy()
        dv.next_version(self._hub.state_version, now_ms=self._hub.now_ms())
        return dv, 0

    def _decode_state(self, doc: Any) -> tuple[dict[K, V], DataVersion]:
        """Decode a file / snapshot document; junk raises ValueError naming the field."""
        fmt = self.FORMAT
        if not isinstance(doc, dict):
            raise ValueError(f"{fmt.context}: expected an object")
        table: dict[K, V] = {}
        for name, raw in get_object(doc, fmt.table_field, fmt.context).items():
            key, value = self._decode_entry(name, raw)
            table[key] = value
        return table, DataVersion.from_json(doc.get("dataVersion"))

    # ----- hooks: overridable defaults -----

    def _initial_table(self) -> dict[K, V]:
        """Entries present before (and under) the file's, e.g. the built-in system topics. Also called by
        `__init__`: a subclass sets what this needs before calling `super().__init__()`."""
        return {}

    def _on_loaded(self, *, from_file: bool) -> None:
        """Called at the end of `load()` (logging)."""

    def _store(self, key: K, value: V) -> None:
        """Put semantics: replace the entry (consumer offsets merge queue maps instead)."""
        self._table[key] = value

    def _record_key(self, key: K) -> str:
        """The change record's key for a table key."""
        return str(key)

    # ----- hooks: the table's codec -----

    @abc.abstractmethod
    def _encode_entry(self, key: K, value: V) -> tuple[str, Any]:
        """One table entry as (JSON object key, JSON value) for the file / snapshot document."""

    @abc.abstractmethod
    def _decode_entry(self, name: str, raw: Any) -> tuple[K, V]:
        """Inverse of `_encode_entry`; junk raises ValueError naming the field."""

    @abc.abstractmethod
    def _record_value(self, value: V) -> ChangeValue:
        """A put's value as carried in the change record."""

    @abc.abstractmethod
    def _key_from_record(self, change: MetadataChange) -> K:
        """The table key of a replicated change record; junk raises ValueError."""

    @abc.abstractmethod
    def _value_from_record(self, key: K, change: MetadataChange) -> V:
        """The value of a replicated put record; junk raises ValueError."""


class NamedConfig(Protocol):
    """A frozen config with a camelCase JSON form (`TopicConfig`, `SubscriptionGroupConfig`)."""

    def to_json(self) -> dict[str, Any]: ...
    def validate(self) -> None: ...


C = TypeVar("C", bound=NamedConfig)


class NamedConfigManager(ConfigManager[str, C]):
    """A table of frozen configs keyed by their name, persisted on every change.

    Log events (stable names): `<kind>_created`, `<kind>_updated`, `<kind>_deleted` (plus the subclasses'
    own, e.g. `topic_auto_created`) and `LOADED_EVENT` (with `<LOG_KEY>s`: the entry count); entries are
    logged by `LOG_KEY` and `_log_fields`. A bad replicated value is reported as "<kind with spaces> change".
    """

    LOG_KEY: ClassVar[str]  # log key of the entry's name: "topic" / "group"
    LOADED_EVENT: ClassVar[str]  # logged by load(): "topic_configs_loaded" / "subscription_groups_loaded"

    def __init__(self, config_dir: str, hub: MetadataHub, log: FilteringBoundLogger, *,
                 persist_on_change: bool) -> None:
        super().__init__(config_dir, hub, persist_on_change=persist_on_change)
        self._log = log

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def all(self) -> Mapping[str, C]:
        """Read-only live view of the table."""
        return self._view

    def update(self, cfg: C) -> None:
        """Create or replace an entry (admin). Raises ValueError for a bad config."""
        cfg.validate()
        created = self._name_of(cfg) not in self._table
        self._put(cfg, f"{self.FORMAT.kind}_created" if created else f"{self.FORMAT.kind}_updated")

    def delete(self, name: str) -> bool:
        """Remove an entry; False (and no change) when there is none."""
        if name not in self._table:
            return False
        self._commit(name, OP_DELETE)
        self._log.info(f"{self.FORMAT.kind}_deleted", **{self.LOG_KEY: name})
        return True

    def _put(self, cfg: C, event: str, **log_kv: Any) -> None:
        """Commit a put of `cfg` under its name, then log `event`."""
        self._commit(self._name_of(cfg), OP_PUT, cfg)
        self._log.info(event, **self._log_fields(cfg), **log_kv)

    def _on_loaded(self, *, from_file: bool) -> None:
        self._log.info(self.LOADED_EVENT, path=self.path, **{self.LOG_KEY + "s": len(self._table)},
                       from_file=from_file)

    def _encode_entry(self, key: str, value: C) -> tuple[str, Any]:
        return key, value.to_json()

    def _decode_entry(self, name: str, raw: Any) -> tuple[str, C]:
        cfg = self._parse(raw, name)
        return name, (cfg if self._name_of(cfg) == name else self._renamed(cfg, name))

    def _record_value(self, value: C) -> ChangeValue:
        return value.to_json()

    def _key_from_record(self, change: MetadataChange) -> str:
        return change.key

    def _value_from_record(self, key: str, change: MetadataChange) -> C:
        if not isinstance(change.value, dict):
            what = self.FORMAT.kind.replace("_", " ")
            raise ValueError(f"{what} change {change.seq}: value must be an object")
        return self._parse(change.value, key)

    @abc.abstractmethod
    def _parse(self, raw: Any, default_name: str) -> C:
        """`Config.from_json(raw, default_name=...)`."""

    @abc.abstractmethod
    def _name_of(self, cfg: C) -> str:
        """The config's own name (its table key)."""

    @abc.abstractmethod
    def _renamed(self, cfg: C, name: str) -> C:
        """A copy named `name` (the file's table key wins over the name inside the entry)."""

    @abc.abstractmethod
    def _log_fields(self, cfg: C) -> dict[str, Any]:
        """Key/values logged for a put (starting with `LOG_KEY`)."""
