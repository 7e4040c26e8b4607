"""Metadata change records (RIP-81): what a master writes into its own commit log, one message per change, on
the system topics RocketMQ names, so the records ride replication like any message.

A record: kind (topics / groups / consumer offsets / delay offsets / message request modes), change type CREATED / UPDATED / DELETED,
key, value (topic/group JSON in RocketMQ's camelCase; ``{queueId: offset}`` of the changed queues for consumer
offsets; an int for delay offsets; None for a delete), the table's DataVersion after the change, and the
master's wall-clock time. Encoded as msgpack (the message body), one queue (0) per topic.

Keys are the change-record keys of ``brokerd.metadata`` (``MetadataChange.key``): topic name, group name,
``group@topic``, ``str(level)``, ``topic@group`` (request modes). Pure code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgpack

from brokerd.metadata.hook import (
    KIND_CONSUMER_OFFSET,
    KIND_DELAY_OFFSET,
    KIND_MESSAGE_REQUEST_MODE,
    KIND_SUBSCRIPTION_GROUP,
    KIND_TOPIC,
    OP_DELETE,
    OP_PUT,
)

TOPIC_CONFIG_SYNC: Final = "RMQ_SYS_TOPIC_CONFIG_SYNC"
CONSUMER_OFFSET_SYNC: Final = "RMQ_SYS_CONSUMER_OFFSET_SYNC"
DELAY_OFFSET_SYNC: Final = "RMQ_SYS_DELAY_OFFSET_SYNC"
SUBSCRIPTION_GROUP_SYNC: Final = "RMQ_SYS_SUBSCRIPTION_GROUP_SYNC"
MESSAGE_REQUEST_MODE_SYNC: Final = "RMQ_SYS_MESSAGE_REQUEST_MODE_SYNC"  # ours: POP/PULL modes (401)

SYNC_TOPIC_OF: Final = {KIND_TOPIC: TOPIC_CONFIG_SYNC, KIND_SUBSCRIPTION_GROUP: SUBSCRIPTION_GROUP_SYNC,
                        KIND_CONSUMER_OFFSET: CONSUMER_OFFSET_SYNC, KIND_DELAY_OFFSET: DELAY_OFFSET_SYNC,
                        KIND_MESSAGE_REQUEST_MODE: MESSAGE_REQUEST_MODE_SYNC}
KIND_OF_TOPIC: Final = {t: k for k, t in SYNC_TOPIC_OF.items()}
SYNC_TOPICS: Final = frozenset(SYNC_TOPIC_OF.values())

CREATED: Final = "CREATED"
UPDATED: Final = "UPDATED"
DELETED: Final = "DELETED"
CHANGE_TYPES: Final = frozenset({CREATED, UPDATED, DELETED})

RECORD_FORMAT: Final = 1


@dataclass(frozen=True, slots=True)
class SyncRecord:
    kind: str
    change: str  # CREATED / UPDATED / DELETED
    key: str
    value: Any
    data_version: dict[str, int]
    timestamp: int
    log_offset: int = -1  # commit-log physical offset of the message carrying it (when read from a log)

    @property
    def op(self) -> str:
        return OP_DELETE if self.change == DELETED else OP_PUT

    @property
    def topic(self) -> str:
        return SYNC_TOPIC_OF[self.kind]

    def encode(self) -> bytes:
        body = [RECORD_FORMAT, self.kind, self.change, self.key, self.value, self.data_version, self.timestamp]
        out: bytes = msgpack.packb(body, use_bin_type=True)
        return out

    @classmethod
    def decode(cls, data: bytes, log_offset: int = -1) -> SyncRecord:
        """Inverse of ``encode``; anything malformed raises ValueError."""
        try:
            body = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several unrelated exception types
            raise ValueError(f"metadata sync record is not valid msgpack: {e}") from e
        if not isinstance(body, list) or len(body) != 7 or body[0] != RECORD_FORMAT:
            raise ValueError("metadata sync record: unknown layout or format")
        _, kind, change, key, value, dv, ts = body
        rec = cls(kind, change, key, value, dv, ts, log_offset)
        rec.validate()
        return rec

    def validate(self) -> None:
        if self.kind not in SYNC_TOPIC_OF:
            raise ValueError(f"metadata sync record: unknown kind {self.kind!r}")
        if self.change not in CHANGE_TYPES:
            raise ValueError(f"metadata sync record: unknown change type {self.change!r}")
        if not isinstance(self.key, str) or not self.key:
            raise ValueError("metadata sync record: key must be a non-empty string")
        if not isinstance(self.data_version, dict) or not isinstance(self.timestamp, int):
            raise ValueError("metadata sync record: bad data version or timestamp")
        if (self.change == DELETED) != (self.value is None):
            raise ValueError("metadata sync record: a delete carries no value, a create/update needs one")
        if self.kind == KIND_CONSUMER_OFFSET and self.value is not None:
            if not isinstance(self.value, dict) or not all(
                    isinstance(q, int) and isinstance(o, int) for q, o in self.value.items()):  # fmt: skip
                raise ValueError("metadata sync record: a consumer offset value is {queueId: offset}")
        if self.kind == KIND_DELAY_OFFSET and self.value is not None and not isinstance(self.value, int):
            raise ValueError("metadata sync record: a delay offset value is an int")
        if self.kind in (KIND_TOPIC, KIND_SUBSCRIPTION_GROUP, KIND_MESSAGE_REQUEST_MODE) and self.value is not None:
            if not isinstance(self.value, dict):
                raise ValueError("metadata sync record: a topic/group/request-mode value is an object")
