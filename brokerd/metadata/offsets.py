"""Consumer offsets (`consumerOffset.json`) and delay-level offsets (`delayOffset.json`).

Serves: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), the PULL_MESSAGE (11) commit flag,
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45), consumer-progress admin queries and the schedule
(delay-level) service's progress.

Commits are hot (every pull can carry one): a commit is one `ConfigManager._commit` (manager.py) when the
value changed: a dict update plus one `hub.emit`, with no I/O. The file is written by `persist()`, which the
broker calls every 5 s and at shutdown; a dirty flag makes it a no-op when nothing changed. Like RocketMQ, the DataVersion is bumped every
`version_step` commits (consumerOffsetUpdateVersionStep 500 / delayOffsetUpdateVersionStep 200) and on every
removal; each change record carries the DataVersion as it is after that change.

File key is RocketMQ's `topic@group`; change-record key is `group@topic`. Names containing '@' are rejected
(RocketMQ's name regex excludes it anyway) so both splits are unambiguous.
Not thread-safe: event loop thread only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .hook import KIND_CONSUMER_OFFSET, KIND_DELAY_OFFSET, OP_DELETE, OP_PUT, ChangeValue, MetadataChange, MetadataHub
from .jsonfields import to_int_key, to_int_value
from .manager import ConfigManager, TableFormat

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


def _swap(key: str) -> str:
    """`topic@group` <-> `group@topic` (names never contain '@')."""
    first, _, second = key.partition(TOPIC_GROUP_SEPARATOR)
    return second + TOPIC_GROUP_SEPARATOR + first


class ConsumerOffsetManager(ConfigManager[str, dict[int, int]]):
    """group/topic/queue -> committed offset (the next offset to consume).

    Table key `topic@group` -> {queueId: offset}. A put merges the given queues into the entry and its change
    record carries only those queues. Written by `persist()` only (no persist per commit)."""

    FORMAT = TableFormat(KIND_CONSUMER_OFFSET, CONSUMER_OFFSET_FILE, "offsetTable", "consumerOffset",
                         version_first=False, bare_int_keys=True, version_step_key="consumerOffsetUpdateVersionStep")

    def __init__(self, config_dir: str, hub: MetadataHub, *, version_step: int = 500) -> None:
        super().__init__(config_dir, hub, persist_on_change=False, version_step=version_step)

    # ----- hot path -----

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store `offset` for the queue; emits one change only when the stored value changes.
        `client_host` is accepted for parity with RocketMQ (diagnostics only)."""
        if TOPIC_GROUP_SEPARATOR in group or TOPIC_GROUP_SEPARATOR in topic or not group or not topic:
            _check_names(group, topic)
        key = topic + TOPIC_GROUP_SEPARATOR + group
        queues = self._table.get(key)
        if queues is not None and queues.get(queue_id) == offset:
            return
        self._commit(key, OP_PUT, {queue_id: offset})

    def commit_offsets(self, client_host: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Store several queues at once (admin reset); one change carrying only the queues that changed."""
        _check_names(group, topic)
        key = topic + TOPIC_GROUP_SEPARATOR + group
        queues = self._table.get(key, {})
        changed = {q: o for q, o in offsets.items() if queues.get(q) != o}
        if changed:
            self._commit(key, OP_PUT, changed)

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

    def entries(self) -> dict[str, Mapping[int, int]]:
        """The table, `topic@group` -> its queue map, without copying the maps (a reader that gives the loop turns
        sees a map as it is when it reads it; 80,000 queues: ~0.3 ms where ``table`` takes ~3 ms)."""
        return dict(self._table)

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
            self._commit(topic + TOPIC_GROUP_SEPARATOR + group, OP_DELETE)
        return len(pairs)

    # ----- ConfigManager hooks -----

    def _store(self, key: str, value: dict[int, int]) -> None:
        self._table.setdefault(key, {}).update(value)

    def _record_key(self, key: str) -> str:
        return _swap(key)

    def _record_value(self, value: dict[int, int]) -> ChangeValue:
        return value

    def _encode_entry(self, key: str, value: dict[int, int]) -> tuple[str, Any]:
        return key, {str(q): o for q, o in value.items()}

    def _file_document(self) -> dict[str, Any]:
        """The table as it is: the JSON encoder writes the queue ids as the same string keys (a file of 80,000
        committed queues: 2.7 ms on the loop instead of 17.8 with every queue map rebuilt)."""
        return self._document(self._table)

    def _decode_entry(self, name: str, raw: Any) -> tuple[str, dict[int, int]]:
        topic, sep, group = name.partition(TOPIC_GROUP_SEPARATOR)
        if not sep or not topic or not group:
            raise ValueError(f"consumerOffset.offsetTable: key must be topic@group, got {name!r}")
        return name, _decode_queue_map(raw, f"consumerOffset.offsetTable[{name}]")

    def _key_from_record(self, change: MetadataChange) -> str:
        if TOPIC_GROUP_SEPARATOR not in change.key:
            raise ValueError(f"consumer offset change {change.seq}: key must be group@topic, got {change.key!r}")
        return _swap(change.key)

    def _value_from_record(self, key: str, change: MetadataChange) -> dict[int, int]:
        return _decode_queue_map(change.value, f"consumer offset change {change.seq}")


class DelayOffsetManager(ConfigManager[int, int]):
    """Delay level -> consume-queue offset of SCHEDULE_TOPIC_XXXX (the schedule service's progress).
    Written by `persist()` only (no persist per update)."""

    FORMAT = TableFormat(KIND_DELAY_OFFSET, DELAY_OFFSET_FILE, "offsetTable", "delayOffset", version_first=False,
                         bare_int_keys=True, version_step_key="delayOffsetUpdateVersionStep")

    def __init__(self, config_dir: str, hub: MetadataHub, *, version_step: int = 200) -> None:
        super().__init__(config_dir, hub, persist_on_change=False, version_step=version_step)

    def get(self, level: int) -> int:
        """The stored offset of `level`, 0 when none (the schedule service starts from 0)."""
        return self._table.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise ValueError(f"delay level must be an integer >= 1, got {level!r}")
        if self._table.get(level) != offset:
            self._commit(level, OP_PUT, offset)

    def all(self) -> Mapping[int, int]:
        return self._view

    def all_json(self) -> dict[str, Any]:
        """GET_ALL_DELAY_OFFSET (45) body / file document: `{"offsetTable": {"1": n, ...}, "dataVersion": ...}`."""
        return self.export_state()

    # ----- ConfigManager hooks -----

    def _record_value(self, value: int) -> ChangeValue:
        return value

    def _encode_entry(self, key: int, value: int) -> tuple[str, Any]:
        return str(key), value

    def _decode_entry(self, name: str, raw: Any) -> tuple[int, int]:
        return to_int_key(name, "delayOffset.offsetTable"), to_int_value(raw, "delayOffset.offsetTable")

    def _key_from_record(self, change: MetadataChange) -> int:
        return to_int_key(change.key, f"delay offset change {change.seq}")

    def _value_from_record(self, key: int, change: MetadataChange) -> int:
        return to_int_value(change.value, f"delay offset change {change.seq}")
