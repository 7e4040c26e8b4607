"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brokerd import message as m
from brokerd.message import MessageInner
from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX, RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, dlq_topic
from brokerd.metadata.topic import PERM_WRITE, TopicConfig, validate_topic
from brokerd.native import native
from brokerd.processors.admission import SendAdmission
from brokerd.processors.flow_control import FlowControl
from brokerd.processors.put_codes import PUT_STATUS_CODES, STORED_CODES
from brokerd.processors.send_lane import SendLane
from brokerd.processors.transaction import is_half_request, to_half
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.message_store import PutMessageResult, PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

NOT_ALLOWED_SEND_TOPICS = frozenset({RMQ_SYS_SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                     "RMQ_SYS_TRACE_TOPIC_NOT_ALLOWED",
                                     # the timer service's topics (brokerd/timer/core.py): only it writes there
                                     "rmq_sys_wheel_timer", "rmq_sys_wheel_timer_progress"})
# Field keys of SendMessageRequestHeader (code 10) and SendMessageRequestHeaderV2 (310/320), in the same order.
V1_FIELDS = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
             "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch")
V2_FIELDS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m")

@dataclass(slots=True)
class SendHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool


def _int(cmd: RemotingCommand, key: str, default: int) -> int:
    v = cmd.ext.get(key)
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        return cmd.int_field(key)  # raises HeaderError naming the field, or parses "3.0"


def parse_send_header(cmd: RemotingCommand) -> SendHeader:
    f = V1_FIELDS if cmd.code == 10 else V2_FIELDS
    ext = cmd.ext
    topic = ext.get(f[1])
    if not topic:
        raise HeaderError(f"missing header field {f[1]!r} (topic)")
    mrt = ext.get(f[11])
    batch = ext.get(f[12])
    g = ext.get
    try:  # fast path: plain decimal strings (what every client sends); an empty/missing field is the default
        nums = (int(g(f[3]) or 4), int(g(f[4]) or -1), int(g(f[5]) or 0), int(g(f[6]) or 0), int(g(f[7]) or 0),
                int(g(f[9]) or 0))
    except ValueError:  # "3.0" or garbage: field by field, errors name the field
        nums = (_int(cmd, f[3], 4), _int(cmd, f[4], -1), _int(cmd, f[5], 0), _int(cmd, f[6], 0), _int(cmd, f[7], 0),
                _int(cmd, f[9], 0))
    return SendHeader(
        producer_group=g(f[0]) or "",
        topic=topic,
        default_topic=g(f[2]) or "TBW102",
        default_topic_queue_nums=nums[0],
        queue_id=nums[1],
        sys_flag=nums[2],
        born_timestamp=nums[3],
        flag=nums[4],
        properties=g(f[8]) or "",
        reconsume_times=nums[5],
        max_reconsume_times=_int(cmd, f[11], 16) if mrt and cmd.version >= 121 else None,
        batch=batch.lower() in ("true", "1") if batch else cmd.code == 320,
    )


class SendProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.cluster = broker.cfg.broker_cluster_name
        self.store_host = (broker.cfg.broker_ip1, broker.cfg.listen_port)
        self._valid_topics: set[str] = set()
        self._tag_codes: dict[str, int] = {}
        self.admission = SendAdmission(lambda: broker.cfg, self._flushed)  # overload shedding, shared with the lane
        self.flow = FlowControl(self.admission)  # refused connections are not read for a while
        self.lane = (SendLane(broker, NOT_ALLOWED_SEND_TOPICS, self.admission, self.flow, self.lane_decision)
                     if native is not None else None)

    def _flushed(self) -> int | None:
        """The log offset durable so far when sends wait for the disk flush (SYNC_FLUSH), else None."""
        flush = self.broker.acks.flush
        return flush.flushed_offset if flush.sync_flush else None

    def tags_code(self, tags: str | None) -> int:
        if not tags:
            return 0
        code = self._tag_codes.get(tags)
        if code is None:
            if len(self._tag_codes) > 65536:
                self._tag_codes.clear()
            code = self._tag_codes[tags] = m.tags_code_of(tags)
        return code

    def handlers(self) -> dict[int, object]:
        return {10: self.process, 310: self.process, 320: self.process}

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | object:
        busy = self.admission.refusal(time.monotonic(), conn.arrived)
        if busy is not None:  # overload: answered at once, not stored; the connection may not be read for a while
            self.admission.refuse()
            self.flow.refused(conn)
            return cmd.response(ResponseCode.SYSTEM_BUSY, busy)
        try:
            h = parse_send_header(cmd)
        except HeaderError:  # answered INVALID_PARAMETER by the dispatcher
            if self.lane is not None:
                self.lane.count_fallback(cmd.ext.get("b") or cmd.ext.get("topic") or "", True)
            raise
        if self.lane is not None:
            self.lane.count_fallback(h.topic, self.broker.meta.topics.get(h.topic) is not None)
        err = self._check(cmd, h)
        if isinstance(err, RemotingCommand):
            return err
        tc = err
        queue_id = h.queue_id
        if queue_id < 0:
            queue_id = random.randrange(max(tc.write_queue_nums, 1))
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"request queueId[{queue_id}] is illegal, topic {h.topic} has "
                                f"{tc.write_queue_nums} write queues")
        body = cmd.body or b""
        if h.batch:
            res = self._send_batch(conn, cmd, h, tc, queue_id, body)
            if self.lane is not None:  # the next batches (and plain sends) to this queue can take the C lane
                self.lane.admit(h.topic, tc, queue_id, cmd.ext.get("AccessKey"))
            return res
        props = m.decode_properties(h.properties)
        topic = h.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic, queue_id, dlq_err = self._retry_or_dlq(cmd, h, topic, queue_id, props)
            if dlq_err is not None:
                return dlq_err
        msg = self._build(conn, h, topic, queue_id, body, props)
        refused = self.broker.timers.park(msg)  # a timer message waits in the timer topic (RocketMQ checks it first)
        if refused is not None:  # beyond timerMaxDelaySec, malformed: nothing stored
            self.broker.stats.errors += 1
            return cmd.response(*refused)
        timer = msg.topic != topic
        self.broker.schedule.apply_delay(msg)
        if is_half_request(msg):
            if self.broker.cfg.reject_transaction_message:
                return cmd.response(ResponseCode.NO_PERMISSION,
                                    f"the broker[{self.broker.cfg.broker_ip1}] sending transaction message is forbidden")
            self.broker.meta.topics.create_topic_in_send_back_method(RMQ_SYS_TRANS_HALF_TOPIC, 1, 6, 0)
            to_half(msg)
        res = self._store(cmd, h, [msg], queue_id, conn.arrived, timer=timer)
        if self.lane is not None and msg.topic is h.topic:  # a plain message: the next ones can take the C lane
            self.lane.admit(msg.topic, tc, queue_id, cmd.ext.get("AccessKey"))
        elif self.lane is not None and msg.topic in (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC):
            self.lane.admit_retargeted(msg.topic, msg.queue_id)  # delayed / half: the next such ones take the lane
            self.lane.admit(h.topic, tc, queue_id, cmd.ext.get("AccessKey"))
        return res

    def _check(self, cmd: RemotingCommand, h: SendHeader) -> RemotingCommand | TopicConfig:
        b = self.broker
        if not b.is_master():  # as RocketMQ's store answers puts on a slave; clients retry another broker
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"the broker[{b.cfg.broker_name}:{b.cfg.broker_id}] is a slave, sending is not allowed")
        if not b.is_writeable():
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{b.cfg.broker_ip1}] sending message is forbidden")
        tc = self._topic_config(h.topic, h.default_topic, h.default_topic_queue_nums)
        return tc if isinstance(tc, TopicConfig) else cmd.response(*tc)

    def _topic_config(self, topic: str, default_topic: str, default_queue_nums: int) -> TopicConfig | tuple[int, str]:
        """The config of a send's topic (created when it does not exist and may be), or the refusal's (code,
        remark)."""
        if topic not in self._valid_topics:
            problem = validate_topic(topic)
            if problem:
                return ResponseCode.INVALID_PARAMETER, problem
            if topic in NOT_ALLOWED_SEND_TOPICS:
                return ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            if len(self._valid_topics) > 100_000:
                self._valid_topics.clear()
            self._valid_topics.add(topic)
        topics = self.broker.meta.topics
        tc = topics.get(topic)
        if tc is None:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = topics.create_topic_in_send_back_method(topic, 1, 6, 0)
            else:
                tc = topics.create_topic_in_send_message_method(topic, default_topic, "", default_queue_nums, 0)
            if tc is None:
                return ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
        if not tc.perm & PERM_WRITE:
            return ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
        return tc

    def lane_decision(self, topic: str, default_topic: str, default_queue_nums: int, queue_id: int,
                      batch: bool) -> tuple[TopicConfig, int | None] | None:
        """For the C lane, which met a send to ``topic`` it does not know yet: the decisions ``process`` makes for
        that send before it stores it, with the same effects in the same order (the topic auto-created; a retry
        topic's subscription group). The topic's config and, for a retry topic, its group's retryMaxTimes (the lane
        leaves a message whose reconsume times are over it to ``process``: the DLQ), when ``process`` would store
        the message under this topic (or re-target it: delayed, half). None when ``process`` answers an error or
        sends the message to the DLQ: the lane leaves the send to it, and the steps taken here have no further
        effect when it repeats them."""
        tc = self._topic_config(topic, default_topic, default_queue_nums)
        if not isinstance(tc, TopicConfig):
            return None
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums) or (queue_id < 0 and tc.write_queue_nums <= 0):
            return None  # an invalid queue (answered INVALID_PARAMETER); no write queue to pick one from
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return tc, None
        if batch:  # answered MESSAGE_ILLEGAL
            return None
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        sg = self.broker.meta.subscriptions.find_or_create(group)
        if sg is None or self.broker.locks.has_live_locks(group):  # SUBSCRIPTION_GROUP_NOT_EXIST; the DLQ
            return None
        return tc, sg.retry_max_times

    def _retry_or_dlq(self, cmd: RemotingCommand, h: SendHeader, topic: str, queue_id: int,
                      props: dict[str, str]) -> tuple[str, int, RemotingCommand | None]:
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        sg = self.broker.meta.subscriptions.find_or_create(group)
        if sg is None:
            return topic, queue_id, cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                                 f"subscription group not exist, {group}")
        max_times = h.max_reconsume_times if h.max_reconsume_times is not None else sg.retry_max_times
        if h.reconsume_times > max_times or self.broker.locks.has_live_locks(group):
            dlq = dlq_topic(group)
            self.broker.meta.topics.create_topic_in_send_back_method(dlq, 1, 6, 0)
            props.pop(m.DELAY, None)
            return dlq, 0, None
        return topic, queue_id, None

    def _build(self, conn: Connection, h: SendHeader, topic: str, queue_id: int, body: bytes,
               props: dict[str, str]) -> MessageInner:
        if m.UNIQ_KEY not in props:
            props[m.UNIQ_KEY] = m.new_uniq_id()
        props[m.CLUSTER] = self.cluster
        msg = MessageInner(topic=topic, queue_id=queue_id, body=body, flag=h.flag, properties=props,
                           sys_flag=h.sys_flag, born_timestamp=h.born_timestamp, born_host=conn.remote_addr,
                           store_host=self.store_host, reconsume_times=h.reconsume_times,
                           tags_code=self.tags_code(props.get(m.TAGS)))
        return msg

    def _send_batch(self, conn: Connection, cmd: RemotingCommand, h: SendHeader, tc: TopicConfig, queue_id: int,
                    body: bytes) -> RemotingCommand | object:
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group "
                                + h.topic)
        try:
            inner = m.parse_batch_body(body)
        except ValueError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}")
        if not inner:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        msgs = []
        for flag, b, props in inner:
            if m.UNIQ_KEY not in props:
                props[m.UNIQ_KEY] = m.new_uniq_id()
            props[m.CLUSTER] = self.cluster
            msgs.append(MessageInner(topic=h.topic, queue_id=queue_id, body=b, flag=flag, properties=props,
                                     sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                                     born_host=conn.remote_addr, store_host=self.store_host,
                                     reconsume_times=h.reconsume_times,
                                     tags_code=self.tags_code(props.get(m.TAGS))))
        return self._store(cmd, h, msgs, queue_id, conn.arrived)

    def _answer(self, cmd: RemotingCommand, res: PutMessageResult, queue_id: int, uniq: str,
                recall: str | None = None) -> RemotingCommand:
        code = PUT_STATUS_CODES.get(res.status, ResponseCode.SYSTEM_ERROR)
        stats = self.broker.stats
        if code in STORED_CODES:
            stats.msgs_in += res.msg_num
            stats.bytes_in += res.wrote_bytes
            cfg = self.broker.cfg
            ext = {"msgId": res.msg_id, "queueId": str(queue_id), "queueOffset": str(res.queue_offset),
                   "transactionId": uniq, "MSG_REGION": cfg.region_id, "TRACE_ON": "true" if cfg.trace_on else "false"}
            if recall is not None:  # a timer message: its recall handle (RocketMQ's attachRecallHandle)
                ext["recallHandle"] = recall
            return cmd.response(code, None if code == 0 else res.status.name, ext)
        stats.errors += 1
        return cmd.response(code, f"put message failed: {res.status.name}")

    def _store(self, cmd: RemotingCommand, h: SendHeader, msgs: list[MessageInner], queue_id: int,
               arrived: float, *, timer: bool = False) -> object:
        store = self.broker.store
        if not store.is_writeable():
            self.broker.stats.errors += 1
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                "service not available now: the disk is full or over its quota")
        t0 = time.monotonic()
        if len(msgs) == 1:
            uniq = msgs[0].properties.get(m.UNIQ_KEY, "")
            res = store.append_message(msgs[0])
        else:
            uniq = ",".join(x.properties.get(m.UNIQ_KEY, "") for x in msgs)
            res = store.append_messages(msgs)
        now = time.monotonic()
        self.admission.put_took(now - t0, now)
        recall = None
        if timer and res.status is PutStatus.PUT_OK:  # parked: the timer service indexes it at once
            self.broker.timers.parked(msgs[0], res.queue_offset, res.wrote_offset, res.wrote_bytes)
            recall = self.broker.timers.recall_handle(msgs[0]) if cmd.code != 320 else None
        acks = self.broker.acks
        if res.status is not PutStatus.PUT_OK or not acks.may_wait:
            return self._answer(cmd, res, queue_id, uniq, recall)
        # the flush (group commit) and/or the replicas: answered from their release, no task per message
        out: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        waiting = self.admission.waiting(1, arrived, res.end_offset)

        def done(status: PutStatus) -> None:
            self.admission.answered(waiting)
            self.flow.poke()
            if not out.done():
                res.status = status
                out.set_result(self._answer(cmd, res, queue_id, uniq, recall))
        status = acks.when_acked(res.end_offset, done, msgs[0].properties.get(m.WAIT) != "false")
        if status is not None:
            done(status)
        return out
