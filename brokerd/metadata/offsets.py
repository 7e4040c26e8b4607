"""Consumer offsets (`consumerOffset.json`) and delay-level offsets (`delayOffset.json`).

Serves: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), the PULL_MESSAGE (11) commit flag,
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45), consumer-progress admin queries and the schedule
(delay-level) service's progress.

Commits are hot (every pull can carry one): a commit is a dict update plus one `hub.emit` when the value
changed, with no I/O. The file is written by `persist()`, which the broker calls every 5 s and at shutdown;
a dirty flag makes it a no-op when nothing changed. Like RocketMQ, the DataVersion is bumped every
`version_step` commits (consumerOffsetUpdateVersionStep 500 / delayOffsetUpdateVersionStep 200) and on every
removal; each change record carries the DataVersion as it is after that change.

File key is RocketMQ's `topic@group`; change-record key is `group@topic`. Names containing '@' are rejected
(RocketMQ's name regex excludes it anyway) so both splits are unambiguous.
Not thread-safe: event loop thread only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from .hook import KIND_CONSUMER_OFFSET, KIND_DELAY_OFFSET, OP_DELETE, OP_PUT, MetadataChange, MetadataHub
from .jsonfields import get_object, to_int_key, to_int_value
from .persist import ConfigFile, PersistJob
from .version import DataVersion

CONSUMER_OFFSET_FILE: Final = "consumerOffset.json"
DELAY_OFFSET_FILE: Final = "delayOffset.json"
TOPIC_GROUP_SEPARATOR: Final = "@"


def _check_names(group: str, topic: str) -> None:
    if not group or not topic or TOPIC_GROUP_SEPARATOR in group or TOPIC_GROUP_SEPARATOR in topic:
        raise ValueError(f"consumer offset: group {group!r} and topic {topic!r} must be non-empty and free of '@'")


def _decode_queue_map(raw: Any, ctx: str) -> dict[int, int]:
    if not isinstance(raw, dict):
        raise ValueError(f"{ctx}: expected an object of queueId -> offset")
    return {to_int_key(k, ctx): to_int_value(v, ctx) for k, v in raw.items()}


class _CountingVersion:
    """DataVersion plus the "bump every N updates" counter shared by both offset managers."""

    def __init__(self, hub: MetadataHub, step: int, key: str) -> None:
        if isinstance(step, bool) or step < 1:
            raise ValueError(f"{key}: must be >= 1, got {step}")
        self.hub = hub
        self.step = step
        self.dv = DataVersion(timestamp=hub.now_ms())
        self.updates = 0

    def count(self) -> None:
        self.updates += 1
        if self.updates >= self.step:
            self.bump()

    def bump(self) -> None:
        self.updates = 0
        self.dv.next_version(self.hub.state_version, now_ms=self.hub.now_ms())


class ConsumerOffsetManager:
    """group/topic/queue -> committed offset (the next offset to consume)."""

    def __init__(self, config_dir: str, hub: MetadataHub, *, version_step: int = 500) -> None:
        self._hub = hub
        self._ver = _CountingVersion(hub, version_step, "consumerOffsetUpdateVersionStep")
        self._table: dict[str, dict[int, int]] = {}  # "topic@group" -> {queueId: offset}
        self._file = ConfigFile(os.path.join(config_dir, CONSUMER_OFFSET_FILE), self.export_state,
                                bare_int_keys=True)

    # ----- hot path -----

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store `offset` for the queue; emits one change only when the stored value changes.
        `client_host` is accepted for parity with RocketMQ (diagnostics only)."""
        if TOPIC_GROUP_SEPARATOR in group or TOPIC_GROUP_SEPARATOR in topic or not group or not topic:
            _check_names(group, topic)
        key = topic + TOPIC_GROUP_SEPARATOR + group
        queues = self._table.get(key)
        if queues is None:
            queues = self._table[key] = {}
        elif queues.get(queue_id) == offset:
            return
        queues[queue_id] = offset
        self._file.dirty = True
        self._ver.count()
        self._hub.emit(KIND_CONSUMER_OFFSET, OP_PUT, group + TOPIC_GROUP_SEPARATOR + topic, {queue_id: offset},
                       self._ver.dv.to_json())

    def commit_offsets(self, client_host: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Store several queues at once (admin reset); one change carrying only the queues that changed."""
        _check_names(group, topic)
        key = topic + TOPIC_GROUP_SEPARATOR + group
        queues = self._table.get(key, {})
        changed = {q: o for q, o in offsets.items() if queues.get(q) != o}
        if not changed:
            return
        self._table.setdefault(key, {}).update(changed)
        self._file.dirty = True
        self._ver.count()
        self._hub.emit(KIND_CONSUMER_OFFSET, OP_PUT, group + TOPIC_GROUP_SEPARATOR + topic, changed,
                       self._ver.dv.to_json())

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        queues = self._table.get(topic + TOPIC_GROUP_SEPARATOR + group)
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    # ----- reads -----

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for t, g in self._split_keys() if t == topic}

    def topics_of_group(self, group: str) -> set[str]:
        return {t for t, g in self._split_keys() if g == group}

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table keyed `topic@group` (tests, admin)."""
        return {k: dict(v) for k, v in self._table.items()}

    @property
    def data_version(self) -> DataVersion:
        return self._ver.dv.copy()

    def all_json(self) -> dict[str, Any]:
        """GET_ALL_CONSUMER_OFFSET (43) body / file document: `{"offsetTable": {"topic@group": {"0": n}}}`."""
        return self.export_state()

    def _split_keys(self) -> list[tuple[str, str]]:
        out = []
        for key in self._table:
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            out.append((topic, group))
        return out

    # ----- removals -----

    def remove_offset(self, group: str) -> int:
        """Forget every topic's offsets of `group`; one delete change per removed topic. Returns the count."""
        return self._remove([(t, g) for t, g in self._split_keys() if g == group])

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on `topic`; one delete change per removed group. Returns the count."""
        return self._remove([(t, g) for t, g in self._split_keys() if t == topic])

    def remove(self, group: str, topic: str) -> bool:
        return self._remove([(topic, group)] if topic + TOPIC_GROUP_SEPARATOR + group in self._table else []) == 1

    def _remove(self, pairs: list[tuple[str, str]]) -> int:
        for topic, group in pairs:
            del self._table[topic + TOPIC_GROUP_SEPARATOR + group]
            self._file.dirty = True
            self._ver.bump()
            self._hub.emit(KIND_CONSUMER_OFFSET, OP_DELETE, group + TOPIC_GROUP_SEPARATOR + topic, None,
                           self._ver.dv.to_json())
        return len(pairs)

    # ----- load / persist / replication -----

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def dirty(self) -> bool:
        return self._file.dirty

    def load(self) -> None:
        state = self._file.load(_decode_consumer_offsets)
        self._table.clear()
        if state is not None:
            table, dv = state
            self._table.update(table)
            self._ver.dv = dv

    def persist(self, *, force: bool = False) -> bool:
        return self._file.persist(force=force)

    def prepare_persist(self, *, force: bool = False) -> PersistJob | None:
        return self._file.prepare(force=force)

    def export_state(self) -> dict[str, Any]:
        return {
            "offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self._table.items()},
            "dataVersion": self._ver.dv.to_json(),
        }

    def import_state(self, doc: dict[str, Any]) -> None:
        table, dv = _decode_consumer_offsets(doc)
        self._table.clear()
        self._table.update(table)
        self._ver.dv = dv
        self._file.mark_dirty()

    def apply_replicated(self, change: MetadataChange) -> None:
        group, sep, topic = change.key.partition(TOPIC_GROUP_SEPARATOR)
        if not sep:
            raise ValueError(f"consumer offset change {change.seq}: key must be group@topic, got {change.key!r}")
        key = topic + TOPIC_GROUP_SEPARATOR + group
        dv = DataVersion.from_json(change.data_version)
        if change.op == OP_PUT:
            queues = _decode_queue_map(change.value, f"consumer offset change {change.seq}")
            self._table.setdefault(key, {}).update(queues)
        else:
            self._table.pop(key, None)
        self._ver.dv = dv
        self._file.mark_dirty()


def _decode_consumer_offsets(doc: Any) -> tuple[dict[str, dict[int, int]], DataVersion]:
    if not isinstance(doc, dict):
        raise ValueError("consumerOffset: expected an object")
    table: dict[str, dict[int, int]] = {}
    for key, raw in get_object(doc, "offsetTable", "consumerOffset").items():
        topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if not sep or not topic or not group:
            raise ValueError(f"consumerOffset.offsetTable: key must be topic@group, got {key!r}")
        table[key] = _decode_queue_map(raw, f"consumerOffset.offsetTable[{key}]")
    return table, DataVersion.from_json(doc.get("dataVersion"))


class DelayOffsetManager:
    """Delay level -> consume-queue offset of SCHEDULE_TOPIC_XXXX (the schedule service's progress)."""

    def __init__(self, config_dir: str, hub: MetadataHub, *, version_step: int = 200) -> None:
        self._hub = hub
        self._ver = _CountingVersion(hub, version_step, "delayOffsetUpdateVersionStep")
        self._table: dict[int, int] = {}
        self._view: Mapping[int, int] = MappingProxyType(self._table)
        self._file = ConfigFile(os.path.join(config_dir, DELAY_OFFSET_FILE), self.export_state,
                                bare_int_keys=True)

    def get(self, level: int) -> int:
        """The stored offset of `level`, 0 when none (the schedule service starts from 0)."""
        return self._table.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise ValueError(f"delay level must be an integer >= 1, got {level!r}")
        if self._table.get(level) == offset:
            return
        self._table[level] = offset
        self._file.dirty = True
        self._ver.count()
        self._hub.emit(KIND_DELAY_OFFSET, OP_PUT, str(level), offset, self._ver.dv.to_json())

    def all(self) -> Mapping[int, int]:
        return self._view

    @property
    def data_version(self) -> DataVersion:
        return self._ver.dv.copy()

    def all_json(self) -> dict[str, Any]:
        """GET_ALL_DELAY_OFFSET (45) body / file document: `{"offsetTable": {"1": n, ...}, "dataVersion": ...}`."""
        return self.export_state()

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def dirty(self) -> bool:
        return self._file.dirty

    def load(self) -> None:
        state = self._file.load(_decode_delay_offsets)
        self._table.clear()
        if state is not None:
            table, dv = state
            self._table.update(table)
            self._ver.dv = dv

    def persist(self, *, force: bool = False) -> bool:
        return self._file.persist(force=force)

    def prepare_persist(self, *, force: bool = False) -> PersistJob | None:
        return self._file.prepare(force=force)

    def export_state(self) -> dict[str, Any]:
        return {"offsetTable": {str(k): v for k, v in self._table.items()}, "dataVersion": self._ver.dv.to_json()}

    def import_state(self, doc: dict[str, Any]) -> None:
        table, dv = _decode_delay_offsets(doc)
        self._table.clear()
        self._table.update(table)
        self._ver.dv = dv
        self._file.mark_dirty()

    def apply_replicated(self, change: MetadataChange) -> None:
        level = to_int_key(change.key, f"delay offset change {change.seq}")
        dv = DataVersion.from_json(change.data_version)
        if change.op == OP_PUT:
            self._table[level] = to_int_value(change.value, f"delay offset change {change.seq}")
        else:
            self._table.pop(level, None)
        self._ver.dv = dv
        self._file.mark_dirty()


def _decode_delay_offsets(doc: Any) -> tuple[dict[int, int], DataVersion]:
    if not isinstance(doc, dict):
        raise ValueError("delayOffset: expected an object")
    table = _decode_queue_map(get_object(doc, "offsetTable", "delayOffset"), "delayOffset.offsetTable")
    return table, DataVersion.from_json(doc.get("dataVersion"))
