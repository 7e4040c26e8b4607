"""Message request modes (`messageRequestMode.json`): per topic and consumer group, whether RocketMQ 5's remoting
push consumer PULLs or POPs (SET_MESSAGE_REQUEST_MODE 401 sets one, GET_ALL_MESSAGE_REQUEST_MODE 402 lists them,
QUERY_ASSIGNMENT 400 answers the mode with each assigned queue; `mqadmin setConsumeMode`).

Table key `topic@group` -> `MessageRequestMode`; the change record's key is the same. Every mutation passes
`ConfigManager._commit` (one `message_request_mode` change record, replicated to slaves like the other tables,
RIP-81) and persists. The file is this broker's document; `decode` also reads RocketMQ's own shape
(`{"messageRequestModeMap": {topic: {group: {...}}}}`, what 402 answers) so a RocketMQ file or a master's 402 answer
can be adopted. Not thread-safe: event loop thread only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from .hook import KIND_MESSAGE_REQUEST_MODE, OP_DELETE, OP_PUT, ChangeValue, MetadataChange, MetadataHub
from .jsonfields import get_int, get_object, get_str
from .manager import ConfigManager, TableFormat
from .version import DataVersion

MESSAGE_REQUEST_MODE_FILE: Final = "messageRequestMode.json"
MODES: Final = ("PULL", "POP")
SEPARATOR: Final = "@"


@dataclass(frozen=True, slots=True)
class MessageRequestMode:
    """SetMessageRequestModeRequestBody."""

    topic: str
    group: str
    mode: str = "PULL"
    pop_share_queue_num: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "consumerGroup": self.group, "mode": self.mode,
                "popShareQueueNum": self.pop_share_queue_num}

    @classmethod
    def from_json(cls, d: Any, ctx: str = "messageRequestMode") -> MessageRequestMode:
        if not isinstance(d, dict):
            raise ValueError(f"{ctx}: expected an object")
        m = cls(get_str(d, "topic", "", ctx), get_str(d, "consumerGroup", "", ctx), get_str(d, "mode", "PULL", ctx),
                get_int(d, "popShareQueueNum", 0, ctx))
        m.validate(ctx)
        return m

    def validate(self, ctx: str = "messageRequestMode") -> None:
        if not self.topic or not self.group or SEPARATOR in self.topic or SEPARATOR in self.group:
            raise ValueError(f"{ctx}: topic and consumerGroup must be non-empty and free of '@'")
        if self.mode not in MODES:
            raise ValueError(f"{ctx}: mode must be PULL or POP, got {self.mode!r}")

    @property
    def key(self) -> str:
        return self.topic + SEPARATOR + self.group


class MessageRequestModeManager(ConfigManager[str, MessageRequestMode]):
    FORMAT = TableFormat(KIND_MESSAGE_REQUEST_MODE, MESSAGE_REQUEST_MODE_FILE, "messageRequestModeTable",
                         "messageRequestMode")
    ROCKETMQ_FIELD: Final = "messageRequestModeMap"

    def __init__(self, config_dir: str, hub: MetadataHub, *, persist_on_change: bool = True) -> None:
        super().__init__(config_dir, hub, persist_on_change=persist_on_change)
        self._log = structlog.get_logger().bind(component="message_request_mode")

    def get(self, topic: str, group: str) -> MessageRequestMode | None:
        return self._table.get(topic + SEPARATOR + group)

    def all(self) -> Mapping[str, MessageRequestMode]:
        return self._view

    def set(self, m: MessageRequestMode) -> None:
        """Create or replace the mode of ``m.topic``/``m.group``; ValueError for a bad one."""
        m.validate()
        self._commit(m.key, OP_PUT, m)
        self._log.info("message_request_mode_set", topic=m.topic, group=m.group, mode=m.mode,
                       pop_share_queue_num=m.pop_share_queue_num)

    def delete(self, topic: str, group: str) -> bool:
        key = topic + SEPARATOR + group
        if key not in self._table:
            return False
        self._commit(key, OP_DELETE)
        return True

    def rocketmq_json(self) -> dict[str, Any]:
        """GET_ALL_MESSAGE_REQUEST_MODE's body (MessageRequestModeManager.encode): topic -> group -> body."""
        out: dict[str, dict[str, Any]] = {}
        for m in self._table.values():
            out.setdefault(m.topic, {})[m.group] = m.to_json()
        return {self.ROCKETMQ_FIELD: out}

    # ----- codec hooks -----

    def _decode_state(self, doc: Any) -> tuple[dict[str, MessageRequestMode], DataVersion]:
        if isinstance(doc, dict) and self.ROCKETMQ_FIELD in doc and self.FORMAT.table_field not in doc:
            nested = doc[self.ROCKETMQ_FIELD] or {}
            if not isinstance(nested, dict):
                raise ValueError(f"messageRequestMode.{self.ROCKETMQ_FIELD}: expected an object")
            table: dict[str, MessageRequestMode] = {}
            for topic, groups in nested.items():
                if not isinstance(groups, dict):
                    raise ValueError(f"messageRequestMode.{self.ROCKETMQ_FIELD}[{topic}]: expected an object")
                for group, raw in groups.items():
                    m = MessageRequestMode.from_json({"topic": topic, "consumerGroup": group, **(raw or {})})
                    table[m.key] = m
            return table, DataVersion.from_json(doc.get("dataVersion"))
        if not isinstance(doc, dict):
            raise ValueError("messageRequestMode: expected an object")
        flat = dict(self._decode_entry(n, raw) for n, raw in get_object(doc, self.FORMAT.table_field,
                                                                           self.FORMAT.context).items())
        return flat, DataVersion.from_json(doc.get("dataVersion"))

    def _encode_entry(self, key: str, value: MessageRequestMode) -> tuple[str, Any]:
        return key, value.to_json()

    def _decode_entry(self, name: str, raw: Any) -> tuple[str, MessageRequestMode]:
        m = MessageRequestMode.from_json(raw, f"messageRequestMode[{name}]")
        return m.key, m

    def _record_value(self, value: MessageRequestMode) -> ChangeValue:
        return value.to_json()

    def _key_from_record(self, change: MetadataChange) -> str:
        if SEPARATOR not in change.key:
            raise ValueError(f"message request mode change {change.seq}: key must be topic@group")
        return change.key

    def _value_from_record(self, key: str, change: MetadataChange) -> MessageRequestMode:
        m = MessageRequestMode.from_json(change.value, f"message request mode change {change.seq}")
        if m.key != key:
            raise ValueError(f"message request mode change {change.seq}: value names {m.key}, key {key}")
        return m
