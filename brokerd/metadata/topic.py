"""Topic configs (`topics.json`) and the broker's TopicConfigManager (spec §2.3 send checks, §2.4, §5.1).

Serves: send auto-create from TBW102 (SEND_MESSAGE 10/310/320), `%RETRY%`/`%DLQ%` creation (HEART_BEAT 34,
CONSUMER_SEND_MSG_BACK 36), UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER, GET_ALL_TOPIC_CONFIG (21)
and the REGISTER_BROKER (103) body (`register_wrapper`).

"A topic was created or changed, re-register with the name server now": there is no separate callback.
The broker adds an observer to the MetadataHub and reacts to `change.kind == "topic"` (for a put, call
`register_wrapper([change.key])` for an incremental registration).

Every mutation: update the table, bump the DataVersion, emit exactly one change through the hub, persist.
`TopicConfig` is frozen and `all()` is a read-only view, so the table cannot change behind the hub's back;
use `dataclasses.replace(tc, perm=...)` and `update()` to change a topic.

Not thread-safe: call from the event loop thread only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import structlog

from .hook import KIND_TOPIC, OP_DELETE, OP_PUT, MetadataChange, MetadataHub
from .jsonfields import get_bool, get_int, get_object, get_str, get_str_map
from .names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC_QUEUE_NUM,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    REPLY_TOPIC_POSTFIX,
    REVIVE_QUEUE_NUM,
    REVIVE_TOPIC_PREFIX,
    RMQ_SYS_BENCHMARK_TOPIC,
    RMQ_SYS_OFFSET_MOVED_EVENT,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_SELF_TEST_TOPIC,
    RMQ_SYS_TRACE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    SCHEDULE_TOPIC_QUEUE_NUM,
    SYNC_BROKER_MEMBER_GROUP_PREFIX,
    TOPIC_NAME_REGEX,
    is_inherited,
    is_readable,
    is_system_topic,
    is_writeable,
    validate_topic,
)
from .persist import ConfigFile, PersistJob
from .version import DataVersion

__all__ = [
    "PERM_INHERIT", "PERM_PRIORITY", "PERM_READ", "PERM_WRITE", "TOPIC_FILTER_TYPES", "TOPIC_NAME_REGEX",
    "TopicConfig", "TopicConfigManager", "is_inherited", "is_readable", "is_writeable", "validate_topic",
]

TOPIC_FILTER_TYPES: Final = frozenset({"SINGLE_TAG", "MULTI_TAG"})
TOPICS_FILE: Final = "topics.json"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's config. Frozen: change it with `dataclasses.replace` and `TopicConfigManager.update`."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))

    def __hash__(self) -> int:
        return hash((self.topic_name, self.read_queue_nums, self.write_queue_nums, self.perm,
                     self.topic_filter_type, self.topic_sys_flag, self.order,
                     tuple(sorted(self.attributes.items()))))

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], *, default_name: str = "") -> TopicConfig:
        """Parse RocketMQ's camelCase JSON; missing keys take the Java defaults, wrong types raise ValueError."""
        if not isinstance(d, dict):
            raise ValueError(f"topic config: expected an object, got {type(d).__name__}")
        name = get_str(d, "topicName", default_name, "topicConfig")
        ctx = f"topicConfig[{name}]"
        return cls(
            topic_name=name,
            read_queue_nums=get_int(d, "readQueueNums", 16, ctx),
            write_queue_nums=get_int(d, "writeQueueNums", 16, ctx),
            perm=get_int(d, "perm", PERM_READ | PERM_WRITE, ctx),
            topic_filter_type=get_str(d, "topicFilterType", "SINGLE_TAG", ctx),
            topic_sys_flag=get_int(d, "topicSysFlag", 0, ctx),
            order=get_bool(d, "order", False, ctx),
            attributes=get_str_map(d, "attributes", ctx),
        )

    def validate(self) -> None:
        """Raise ValueError (naming the field) for a config no client could use."""
        err = validate_topic(self.topic_name)
        if err is not None:
            raise ValueError(f"topicName: {err}")
        for key, v in (("readQueueNums", self.read_queue_nums), ("writeQueueNums", self.write_queue_nums)):
            if not 0 <= v <= 65535:
                raise ValueError(f"{key}: must be between 0 and 65535, got {v}")
        if not 0 <= self.perm <= (PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT):
            raise ValueError(f"perm: must be between 0 and 15, got {self.perm}")
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topicFilterType: must be SINGLE_TAG or MULTI_TAG, got {self.topic_filter_type!r}")


def _require_name(key: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key}: must be a non-empty string, got {value!r}")


class TopicConfigManager:
    """The broker's topic table. Single writer (event loop); every mutation emits one `topic` change."""

    def __init__(self, config_dir: str, hub: MetadataHub, *, cluster_name: str, broker_name: str,
                 auto_create_topic_enable: bool = True, default_topic_queue_nums: int = 8,
                 cluster_topic_enable: bool = True, broker_topic_enable: bool = True,
                 trace_topic_enable: bool = False, msg_trace_topic_name: str = RMQ_SYS_TRACE_TOPIC,
                 persist_on_change: bool = True) -> None:
        _require_name("brokerClusterName", cluster_name)
        _require_name("brokerName", broker_name)
        _require_name("msgTraceTopicName", msg_trace_topic_name)
        if isinstance(default_topic_queue_nums, bool) or not 1 <= default_topic_queue_nums <= 65535:
            raise ValueError(f"defaultTopicQueueNums: must be between 1 and 65535, got {default_topic_queue_nums}")
        self._hub = hub
        self._cluster_name = cluster_name
        self._broker_name = broker_name
        self._auto_create_topic_enable = auto_create_topic_enable
        self._default_topic_queue_nums = default_topic_queue_nums
        self._cluster_topic_enable = cluster_topic_enable
        self._broker_topic_enable = broker_topic_enable
        self._trace_topic_enable = trace_topic_enable
        self._msg_trace_topic_name = msg_trace_topic_name
        self._persist_on_change = persist_on_change
        self._table: dict[str, TopicConfig] = {}
        self._view: Mapping[str, TopicConfig] = MappingProxyType(self._table)
        self._dv = DataVersion(timestamp=hub.now_ms())
        self._file = ConfigFile(os.path.join(config_dir, TOPICS_FILE), self.export_state)
        self._log = structlog.get_logger().bind(component="topic_config", broker=broker_name)
        self._system_topic_names = frozenset(tc.topic_name for tc in self._system_topics())
        self._reset_to_system_topics()

    # ----- reads -----

    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    def all(self) -> Mapping[str, TopicConfig]:
        """Read-only live view of the table."""
        return self._view

    @property
    def data_version(self) -> DataVersion:
        """A copy: mutating it does not affect the manager."""
        return self._dv.copy()

    @property
    def path(self) -> str:
        return self._file.path

    def is_system_topic(self, topic: str) -> bool:
        return is_system_topic(topic) or topic in self._system_topic_names

    def is_order_topic(self, topic: str) -> bool:
        tc = self._table.get(topic)
        return tc is not None and tc.order

    def register_wrapper(self, topics: Iterable[str] | None = None) -> dict[str, Any]:
        """`TopicConfigSerializeWrapper` JSON for REGISTER_BROKER: all topics, or only the named ones
        (unknown names are skipped) for an incremental registration."""
        if topics is None:
            selected: Iterable[TopicConfig] = self._table.values()
        else:
            selected = [tc for t in topics if (tc := self._table.get(t)) is not None]
        return {
            "topicConfigTable": {tc.topic_name: tc.to_json() for tc in selected},
            "dataVersion": self._dv.to_json(),
        }

    # ----- load / persist / replication state -----

    def load(self) -> None:
        """Load `topics.json` (or its .bak), over the built-in system topics (file values win)."""
        state = self._file.load(_decode_state)
        self._reset_to_system_topics()
        if state is not None:
            table, dv = state
            self._table.update(table)
            self._dv = dv
        self._log.info("topic_configs_loaded", path=self._file.path, topics=len(self._table),
                       from_file=state is not None)

    def persist(self, *, force: bool = False) -> bool:
        return self._file.persist(force=force)

    def prepare_persist(self, *, force: bool = False) -> PersistJob | None:
        return self._file.prepare(force=force)

    @property
    def dirty(self) -> bool:
        return self._file.dirty

    def export_state(self) -> dict[str, Any]:
        """The `topics.json` document (also the snapshot section)."""
        return {
            "dataVersion": self._dv.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self._table.items()},
        }

    def import_state(self, doc: dict[str, Any]) -> None:
        """Replace the whole table and DataVersion (slave snapshot bootstrap). No change is emitted."""
        table, dv = _decode_state(doc)
        self._table.clear()
        self._table.update(table)
        self._dv = dv
        self._file.mark_dirty()

    def apply_replicated(self, change: MetadataChange) -> None:
        """Apply a master's change record (slave side). Emits nothing; adopts the record's DataVersion."""
        dv = DataVersion.from_json(change.data_version)
        if change.op == OP_PUT:
            if not isinstance(change.value, dict):
                raise ValueError(f"topic change {change.seq}: value must be an object")
            self._table[change.key] = TopicConfig.from_json(change.value, default_name=change.key)
        else:
            self._table.pop(change.key, None)
        self._dv = dv
        self._after_change()

    # ----- mutations -----

    def update(self, tc: TopicConfig) -> None:
        """Create or replace a topic (admin UPDATE_AND_CREATE_TOPIC). Raises ValueError for a bad config."""
        tc.validate()
        created = tc.topic_name not in self._table
        self._commit_put(tc, "topic_created" if created else "topic_updated")

    def delete(self, topic: str) -> bool:
        if topic not in self._table:
            return False
        del self._table[topic]
        self._bump()
        self._hub.emit(KIND_TOPIC, OP_DELETE, topic, None, self._dv.to_json())
        self._after_change()
        self._log.info("topic_deleted", topic=topic)
        return True

    def create_topic_if_absent(self, tc: TopicConfig) -> TopicConfig:
        existing = self._table.get(tc.topic_name)
        if existing is not None:
            return existing
        self.update(tc)
        return tc

    def create_topic_in_send_message_method(self, topic: str, default_topic: str, remote_addr: str,
                                            client_default_topic_queue_nums: int,
                                            topic_sys_flag: int) -> TopicConfig | None:
        """Auto-create `topic` on first send (spec §2.3 step 4). Returns the existing config if there is one,
        the new one, or None when not creatable (the processor then answers 17 TOPIC_NOT_EXIST; for a
        `%RETRY%` topic it falls back to `create_topic_in_send_back_method(topic, 1, 6, flag)`).

        Rules: the template `default_topic` must exist and carry PERM_INHERIT (TBW102 counts as not
        inheritable when auto-create is disabled); queues = max(0, min(client default, template write
        queues)); perm = template perm without INHERIT; filter type from the template."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        err = validate_topic(topic)
        template = self._table.get(default_topic)
        reason = None
        if err is not None:
            reason = err
        elif template is None:
            reason = "default topic does not exist"
        else:
            perm = template.perm
            if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self._auto_create_topic_enable:
                perm = PERM_READ | PERM_WRITE
            if not is_inherited(perm):
                reason = "default topic is not inheritable"
        if reason is not None or template is None:
            self._log.warning("topic_auto_create_refused", topic=topic, default_topic=default_topic,
                              producer=remote_addr, reason=reason)
            return None
        queue_nums = max(0, min(client_default_topic_queue_nums, template.write_queue_nums))
        tc = TopicConfig(topic, queue_nums, queue_nums, perm & ~PERM_INHERIT, template.topic_filter_type,
                         topic_sys_flag)
        self._commit_put(tc, "topic_auto_created", producer=remote_addr, default_topic=default_topic)
        return tc

    def create_topic_in_send_back_method(self, topic: str, queue_nums: int, perm: int,
                                         topic_sys_flag: int) -> TopicConfig:
        """Create `%RETRY%<group>` / `%DLQ%<group>` if absent (idempotent: an existing config is returned
        unchanged and nothing is emitted)."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag)
        tc.validate()
        self._commit_put(tc, "topic_created")
        return tc

    # ----- internals -----

    def _bump(self) -> None:
        self._dv.next_version(self._hub.state_version, now_ms=self._hub.now_ms())

    def _after_change(self) -> None:
        self._file.mark_dirty()
        if self._persist_on_change:
            self._file.persist_logged()

    def _commit_put(self, tc: TopicConfig, event: str, **log_kv: Any) -> None:
        self._table[tc.topic_name] = tc
        self._bump()
        self._hub.emit(KIND_TOPIC, OP_PUT, tc.topic_name, tc.to_json(), self._dv.to_json())
        self._after_change()
        self._log.info(event, topic=tc.topic_name, read_queue_nums=tc.read_queue_nums,
                       write_queue_nums=tc.write_queue_nums, perm=tc.perm, **log_kv)

    def _reset_to_system_topics(self) -> None:
        self._table.clear()
        for tc in self._system_topics():
            self._table[tc.topic_name] = tc

    def _system_topics(self) -> list[TopicConfig]:
        """The topics RocketMQ's TopicConfigManager.init() creates (file values override them on load)."""
        rw = PERM_READ | PERM_WRITE
        out = [TopicConfig(RMQ_SYS_SELF_TEST_TOPIC, 1, 1)]
        if self._auto_create_topic_enable:
            q = self._default_topic_queue_nums
            out.append(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, q, q, PERM_INHERIT | rw))
        out.append(TopicConfig(RMQ_SYS_BENCHMARK_TOPIC, BENCHMARK_TOPIC_QUEUE_NUM, BENCHMARK_TOPIC_QUEUE_NUM))
        out.append(TopicConfig(self._cluster_name, perm=PERM_INHERIT | (rw if self._cluster_topic_enable else 0)))
        out.append(TopicConfig(self._broker_name, 1, 1,
                               perm=PERM_INHERIT | (rw if self._broker_topic_enable else 0)))
        out.append(TopicConfig(RMQ_SYS_OFFSET_MOVED_EVENT, 1, 1))
        out.append(TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUM, SCHEDULE_TOPIC_QUEUE_NUM))
        if self._trace_topic_enable:
            out.append(TopicConfig(self._msg_trace_topic_name, 1, 1))
        out.append(TopicConfig(f"{self._cluster_name}_{REPLY_TOPIC_POSTFIX}", 1, 1))
        out.append(TopicConfig(REVIVE_TOPIC_PREFIX + self._cluster_name, REVIVE_QUEUE_NUM, REVIVE_QUEUE_NUM))
        out.append(TopicConfig(SYNC_BROKER_MEMBER_GROUP_PREFIX + self._broker_name, 1, 1, PERM_INHERIT))
        out.append(TopicConfig(RMQ_SYS_TRANS_HALF_TOPIC, 1, 1))
        out.append(TopicConfig(RMQ_SYS_TRANS_OP_HALF_TOPIC, 1, 1))
        return out


def _decode_state(doc: Any) -> tuple[dict[str, TopicConfig], DataVersion]:
    if not isinstance(doc, dict):
        raise ValueError("topics: expected an object")
    table: dict[str, TopicConfig] = {}
    for name, raw in get_object(doc, "topicConfigTable", "topics").items():
        tc = TopicConfig.from_json(raw, default_name=name)
        if tc.topic_name != name:
            tc = dataclasses.replace(tc, topic_name=name)
        table[name] = tc
    return table, DataVersion.from_json(doc.get("dataVersion"))
