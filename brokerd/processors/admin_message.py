"""Message-level admin requests: QUERY_CONSUME_QUEUE (321: a range of a consume queue's entries, optionally with a
group's subscription). VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12) are the query processor's (query.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from brokerd.processors.admin_common import dumps
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

MAX_ENTRIES: Final = 1000  # entries one request returns at most


class MessageAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue}

    def query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QueryConsumeQueueResponseBody: min/max queue index and the entries [index, index + count) as
        ConsumeQueueData (physical offset, size, tags code)."""
        topic, queue_id = cmd.str_field("topic"), cmd.int_field("queueId")
        index, count = cmd.int_field("index"), max(0, min(cmd.int_field("count", 10), MAX_ENTRIES))
        group = cmd.opt_str("consumerGroup")
        cq = self.broker.store.queue_store.get(topic, queue_id)
        if cq is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{queue_id}@{topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": cq.max_offset, "minQueueIndex": cq.min_offset}
        if group is not None:
            sub = self.broker.consumers.find_subscription(group, topic)
            if sub is None:
                body["filterData"] = f"{group}@{topic} is not online!"
            else:
                body["subscriptionData"] = sub.to_json()
                body["filterData"] = "null"
        if not cq.min_offset <= index < cq.max_offset:
            body["queueData"] = []
            return cmd.response(remark=f"Index {index} of {queue_id}@{topic} is not exist!", body=dumps(body))
        entries = []
        for i in range(index, min(index + count, cq.max_offset)):
            e = cq.entry(i)
            if e is None:
                break
            entries.append({"eval": False, "physicOffset": e[0], "physicSize": e[1], "tagsCode": e[2]})
        body["queueData"] = entries
        return cmd.response(body=dumps(body))
