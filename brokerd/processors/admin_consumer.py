"""Who consumes and produces what, and how far consumers are (RocketMQ's AdminBrokerProcessor):
GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204), GET_ALL_PRODUCER_INFO (328),
GET_CONSUME_STATS (208), GET_BROKER_CONSUME_STATS (317), QUERY_TOPIC_CONSUME_BY_WHO (300),
QUERY_TOPICS_BY_CONSUMER (343), QUERY_SUBSCRIPTION_BY_CONSUMER (345), QUERY_CONSUME_TIME_SPAN (303)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brokerd.clients import mq_map
from brokerd.processors.admin_common import dumps, mq_json, reads
from brokerd.processors.admin_group import group_known, unknown_group
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler, HandlerResult
from brokerd.stats import GROUP_GET_NUMS

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


def java_time(ms: int) -> str:
    """UtilAll.formatDate(date, "yyyy-MM-dd#HH:mm:ss:SSS") in local time."""
    t = datetime.fromtimestamp(ms / 1000)
    return t.strftime("%Y-%m-%d#%H:%M:%S:") + f"{t.microsecond // 1000:03d}"


class ConsumerAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
                c.GET_PRODUCER_CONNECTION_LIST: self.producer_connections, c.GET_ALL_PRODUCER_INFO: self.producers,
                c.GET_CONSUME_STATS: self.consume_stats, c.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
                c.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by, c.QUERY_TOPICS_BY_CONSUMER: self.topics_of,
                c.QUERY_SUBSCRIPTION_BY_CONSUMER: self.subscription_of, c.QUERY_CONSUME_TIME_SPAN: self.time_span}

    # -- connections ------------------------------------------------------------------------------------------

    def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.str_field("consumerGroup")
        info = self.broker.consumers.group_info(group)  # POP consumers without heartbeats too
        if info is None or not info.channels:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {"connectionSet": [ch.connection_json() for ch in info.channels.values()],
                "consumeFromWhere": info.consume_from_where, "consumeType": info.consume_type,
                "messageModel": info.message_model,
                "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()}}
        return cmd.response(body=dumps(body))

    def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.str_field("producerGroup")
        chans = self.broker.producers.groups.get(group)
        if not chans:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return cmd.response(body=dumps({"connectionSet": [ch.connection_json() for ch in chans.values()]}))

    def producers(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=dumps({"data": self.broker.producers.producer_table(time.time_ns() // 1_000_000)}))

    # -- consume progress -------------------------------------------------------------------------------------

    def _queue_stats(self, group: str, topic: str, queues: int) -> tuple[list[tuple[dict[str, Any], Any]], int]:
        """(offset table entries, diff total) of ``group`` on ``topic``'s first ``queues`` queues."""
        b = self.broker
        st, name = b.store, b.cfg.broker_name
        entries, diff = [], 0
        for q in range(queues):
            broker_off = max(0, st.max_offset_in_queue(topic, q))
            consumer_off = max(0, b.meta.offsets.query_offset(group, topic, q))
            last = st.message_store_timestamp(topic, q, consumer_off - 1) if consumer_off > 0 else 0
            entries.append((mq_json(topic, name, q), {"brokerOffset": broker_off, "consumerOffset": consumer_off,
                                                      "lastTimestamp": max(0, last), "pullOffset": consumer_off}))
            diff += broker_off - consumer_off
        return entries, diff

    def _skipped(self, group: str, topic: str) -> bool:
        """An online group that does not subscribe ``topic`` (any more) is not reported on it."""
        c = self.broker.consumers
        return c.subscription_count(group) > 0 and c.find_subscription(group, topic) is None

    def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """ConsumeStats of a group (on one topic, or every topic it has offsets for) on this broker. A topic this
        broker does not host yields no queues (a group's stats are gathered from every broker of its route)."""
        group, topic = cmd.str_field("consumerGroup"), cmd.opt_str("topic")
        if not group_known(self.broker, group):
            return unknown_group(cmd, group)

        def build() -> RemotingCommand:
            b = self.broker
            entries: list[tuple[dict[str, Any], Any]] = []
            tps = 0.0
            for t in sorted({topic} if topic else b.meta.offsets.topics_of_group(group)):
                tc = b.meta.topics.get(t)
                if tc is None or self._skipped(group, t):
                    continue
                entries += self._queue_stats(group, t, tc.read_queue_nums)[0]
                tps += b.stats_manager.minute_tps(GROUP_GET_NUMS, f"{t}@{group}")
            return cmd.response(body=dumps({"consumeTps": tps, "offsetTable": mq_map(entries)}))

        return reads(self.broker.store, build)

    def broker_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """ConsumeStatsList: every subscription group's ConsumeStats per topic (order topics only with
        ``isOrder``), with the broker's total diff."""
        only_order = cmd.bool_field("isOrder")

        def build() -> RemotingCommand:
            b = self.broker
            stats_list, total = [], 0
            for group in sorted(b.meta.subscriptions.all()):
                per_topic = []
                for t in sorted(b.meta.offsets.topics_of_group(group)):
                    tc = b.meta.topics.get(t)
                    if tc is None or (only_order and not tc.order) or self._skipped(group, t):
                        continue
                    entries, diff = self._queue_stats(group, t, tc.write_queue_nums)
                    tps = b.stats_manager.minute_tps(GROUP_GET_NUMS, f"{t}@{group}")
                    per_topic.append({"consumeTps": tps, "offsetTable": mq_map(entries)})
                    total += diff
                stats_list.append({group: per_topic})
            body = {"brokerAddr": b.cfg.broker_addr, "consumeStatsList": stats_list, "totalDiff": total,
                    "totalInflightDiff": 0}
            return cmd.response(body=dumps(body))

        return reads(self.broker.store, build)

    # -- who consumes what ----------------------------------------------------------------------------------

    def consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.str_field("topic")
        b = self.broker
        groups = b.consumers.groups_of_topic(topic) | b.meta.offsets.groups_of_topic(topic)
        if not groups and b.meta.topics.get(topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return cmd.response(body=dumps({"groupList": sorted(groups)}))

    def topics_of(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.str_field("group")
        if not group_known(self.broker, group):
            return unknown_group(cmd, group)
        topics = sorted(self.broker.meta.offsets.topics_of_group(group))
        return cmd.response(body=dumps({"topicList": topics, "brokerAddr": self.broker.cfg.broker_addr}))

    def subscription_of(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic = cmd.str_field("group"), cmd.str_field("topic")
        sub = self.broker.consumers.find_subscription(group, topic)
        body: dict[str, Any] = {"group": group, "topic": topic}
        if sub is not None:
            body["subscriptionData"] = sub.to_json()
        return cmd.response(body=dumps(body))

    def time_span(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """QueryConsumeTimeSpanBody: per write queue, the first and last store time, the store time of the
        group's consume position and how long its next message has waited."""
        topic, group = cmd.str_field("topic"), cmd.str_field("group")
        tc = self.broker.meta.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return reads(self.broker.store, lambda: cmd.response(body=dumps(
            {"consumeTimeSpanSet": [self._span(topic, group, q) for q in range(tc.write_queue_nums)]})))

    def _span(self, topic: str, group: str, q: int) -> dict[str, Any]:
        st = self.broker.store
        min_time = st.earliest_message_time(topic, q)
        mx = st.max_offset_in_queue(topic, q)
        max_time = st.message_store_timestamp(topic, q, mx - 1)
        consumer_off = self.broker.meta.offsets.query_offset(group, topic, q)
        consume_time = st.message_store_timestamp(topic, q, consumer_off - 1) if consumer_off > 0 else min_time
        delay = 0
        if consumer_off < mx:
            nxt = st.message_store_timestamp(topic, q, max(0, consumer_off))
            delay = time.time_ns() // 1_000_000 - nxt if nxt > 0 else 0
        return {"consumeTimeStamp": consume_time, "consumeTimeStampStr": java_time(consume_time), "delayTime": delay,
                "maxTimeStamp": max_time, "maxTimeStampStr": java_time(max_time),
                "messageQueue": mq_json(topic, self.broker.cfg.broker_name, q), "minTimeStamp": min_time,
                "minTimeStampStr": java_time(min_time)}
