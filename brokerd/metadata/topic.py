"""Topic configs (`topics.json`) and the broker's TopicConfigManager (spec §2.3 send checks, §2.4, §5.1).

Serves: send auto-create from TBW102 (SEND_MESSAGE 10/310/320), `%RETRY%`/`%DLQ%` creation (HEART_BEAT 34,
CONSUMER_SEND_MSG_BACK 36), UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER, GET_ALL_TOPIC_CONFIG (21)
and the REGISTER_BROKER (103) body (`register_wrapper`).

"A topic was created or changed, re-register with the name server now": there is no separate callback.
The broker adds an observer to the MetadataHub and reacts to `change.kind == "topic"` (for a put, call
`register_wrapper([change.key])` for an incremental registration).

Every mutation passes `ConfigManager._commit` (manager.py): update the table, bump the DataVersion, emit
exactly one change through the hub, persist.
`TopicConfig` is frozen and `all()` is a read-only view, so the table cannot change behind the hub's back;
use `dataclasses.replace(tc, perm=...)` and `update()` to change a topic.

Not thread-safe: call from the event loop thread only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import structlog

from .hook import KIND_TOPIC, MetadataHub
from .jsonfields import get_bool, get_int, get_str, get_str_map
from .manager import NamedConfigManager, TableFormat
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


class TopicConfigManager(NamedConfigManager[TopicConfig]):
    """The broker's topic table. Single writer (event loop); every mutation emits one `topic` change.

    Generic parts (load / persist / DataVersion / snapshot state / `update` / `delete` / `all`) come from
    `NamedConfigManager`; every mutation passes its `_commit`."""

    FORMAT = TableFormat(KIND_TOPIC, TOPICS_FILE, table_field="topicConfigTable", context="topics")
    LOG_KEY = "topic"
    LOADED_EVENT = "topic_configs_loaded"

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
        self._cluster_name = cluster_name
        self._broker_name = broker_name
        self._auto_create_topic_enable = auto_create_topic_enable
        self._default_topic_queue_nums = default_topic_queue_nums
        self._cluster_topic_enable = cluster_topic_enable
        self._broker_topic_enable = broker_topic_enable
        self._trace_topic_enable = trace_topic_enable
        self._msg_trace_topic_name = msg_trace_topic_name
        self._system_topic_names = frozenset(tc.topic_name for tc in self._system_topics())
        super().__init__(config_dir, hub, structlog.get_logger().bind(component="topic_config", broker=broker_name),
                         persist_on_change=persist_on_change)

    # ----- reads -----

    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

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
            "dataVersion": self.data_version.to_json(),
        }

    # ----- mutations (`update` / `delete` come from NamedConfigManager) -----

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
        self._put(tc, "topic_auto_created", producer=remote_addr, default_topic=default_topic)
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
        self._put(tc, "topic_created")
        return tc

    # ----- NamedConfigManager hooks -----

    def _initial_table(self) -> dict[str, TopicConfig]:
        return {tc.topic_name: tc for tc in self._system_topics()}

    def _parse(self, raw: Any, default_name: str) -> TopicConfig:
        return TopicConfig.from_json(raw, default_name=default_name)

    def _log_fields(self, cfg: TopicConfig) -> dict[str, Any]:
        return {"topic": cfg.topic_name, "read_queue_nums": cfg.read_queue_nums,
                "write_queue_nums": cfg.write_queue_nums, "perm": cfg.perm}

    def _name_of(self, cfg: TopicConfig) -> str:
        return cfg.topic_name

    def _renamed(self, cfg: TopicConfig, name: str) -> TopicConfig:
        return dataclasses.replace(cfg, topic_name=name)

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

