"""Between the proto's messages and RocketMQ's stored messages (GrpcConverter, SendMessageActivity's property
building, GrpcValidator), with the checks RocketMQ's proxy applies. Pure.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

from brokerd.message import constants as mc
from brokerd.message.model import MessageExt
from brokerd.proxy import pb
from brokerd.proxy.codes import Code, ProxyError

NAME_RE: Final = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 120
SYSTEM_TOPICS: Final = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC"})
# MessageConst.STRING_HASH_SET: the property keys a user may not set, and that RocketMQ's proxy never shows a
# receiver as user properties (GrpcConverter.buildUserAttributes)
SYSTEM_KEYS: Final = frozenset((
    "TRACE_ON MSG_REGION KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP MIN_OFFSET MAX_OFFSET "
    "BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG RECONSUME_TIME UNIQ_KEY MAX_RECONSUME_TIMES "
    "CONSUME_START_TIME POP_CK POP_CK_OFFSET 1ST_POP_TIME TRAN_PREPARED_QUEUE_OFFSET DUP_INFO EXTEND_UNIQ_INFO "
    "INSTANCE_ID CORRELATION_ID REPLY_TO_CLIENT TTL ARRIVE_TIME PUSH_REPLY_TIME CLUSTER MSG_TYPE "
    "INNER_MULTI_QUEUE_OFFSET TIMER_DELAY_MS TIMER_DELAY_SEC TIMER_DELIVER_MS TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS "
    "TIMER_ROLL_TIMES TIMER_OUT_MS TIMER_DEL_UNIQKEY TIMER_DELAY_LEVEL __BORNHOST BORN_TIMESTAMP DLQ_ORIGIN_TOPIC "
    "DLQ_ORIGIN_MESSAGE_ID __CRC32#").split())
# the brokers' own bookkeeping on stored messages (not a RocketMQ constant): the delivery-bracket id timer and POP
# revive deliveries carry in logs written by brokerd/logbatch.py's property-tagged batches
BATCH_PROPERTY: Final = "__BATCH"
# not shown to a receiver as user properties: STRING_HASH_SET, the keys the proto carries as system properties
# (message group, trace context, transaction id, ...), the brokers' internal ones, and the transient prefix
HIDDEN_KEYS: Final = SYSTEM_KEYS | frozenset((
    mc.SHARDING_KEY, mc.TRACE_CONTEXT, mc.TRANSACTION_ID, mc.CHECK_IMMUNITY_TIME_IN_SECONDS, mc.INNER_NUM,
    mc.INNER_BASE, mc.INNER_MULTI_DISPATCH, mc.FORWARD_QUEUE_ID, mc.REDIRECT, mc.TRANSACTION_CHECK_TIMES,
    "CONSUME_CONTEXT", BATCH_PROPERTY))

TRAN_PREPARED: Final = mc.TRAN_MSG  # MessageConst.PROPERTY_TRANSACTION_PREPARED


@dataclass(frozen=True)
class Limits:
    """The send checks' limits (ProxyConfig's names and defaults)."""

    max_message_size: int = 4 * 1024 * 1024
    max_user_property_size: int = 16 * 1024
    user_property_max_num: int = 128
    max_message_group_size: int = 64
    max_delay_ms: int = 24 * 3600 * 1000
    max_transaction_recovery_s: int = 3600


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Guava's CharMatcher.javaIsoControl


def _control(s: str) -> bool:
    return _CONTROL.search(s) is not None


_VALID_TOPICS: set[str] = set()  # names validate_topic accepted (bounded: cleared when full)


def validate_topic(name: str) -> None:
    if name in _VALID_TOPICS:
        return
    _check_topic(name)
    if len(_VALID_TOPICS) >= 10_000:
        _VALID_TOPICS.clear()
    _VALID_TOPICS.add(name)


def _check_topic(name: str) -> None:
    if not name or not name.strip():
        raise ProxyError(Code.ILLEGAL_TOPIC, "The specified topic is blank")
    if len(name) > TOPIC_MAX_LENGTH:
        raise ProxyError(Code.ILLEGAL_TOPIC, f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.")
    if not NAME_RE.match(name):
        raise ProxyError(Code.ILLEGAL_TOPIC, f"The specified topic[{name}] contains illegal characters, "
                                             f"allowing only {NAME_RE.pattern}")
    if name in SYSTEM_TOPICS or name.startswith("rmq_sys_"):
        raise ProxyError(Code.ILLEGAL_TOPIC, "cannot access system topic")


def validate_group(name: str) -> None:
    if not name or not name.strip():
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "the specified group is blank")
    if len(name) > GROUP_MAX_LENGTH:
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP,
                         f"the specified group[{name}] is longer than group max length: {GROUP_MAX_LENGTH}.")
    if not NAME_RE.match(name):
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"the specified group[{name}] contains illegal characters, "
                                                      f"allowing only {NAME_RE.pattern}")
    if name.startswith("CID_RMQ_SYS_"):
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group")


def validate_tag(tag: str) -> None:
    if tag:
        if not tag.strip():
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
        if "|" in tag:
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
        if _control(tag):
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


@dataclass(slots=True)
class OutgoingMessage:
    """One proto message, ready for SEND_MESSAGE: body, properties, sys flag and its message id."""

    body: bytes
    properties: dict[str, str]
    sys_flag: int
    message_id: str
    deliver_ms: int | None


def _user_properties(msg: Any, limits: Limits) -> tuple[dict[str, str], int]:
    props = dict(msg.user_properties)
    if len(props) > limits.user_property_max_num:
        raise ProxyError(Code.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {limits.user_property_max_num}")
    size = 0
    for k, v in props.items():
        if k in SYSTEM_KEYS:
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}")
        if _control(k):
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character")
        if _control(v):
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character")
        size += len(k.encode()) + len(v.encode())
    return props, size


def _message_group(group: str, limits: Limits) -> None:
    if not group.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace")
    if len(group.encode()) >= limits.max_message_group_size:
        raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {limits.max_message_group_size}")
    if _control(group):
        raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")


def _keys_and_tag(sp: Any, props: dict[str, str]) -> int:
    size = 0
    tag = sp.tag if sp.HasField("tag") else ""
    validate_tag(tag)
    if tag:
        props[mc.TAGS] = tag
        size += len(tag.encode())
    for key in sp.keys:
        if key and not key.strip():
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
        if _control(key):
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
        size += len(key.encode())
    if len(sp.keys):
        props[mc.KEYS] = mc.KEY_SEPARATOR.join(sp.keys)
    return size


def _type_properties(sp: Any, props: dict[str, str], limits: Limits, now_ms: int) -> tuple[int, int | None]:
    """Transaction, delivery time and message group properties; returns (sys flag bits, delivery ms)."""
    flag = 0
    mtype = int(sp.message_type)
    if mtype == 4:  # TRANSACTION
        flag |= mc.TRANSACTION_PREPARED_TYPE
        props[TRAN_PREPARED] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            secs = pb.duration_ms(sp.orphaned_transaction_recovery_duration) // 1000
            if secs > limits.max_transaction_recovery_s:
                raise ProxyError(Code.BAD_REQUEST, "the max transaction recovery time of message is too large, "
                                                   f"max is {limits.max_transaction_recovery_s}")
            props[mc.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(secs)
    deliver_ms = None
    if sp.HasField("delivery_timestamp"):
        deliver_ms = pb.timestamp_ms(sp.delivery_timestamp)
        if deliver_ms - now_ms > limits.max_delay_ms:
            raise ProxyError(Code.ILLEGAL_DELIVERY_TIME,
                             f"the max delay time of message is too large, max is {limits.max_delay_ms}")
        props[mc.TIMER_DELIVER_MS] = str(deliver_ms)
    if sp.HasField("message_group") and sp.message_group:
        _message_group(sp.message_group, limits)
        props[mc.SHARDING_KEY] = sp.message_group
    if int(sp.body_encoding) == 2:  # GZIP
        flag |= mc.COMPRESSED_FLAG
    return flag, deliver_ms


def to_outgoing(msg: Any, producer_group: str, remote: str, limits: Limits, now_ms: int) -> OutgoingMessage:
    """SendMessageActivity.buildMessage: checks, then the stored properties of one proto message."""
    body = bytes(msg.body)
    if not body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if limits.max_message_size > 0 and len(body) > limits.max_message_size:
        raise ProxyError(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {limits.max_message_size}")
    props, size = _user_properties(msg, limits)
    sp = msg.system_properties
    size += _keys_and_tag(sp, props)
    if size > limits.max_user_property_size:
        raise ProxyError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                         f"the total size of user property is too large, max is {limits.max_user_property_size}")
    if not sp.message_id.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[mc.UNIQ_KEY] = sp.message_id
    flag, deliver_ms = _type_properties(sp, props, limits, now_ms)
    props[mc.RECONSUME_TIME] = str(sp.delivery_attempt if sp.HasField("delivery_attempt") else 0)
    props[mc.PGROUP] = producer_group
    if sp.HasField("trace_context") and sp.trace_context:
        props[mc.TRACE_CONTEXT] = sp.trace_context
    props[mc.BORN_HOST] = sp.born_host if sp.born_host.strip() else remote
    if sp.HasField("born_timestamp") and (sp.born_timestamp.seconds or sp.born_timestamp.nanos):
        props[mc.BORN_TIMESTAMP] = str(pb.timestamp_ms(sp.born_timestamp))
    return OutgoingMessage(body, props, flag, sp.message_id, deliver_ms)


def message_type(props: dict[str, str]) -> int:
    """The proto MessageType of stored properties (GrpcConverter / TopicMessageType.parseFromMessageProperty)."""
    if props.get(TRAN_PREPARED) == "true":
        return 4
    if mc.DELAY in props or mc.TIMER_DELIVER_MS in props or mc.TIMER_DELAY_SEC in props or mc.TIMER_DELAY_MS in props:
        return 3
    if mc.SHARDING_KEY in props:
        return 2
    return 1


def resource(name: str, namespace: str = "") -> Any:
    return pb.Resource(name=name, resource_namespace=namespace)


def _host(h: tuple[str, int]) -> str:
    return f"{h[0]}:{h[1]}"


def _delivery_ms(props: dict[str, str], now_ms: int) -> int | None:
    try:
        if mc.TIMER_DELAY_SEC in props:
            return now_ms + int(props[mc.TIMER_DELAY_SEC]) * 1000
        if mc.TIMER_DELIVER_MS in props:
            return int(props[mc.TIMER_DELIVER_MS])
    except ValueError:
        return None
    return None


def _ts(ms: int) -> dict[str, int]:
    """A Timestamp as constructor arguments (cheaper than a Timestamp object copied into its parent)."""
    return {"seconds": ms // 1000, "nanos": (ms % 1000) * 1_000_000}


_OPTIONAL: Final = ((mc.TAGS, "tag"), (mc.SHARDING_KEY, "message_group"), (mc.POP_CK, "receipt_handle"),
                    (mc.TRACE_CONTEXT, "trace_context"))


def message_fields(msg: MessageExt, topic: str, now_ms: int, namespace: str = "") -> dict[str, Any]:
    """GrpcConverter.buildMessage: a stored message as the proto's Message, as constructor arguments (a response
    built around them gets every field in one call, with no Message object copied in); ``topic``: the name the
    client asked for (the stored one may be a retry topic)."""
    props = msg.properties
    body = msg.body
    fields: dict[str, Any] = {
        "message_id": props.get(mc.UNIQ_KEY) or msg.msg_id,
        "body_digest": {"type": 2, "checksum": hashlib.md5(body).hexdigest().upper()},
        "body_encoding": 2 if msg.sys_flag & mc.COMPRESSED_FLAG else 1,
        "message_type": message_type(props),
        "born_timestamp": _ts(msg.born_timestamp),
        "born_host": props.get(mc.BORN_HOST) or _host(msg.born_host),
        "store_timestamp": _ts(msg.store_timestamp),
        "store_host": _host(msg.store_host),
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "delivery_attempt": msg.reconsume_times + 1}
    for key, name in _OPTIONAL:
        if key in props:
            fields[name] = props[key]
    keys = props.get(mc.KEYS)
    if keys:
        fields["keys"] = keys.split(mc.KEY_SEPARATOR)
    deliver = _delivery_ms(props, now_ms)
    if deliver is not None:
        fields["delivery_timestamp"] = _ts(deliver)
    if mc.DLQ_ORIGIN_TOPIC in props and mc.DLQ_ORIGIN_MESSAGE_ID in props:
        fields["dead_letter_queue"] = {"topic": props[mc.DLQ_ORIGIN_TOPIC],
                                       "message_id": props[mc.DLQ_ORIGIN_MESSAGE_ID]}
    user = {k: v for k, v in props.items() if k not in HIDDEN_KEYS and not k.startswith(mc.TRANSIENT_PREFIX)}
    return {"topic": {"name": topic, "resource_namespace": namespace}, "user_properties": user,
            "system_properties": fields, "body": body}


def to_proto(msg: MessageExt, topic: str, now_ms: int, namespace: str = "") -> Any:
    """``message_fields`` as a Message."""
    return pb.Message(**message_fields(msg, topic, now_ms, namespace))
