"""Result types of the message store API (RocketMQ names)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    # replication outcomes (the put is stored locally; RocketMQ's PutMessageStatus names)
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"


@dataclass(slots=True)
class PutMessageResult:
    status: PutStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_id: str = ""
    queue_offset: int = 0
    store_timestamp: int = 0
    msg_num: int = 0
    end_offset: int = 0  # commit-log end of the last record (what a flush / replica wait is for)

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    buffers: list[bytes | memoryview] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    message_count: int = 0
    buffer_total_size: int = 0
    queue_offsets: list[int] = field(default_factory=list)


@dataclass(slots=True)
class QueryMessageResult:
    buffers: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
