"""Topic/group names, permission bits and name validation (RocketMQ `TopicValidator`, `PermName`, `MixAll`).

Send-path checks (spec §2.3), in the order the processor applies them:
* `validate_topic(name)` -> error text, answer 29 (regex `^[%|a-zA-Z0-9_-]+$`, not blank, <= 127 chars,
  <= 255 for `%RETRY%`/`%DLQ%` topics);
* `is_not_allowed_send_topic(name)` -> answer 16 ("Sending message to topic[X] is forbidden.");
  `validate_topic(name, for_send=True)` folds both into one error text when the code does not matter.
"""

from __future__ import annotations

import re
from typing import Final

PERM_PRIORITY: Final = 0x8
PERM_READ: Final = 0x4
PERM_WRITE: Final = 0x2
PERM_INHERIT: Final = 0x1

# Anchored with \Z (not $, which also matches before a trailing newline): .match() is safe too.
TOPIC_NAME_REGEX: Final = re.compile(r"^[%|a-zA-Z0-9_-]+\Z")
TOPIC_MAX_LENGTH: Final = 127
RETRY_DLQ_TOPIC_MAX_LENGTH: Final = 255
GROUP_MAX_LENGTH: Final = 255

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
RMQ_SYS_SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_SCHEDULE_TOPIC_V2: Final = "SCHEDULE_TOPIC_XXXX_V2"
RMQ_SYS_BENCHMARK_TOPIC: Final = "BenchmarkTest"
RMQ_SYS_TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
RMQ_SYS_SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
RMQ_SYS_OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
REVIVE_TOPIC_PREFIX: Final = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
SYNC_BROKER_MEMBER_GROUP_PREFIX: Final = SYSTEM_TOPIC_PREFIX + "SYNC_BROKER_MEMBER_"
SCHEDULE_TOPIC_QUEUE_NUM: Final = 18
REVIVE_QUEUE_NUM: Final = 8
BENCHMARK_TOPIC_QUEUE_NUM: Final = 1024

STATIC_SYSTEM_TOPICS: Final = frozenset({
    AUTO_CREATE_TOPIC_KEY_TOPIC, RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_BENCHMARK_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRACE_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_SELF_TEST_TOPIC, RMQ_SYS_OFFSET_MOVED_EVENT, RMQ_SYS_SCHEDULE_TOPIC_V2,
})
NOT_ALLOWED_SEND_TOPICS: Final = frozenset({
    RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_SELF_TEST_TOPIC, RMQ_SYS_OFFSET_MOVED_EVENT,
    RMQ_SYS_SCHEDULE_TOPIC_V2,
})

# Subscription groups every broker has (SubscriptionGroupManager.init); the bool is consumeBroadcastEnable
# as RocketMQ sets it explicitly (the default is True anyway).
TOOLS_CONSUMER_GROUP: Final = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP: Final = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP: Final = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP: Final = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PULL_GROUP: Final = "CID_ONSAPI_PULL"
CID_ONSAPI_PERMISSION_GROUP: Final = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP: Final = "CID_ONSAPI_OWNER"
CID_SYS_RMQ_TRANS: Final = "CID_RMQ_SYS_TRANS"
CID_RMQ_SYS_PREFIX: Final = "CID_RMQ_SYS_"
SYSTEM_GROUPS: Final = (
    TOOLS_CONSUMER_GROUP, FILTERSRV_CONSUMER_GROUP, SELF_TEST_CONSUMER_GROUP, ONS_HTTP_PROXY_GROUP,
    CID_ONSAPI_PULL_GROUP, CID_ONSAPI_PERMISSION_GROUP, CID_ONSAPI_OWNER_GROUP, CID_SYS_RMQ_TRANS,
)


def is_writeable(perm: int) -> bool:
    return (perm & PERM_WRITE) == PERM_WRITE


def is_readable(perm: int) -> bool:
    return (perm & PERM_READ) == PERM_READ


def is_inherited(perm: int) -> bool:
    return (perm & PERM_INHERIT) == PERM_INHERIT


def perm_to_string(perm: int) -> str:
    """RocketMQ `PermName.perm2String`: e.g. 6 -> "RW-", 7 -> "RWX"."""
    return ("R" if is_readable(perm) else "-") + ("W" if is_writeable(perm) else "-") + (
        "X" if is_inherited(perm) else "-")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_or_dlq_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


def is_system_topic(topic: str) -> bool:
    """Static system topics and the `rmq_sys_` prefix; a broker also treats its cluster/broker-name topics as
    system topics (`TopicConfigManager.is_system_topic`)."""
    return topic in STATIC_SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_sys_consumer_group(group: str) -> bool:
    return group.startswith(CID_RMQ_SYS_PREFIX)


def validate_topic(name: str, *, for_send: bool = False) -> str | None:
    """None when `name` is a valid topic name, else the error text (RocketMQ's wording).
    With `for_send`, topics clients may not send to are rejected too (the processor answers 16 for those;
    use `is_not_allowed_send_topic` when the code matters)."""
    if not name or not name.strip():
        return "The specified topic is blank."
    if TOPIC_NAME_REGEX.fullmatch(name) is None:
        return f"The specified topic[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    limit = RETRY_DLQ_TOPIC_MAX_LENGTH if is_retry_or_dlq_topic(name) else TOPIC_MAX_LENGTH
    if len(name) > limit:
        return f"The specified topic[{name}] is longer than topic max length {limit}."
    if for_send and is_not_allowed_send_topic(name):
        return f"Sending message to topic[{name}] is forbidden."
    return None


def validate_group(name: str) -> str | None:
    """None when `name` is a valid consumer/producer group name, else the error text."""
    if not name or not name.strip():
        return "The specified group is blank."
    if TOPIC_NAME_REGEX.fullmatch(name) is None:
        return f"The specified group[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(name) > GROUP_MAX_LENGTH:
        return f"The specified group[{name}] is longer than group max length {GROUP_MAX_LENGTH}."
    return None
