"""Receipt handles, as RocketMQ's broker, client and proxy spell them (ExtraInfoUtil, ReceiptHandle,
MQClientAPIImpl.processPopResponse, RecallMessageHandle). Pure.

A POP answer's header carries ``popTime``, ``invisibleTime``, ``reviveQid`` and per queue ``startOffsetInfo``,
``msgOffsetInfo``, ``orderCountInfo``; each popped message gets its checkpoint string (the ``POP_CK``
property)::

    ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId msgQueueOffset

(``topicType``: 0 the topic, 1 a v1 retry topic ``%RETRY%group_topic``... as ExtraInfoUtil.getRetry has it) and
the endpoint hands the client that string plus `` commitLogOffset`` (ReceiptHandle's ninth field), which the
broker's ACK / CHANGE_MESSAGE_INVISIBLETIME accept as ``extraInfo``.

The strings themselves are spelled by the broker's pure codecs, `brokerd.pop.extra_info` and
`brokerd.timer.handle` (one format, written by the broker and read here); this module adds the client's side.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokerd.message.model import MessageExt
from brokerd.pop.extra_info import (
    NORMAL_TOPIC,
    POP_ORDER_REVIVE_QUEUE,
    RETRY_TOPIC,
    RETRY_TOPIC_V2,
    SEP,
    build_extra_info,
    parse_info,
    retry_topic_v1,
    retry_topic_v2,
)
from brokerd.pop.extra_info import topic_mark as topic_type
from brokerd.timer import handle as recall
from brokerd.timer.handle import RecallHandle

__all__ = ["HandleError", "PopAnswer", "RecallHandle", "ReceiptHandle", "assign_handles", "build_extra_info",
           "build_recall_handle", "decode_handle", "decode_recall_handle", "topic_type", "with_commit_log_offset"]


class HandleError(ValueError):
    """A receipt or recall handle that does not parse."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    start_offset: int
    retrieve_time: int
    invisible_time: int
    revive_queue_id: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int
    text: str

    @property
    def next_visible_time(self) -> int:
        return self.retrieve_time + self.invisible_time

    def expired(self, now_ms: int) -> bool:
        return self.next_visible_time <= now_ms

    @property
    def is_order(self) -> bool:
        return self.revive_queue_id == POP_ORDER_REVIVE_QUEUE

    def real_topic(self, topic: str, group: str) -> str:
        if self.topic_type == RETRY_TOPIC:
            return retry_topic_v1(topic, group)
        if self.topic_type == RETRY_TOPIC_V2:
            return retry_topic_v2(topic, group)
        return topic


def decode_handle(text: str) -> ReceiptHandle:
    """ReceiptHandle.decode: eight or nine space-separated fields; HandleError names what is wrong."""
    parts = text.split(SEP)
    if len(parts) < 8:
        raise HandleError(f"receipt handle has {len(parts)} fields, at least 8 expected")
    try:
        nums = [int(parts[i]) for i in (0, 1, 2, 3, 6, 7)]
        clo = int(parts[8]) if len(parts) >= 9 else -1
    except ValueError:
        raise HandleError("receipt handle has a non-numeric field") from None
    if parts[4] not in (NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2) or not parts[5]:
        raise HandleError("receipt handle has a bad topic type or broker name")
    return ReceiptHandle(nums[0], nums[1], nums[2], nums[3], parts[4], parts[5], nums[4], nums[5], clo, text)


def with_commit_log_offset(extra_info: str, commit_log_offset: int) -> str:
    """ConsumerProcessor.createHandle: the handle the client gets."""
    return f"{extra_info}{SEP}{commit_log_offset}"


@dataclass(frozen=True, slots=True)
class PopAnswer:
    """The header of a POP_MESSAGE answer (PopMessageResponseHeader)."""

    pop_time: int
    invisible_time: int
    revive_qid: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


def _parse(info: str | None, what: str) -> dict[str, list[str]]:
    try:
        return parse_info(info, what)
    except ValueError as e:
        raise HandleError(str(e)) from None


def assign_handles(msgs: list[MessageExt], answer: PopAnswer, broker_name: str, order: bool) -> None:
    """Set each popped message's POP_CK (unless the broker already did) as MQClientAPIImpl.processPopResponse
    does, append the commit-log offset (the client's receipt handle), and, for FIFO, the delivery count."""
    starts = {k: int(v[0]) for k, v in _parse(answer.start_offset_info, "startOffsetInfo").items()}
    offsets = {k: [int(x) for x in v] for k, v in _parse(answer.msg_offset_info, "msgOffsetInfo").items()}
    counts = {k: int(v[0]) for k, v in _parse(answer.order_count_info, "orderCountInfo").items()}
    sorted_offsets: dict[str, list[int]] = {}
    for msg in msgs:
        ck = msg.properties.get("POP_CK")
        ttype = ck.split(SEP)[4] if ck and len(ck.split(SEP)) > 4 else topic_type(msg.topic)
        sorted_offsets.setdefault(f"{ttype}@{msg.queue_id}", []).append(msg.queue_offset)
    for msg in msgs:
        ck = msg.properties.get("POP_CK")
        if ck is None:
            key = f"{topic_type(msg.topic)}@{msg.queue_id}"
            if not starts:
                ck = build_extra_info(msg.queue_offset, answer.pop_time, answer.invisible_time, answer.revive_qid,
                                      msg.topic, broker_name, msg.queue_id, msg.queue_offset)
            else:
                idx = sorted_offsets[key].index(msg.queue_offset)
                listed = offsets.get(key)
                msg_offset = listed[idx] if listed is not None and idx < len(listed) else msg.queue_offset
                ck = build_extra_info(starts.get(key, msg.queue_offset), answer.pop_time, answer.invisible_time,
                                      answer.revive_qid, msg.topic, broker_name, msg.queue_id, msg_offset)
            if order:
                n = counts.get(f"{topic_type(msg.topic)}@qo{msg.queue_id}%{msg.queue_offset}", counts.get(key))
                if n is not None and n > 0:
                    msg.reconsume_times = n
        msg.properties.setdefault("1ST_POP_TIME", str(answer.pop_time))
        msg.properties["POP_CK"] = with_commit_log_offset(ck, msg.commit_log_offset)


# -- recall handles (RecallMessageHandle.HandleV1) --------------------------------------------------------


def build_recall_handle(topic: str, broker_name: str, deliver_ms: int, message_id: str) -> str:
    return recall.encode_handle(topic, broker_name, str(deliver_ms), message_id)


def decode_recall_handle(handle: str) -> RecallHandle:
    try:
        return recall.decode_handle(handle)
    except ValueError as e:
        raise HandleError(str(e)) from None
