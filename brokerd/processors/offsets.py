"""Consumer offsets and queue offsets: 14, 15, 29, 30, 31, 32, 43, 45."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from brokerd.processors.tier_reads import answer_read
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


class OffsetProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, object]:
        return {14: self.query_consumer_offset, 15: self.update_consumer_offset, 29: self.search_by_timestamp,
                30: self.max_offset, 31: self.min_offset, 32: self.earliest_time, 43: self.all_consumer_offsets,
                45: self.all_delay_offsets}

    def query_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, qid = cmd.str_field("consumerGroup"), cmd.str_field("topic"), cmd.int_field("queueId")
        off = self.broker.meta.offsets.query_offset(group, topic, qid)
        if off >= 0:
            return cmd.response(ext={"offset": str(off)})
        # The reference broker answers a new group's query with 0 while the queue still starts at 0
        # (and setZeroIfNotFound is absent or true); otherwise QUERY_NOT_FOUND and the client applies
        # its consumeFromWhere policy.
        set_zero = cmd.ext.get("setZeroIfNotFound")
        if (set_zero is None or set_zero.lower() == "true") and self.broker.store.min_offset_in_queue(topic, qid) <= 0:
            return cmd.response(ext={"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic = cmd.str_field("consumerGroup"), cmd.str_field("topic")
        qid, off = cmd.int_field("queueId"), cmd.int_field("commitOffset")
        b = self.broker
        if b.meta.topics.get(topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!")
        if b.is_master():
            b.meta.offsets.commit_offset(conn.remote_addr[0], group, topic, qid, off)
        else:  # stored here and forwarded to the master (pending until it acknowledges)
            b.slave_sync.commit_offset(conn.remote_addr[0], group, topic, qid, off)
        return cmd.response()

    def search_by_timestamp(self, conn: Connection, cmd: RemotingCommand) -> object:
        topic, qid, ts = cmd.str_field("topic"), cmd.int_field("queueId"), cmd.int_field("timestamp")
        boundary = (cmd.ext.get("boundaryType") or "LOWER").upper()
        store = self.broker.store
        return answer_read(store, lambda: store.offset_by_timestamp(topic, qid, ts, "UPPER" if boundary == "UPPER"
                                                                    else "LOWER"),
                           lambda off: cmd.response(ext={"offset": str(off)}))  # fmt: skip

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        off = self.broker.store.max_offset_in_queue(cmd.str_field("topic"), cmd.int_field("queueId"))
        return cmd.response(ext={"offset": str(off)})

    def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        off = self.broker.store.min_offset_in_queue(cmd.str_field("topic"), cmd.int_field("queueId"))
        return cmd.response(ext={"offset": str(off)})

    def earliest_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ts = self.broker.store.earliest_message_time(cmd.str_field("topic"), cmd.int_field("queueId"))
        return cmd.response(ext={"timestamp": str(ts)})

    def all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=orjson.dumps(self.broker.meta.offsets.all_json()))

    def all_delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=orjson.dumps(self.broker.meta.delay_offsets.all_json()))
