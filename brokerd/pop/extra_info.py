"""RocketMQ's POP strings, exactly as its broker and clients spell them (``ExtraInfoUtil``, ``KeyBuilder``,
``BatchAck``). Pure code.

A popped message's checkpoint string (the ``POP_CK`` property, the ``extraInfo`` of ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME; the 5.x proxy appends the commit-log offset as a ninth field)::

    ckQueueOffset popTime invisibleTime reviveQid topicMark brokerName queueId msgQueueOffset

``topicMark`` is ``0`` for the topic itself, ``1`` for a v1 POP retry topic (``%RETRY%group_topic``) or any other
``%RETRY%`` topic, ``2`` for a v2 one (``%RETRY%group+topic``); ``reviveQid`` 999 marks a FIFO (order) pop.

A POP answer's header describes each queue it read, ``;``-separated, fields space-separated:
``startOffsetInfo`` ``mark queueId startOffset``, ``msgOffsetInfo`` ``mark queueId o1,o2,...`` and, for FIFO,
``orderCountInfo`` ``mark qo<queueId>%<offset> count`` per message then ``mark queueId minCount`` per queue.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

SEP: Final = " "
NORMAL_TOPIC: Final = "0"
RETRY_TOPIC: Final = "1"
RETRY_TOPIC_V2: Final = "2"
MARKS: Final = frozenset({NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2})
RETRY_PREFIX: Final = "%RETRY%"
POP_ORDER_REVIVE_QUEUE: Final = 999
CK_FIELDS_MIN: Final = 6  # what ACK / CHANGE_MESSAGE_INVISIBLETIME read (queue id and offset come from the header)


class ExtraInfoError(ValueError):
    """A checkpoint string or answer field that does not parse (RocketMQ throws; the request gets SYSTEM_ERROR)."""


# ---------------------------------------------------------------------------------------------- topic names


def retry_topic_v1(topic: str, group: str) -> str:
    return f"{RETRY_PREFIX}{group}_{topic}"


def retry_topic_v2(topic: str, group: str) -> str:
    return f"{RETRY_PREFIX}{group}+{topic}"


def pop_retry_topic(topic: str, group: str, v2: bool) -> str:
    """KeyBuilder.buildPopRetryTopic: the POP group's retry topic of ``topic`` (v1 unless enableRetryTopicV2)."""
    return retry_topic_v2(topic, group) if v2 else retry_topic_v1(topic, group)


def is_pop_retry_v2(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX) and "+" in topic


def topic_mark(topic: str) -> str:
    """ExtraInfoUtil.getRetry."""
    if is_pop_retry_v2(topic):
        return RETRY_TOPIC_V2
    return RETRY_TOPIC if topic.startswith(RETRY_PREFIX) else NORMAL_TOPIC


def real_topic(topic: str, group: str, mark: str) -> str:
    """ExtraInfoUtil.getRealTopic: the topic a checkpoint names (the retry topic for marks 1 and 2)."""
    if mark == NORMAL_TOPIC:
        return topic
    if mark == RETRY_TOPIC:
        return retry_topic_v1(topic, group)
    if mark == RETRY_TOPIC_V2:
        return retry_topic_v2(topic, group)
    raise ExtraInfoError("getRetry fail, format is wrong")


def normal_topic(topic: str, group: str) -> str:
    """KeyBuilder.parseNormalTopic(topic, cid): the topic a POP retry topic of ``group`` retries."""
    if not topic.startswith(RETRY_PREFIX):
        return topic
    v2 = f"{RETRY_PREFIX}{group}+"
    if topic.startswith(v2):
        return topic[len(v2):]
    return topic[len(f"{RETRY_PREFIX}{group}_"):]


# ---------------------------------------------------------------------------------------------- checkpoint strings


class ExtraInfo(NamedTuple):  # a tuple: built once per ACK, cheaply
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    mark: str
    broker_name: str
    queue_id: int = -1  # -1: not carried (six-field strings)
    msg_offset: int = -1

    @property
    def is_order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    @property
    def deadline(self) -> int:
        """When the message becomes visible again (the handle expires)."""
        return self.pop_time + self.invisible_time


def build_extra_info(ck_offset: int, pop_time: int, invisible_time: int, revive_qid: int, topic: str,
                     broker_name: str, queue_id: int, msg_offset: int | None = None) -> str:
    """ExtraInfoUtil.buildExtraInfo (seven fields, eight with ``msg_offset``)."""
    parts = [str(ck_offset), str(pop_time), str(invisible_time), str(revive_qid), topic_mark(topic), broker_name,
             str(queue_id)]
    if msg_offset is not None:
        parts.append(str(msg_offset))
    return SEP.join(parts)


_FIELDS: Final = ("ckQueueOffset", "popTime", "invisibleTime", "reviveQid", "", "", "queueId", "queueOffset")


def parse_extra_info(text: str | None) -> ExtraInfo:
    """The fields ACK / CHANGE_MESSAGE_INVISIBLETIME read; ExtraInfoError names what is wrong."""
    if text is None or not text.strip():
        raise ExtraInfoError("split extraInfo is null")
    parts = text.split(SEP)
    n = len(parts)
    if n < CK_FIELDS_MIN:
        raise ExtraInfoError(f"getBrokerName fail, extraInfoStrs length {n}")
    try:
        ck, pop_time, invisible, rqid = int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
        qid = int(parts[6]) if n > 6 else -1
        off = int(parts[7]) if n > 7 else -1
    except ValueError:
        bad = next(i for i in (0, 1, 2, 3, 6, 7) if i < n and not _is_int(parts[i]))
        raise ExtraInfoError(f"{_FIELDS[bad]} is not a number: {parts[bad][:40]!r}") from None
    if parts[4] not in MARKS:
        raise ExtraInfoError("getRetry fail, format is wrong")
    if not parts[5]:
        raise ExtraInfoError("brokerName is empty")
    if ck < 0 or pop_time < 0 or invisible < 0:
        raise ExtraInfoError("negative offset or time in extraInfo")
    return ExtraInfo(ck, pop_time, invisible, rqid, parts[4], parts[5], qid, off)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- answer fields


class PopInfo:
    """The three per-queue fields of a POP answer, built queue by queue as the pop reads them."""

    __slots__ = ("start", "msgs", "orders")

    def __init__(self) -> None:
        self.start: list[str] = []
        self.msgs: list[str] = []
        self.orders: list[str] = []

    def add_queue(self, topic: str, queue_id: int, start_offset: int, offsets: list[int]) -> None:
        head = f"{topic_mark(topic)}{SEP}{queue_id}{SEP}"
        self.start.append(f"{head}{start_offset}")
        self.msgs.append(head + ("%d," * len(offsets) % tuple(offsets))[:-1])  # the offsets joined by ','; fast

    def add_order_counts(self, topic: str, queue_id: int, counts: dict[int, int]) -> None:
        """ConsumerOrderInfoManager.update: each popped offset's previous deliveries, then the queue's minimum
        (0 when a message is popped for the first time)."""
        mark = topic_mark(topic)
        for offset, n in counts.items():
            if n > 0:
                self.orders.append(f"{mark}{SEP}qo{queue_id}%{offset}{SEP}{n}")
        least = min(counts.values()) if counts else 0
        self.orders.append(f"{mark}{SEP}{queue_id}{SEP}{least}")

    def header(self, order: bool) -> dict[str, str]:
        out = {"startOffsetInfo": ";".join(self.start), "msgOffsetInfo": ";".join(self.msgs)}
        if order:
            out["orderCountInfo"] = ";".join(self.orders)
        return out


def parse_info(info: str | None, what: str) -> dict[str, list[str]]:
    """ExtraInfoUtil.parse*Info: ``mark@queue`` (or ``mark@qo<q>%<offset>``) -> the third field split by ','."""
    out: dict[str, list[str]] = {}
    if not info:
        return out
    for one in info.split(";"):
        parts = one.split(SEP)
        if len(parts) != 3:
            raise ExtraInfoError(f"parse {what} error, {info[:80]}")
        key = f"{parts[0]}@{parts[1]}"
        if key in out:
            raise ExtraInfoError(f"parse {what} error, duplicate, {info[:80]}")
        out[key] = parts[2].split(",")
    return out


# ---------------------------------------------------------------------------------------------- BATCH_ACK body


class BatchAck(NamedTuple):
    """One entry of BatchAckMessageRequestBody.acks (fastjson: short names, long ones accepted)."""

    group: str
    topic: str
    mark: str
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_time: int
    bits: tuple[int, ...]  # the set bit indexes: offsets start_offset + i

    @property
    def offsets(self) -> Sequence[int]:
        bits, start = self.bits, self.start_offset
        if bits and bits[-1] == len(bits) - 1:  # bits 0..k-1 (ascending, distinct): one run
            return range(start, start + len(bits))
        return [start + i for i in bits]


def _pick(d: dict[str, Any], short: str, long: str) -> Any:
    return d[short] if short in d else d.get(long)


def _int_of(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ExtraInfoError(f"batch ack: {name} must be a number")
    try:
        return int(v)
    except ValueError:
        raise ExtraInfoError(f"batch ack: {name} is not a number") from None


def bitset_indexes(raw: Any) -> tuple[int, ...]:
    """java.util.BitSet.valueOf(bytes) as fastjson writes it (base64 text; a number array is accepted too)."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ExtraInfoError("batch ack: bitSet is not base64") from None
    elif isinstance(raw, list) and all(isinstance(b, int) and not isinstance(b, bool) for b in raw):
        data = bytes(b & 0xFF for b in raw)
    else:
        raise ExtraInfoError("batch ack: bitSet must be base64 text or a byte array")
    if len(data) > 4096:
        raise ExtraInfoError("batch ack: bitSet too large")
    n = int.from_bytes(data, "little")
    if n & (n + 1) == 0:  # bits 0..k-1: every message of a pop acknowledged
        return tuple(range(n.bit_length()))
    bits = _BITS
    return tuple([i * 8 + b for i, byte in enumerate(data) if byte for b in bits[byte]])


_BITS: Final = tuple(tuple(b for b in range(8) if n >> b & 1) for n in range(256))  # a byte's set bits


def parse_batch_ack(d: Any) -> BatchAck:
    if not isinstance(d, dict):
        raise ExtraInfoError("batch ack: an entry must be an object")
    fast = _short_batch_ack(d)
    if fast is not None:
        return fast
    group, topic, mark = _pick(d, "c", "consumerGroup"), _pick(d, "t", "topic"), _pick(d, "r", "retry")
    if not isinstance(group, str) or not group or not isinstance(topic, str) or not topic:
        raise ExtraInfoError("batch ack: consumerGroup and topic are required")
    mark = str(mark) if mark is not None else NORMAL_TOPIC
    if mark not in MARKS:
        raise ExtraInfoError("getRetry fail, format is wrong")
    return BatchAck(group, topic, mark, _int_of(_pick(d, "so", "startOffset"), "startOffset"),
                    _int_of(_pick(d, "q", "queueId"), "queueId"), _int_of(_pick(d, "rq", "reviveQueueId"), "reviveQueueId"),
                    _int_of(_pick(d, "pt", "popTime"), "popTime"), _int_of(_pick(d, "it", "invisibleTime"), "invisibleTime"),
                    bitset_indexes(_pick(d, "b", "bitSet")))


def _short_batch_ack(d: dict[str, Any]) -> BatchAck | None:
    """The entry as the Java client writes it (short names, numbers as numbers, a known mark); None otherwise
    (``parse_batch_ack`` reads it field by field)."""
    try:
        group, topic, so, q, rq, pt, it = d["c"], d["t"], d["so"], d["q"], d["rq"], d["pt"], d["it"]
    except KeyError:
        return None
    mark = d.get("r", NORMAL_TOPIC)
    if (type(group) is not str or not group or type(topic) is not str or not topic or type(so) is not int
            or type(q) is not int or type(rq) is not int or type(pt) is not int or type(it) is not int
            or type(mark) is not str or mark not in MARKS):  # fmt: skip
        return None
    return BatchAck(group, topic, mark, so, q, rq, pt, it, bitset_indexes(d.get("b")))


def encode_bitset(indexes: list[int]) -> str:
    """The inverse of ``bitset_indexes`` (tests and tools): BitSet.toByteArray, base64."""
    if not indexes:
        return ""
    data = bytearray(max(indexes) // 8 + 1)
    for i in indexes:
        data[i // 8] |= 1 << (i % 8)
    return base64.b64encode(bytes(data)).decode()
