"""The message model: a message about to be stored (``MessageInner``) and a decoded stored record
(``MessageExt``)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from brokerd.message.constants import TAGS
from brokerd.message.javahash import tags_code_of
from brokerd.message.properties import message_keys


@dataclass(slots=True)
class MessageInner:
    """A message about to be stored (the broker-side ``MessageExtBrokerInner``)."""

    topic: str
    queue_id: int
    body: bytes
    flag: int
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int = 0
    store_timestamp: int = 0


@dataclass(slots=True)
class MessageExt:
    """A decoded stored record."""

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)
    msg_id: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return message_keys(self.properties)

    def to_inner(self, topic: str, queue_id: int, properties: dict[str, str], sys_flag: int) -> MessageInner:
        """This stored message, to be stored again under ``topic``/``queue_id`` (delay and transaction services)."""
        return MessageInner(topic=topic, queue_id=queue_id, body=self.body, flag=self.flag, properties=properties,
                            sys_flag=sys_flag, born_timestamp=self.born_timestamp, born_host=self.born_host,
                            store_host=self.store_host, reconsume_times=self.reconsume_times,
                            tags_code=tags_code_of(properties.get(TAGS)))  # fmt: skip


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF
