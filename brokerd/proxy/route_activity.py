"""QueryRoute and QueryAssignment (RouteActivity): the topic's queues with the endpoint itself as every broker's
address, their permissions and the topic's accepted message types; the queues a push consumer polls."""

from __future__ import annotations

from typing import Any

from brokerd.proxy import pb
from brokerd.proxy.codes import Code, ProxyError
from brokerd.proxy.convert import validate_group, validate_topic
from brokerd.proxy.core import ProxyCore
from brokerd.proxy.route import PERM_READ, PERM_WRITE, BrokerData, QueueData, TopicRoute
from brokerd.proxy.sessions import ClientSession

# proto Permission
NONE, READ, WRITE, READ_WRITE = 1, 2, 3, 4
ACCEPTED = {"NORMAL": [1], "FIFO": [2], "DELAY": [3], "TRANSACTION": [4], "MIXED": [1, 2, 3, 4]}


def permission(perm: int) -> int:
    r, w = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    return READ_WRITE if r and w else READ if r else WRITE if w else NONE


def queues_of(qd: QueueData, topic: Any, broker: Any, accept: list[int]) -> list[Any]:
    """RouteActivity.genMessageQueueFromQueueData: read-only, write-only, then read-write queue ids."""
    r = w = rw = n = 0
    readable, writable = bool(qd.perm & PERM_READ), bool(qd.perm & PERM_WRITE)
    if readable and writable:
        rw = min(qd.write_queue_nums, qd.read_queue_nums)
        r, w = qd.read_queue_nums - rw, qd.write_queue_nums - rw
    elif writable:
        w = qd.write_queue_nums
    elif readable:
        r = qd.read_queue_nums
    else:
        n = max(1, qd.write_queue_nums, qd.read_queue_nums)
    out = []
    qid = 0
    for count, perm in ((r, READ), (w, WRITE), (rw, READ_WRITE), (n, NONE)):
        for _ in range(count):
            out.append(pb.MessageQueue(topic=topic, id=qid, permission=perm, broker=broker,
                                       accept_message_types=accept))
            qid += 1
    return out


class RouteActivity:
    def __init__(self, core: ProxyCore) -> None:
        self.core = core

    def endpoints(self, requested: Any) -> Any:
        """The address a client should use for every broker: the endpoint it reached (the request's)."""
        if requested is not None and len(requested.addresses):
            return requested
        return pb.Endpoints(scheme=1, addresses=[pb.Address(host=self.core.cfg.advertise_host,
                                                            port=self.core.cfg.listen_port)])

    def _broker(self, b: BrokerData, broker_id: int, endpoints: Any) -> Any:
        return pb.Broker(name=b.name, id=broker_id, endpoints=endpoints)

    async def _route(self, s: ClientSession, topic: str) -> TopicRoute:
        validate_topic(topic)
        return await self.core.route(s, topic)

    async def query_route(self, s: ClientSession, req: Any) -> Any:
        route = await self._route(s, req.topic.name)
        endpoints = self.endpoints(req.endpoints if req.HasField("endpoints") else None)
        accept = ACCEPTED.get(route.message_type, [1, 2, 3, 4])
        mqs = []
        for qd in route.queues:
            b = route.brokers.get(qd.broker_name)
            if b is None:
                continue
            for broker_id in sorted(b.addrs):
                mqs.extend(queues_of(qd, req.topic, self._broker(b, broker_id, endpoints), accept))
        return pb.response_class("QueryRoute")(status=pb.Status(code=Code.OK, message="OK"), message_queues=mqs)

    async def query_assignment(self, s: ClientSession, req: Any) -> Any:
        validate_group(req.group.name)
        route = await self._route(s, req.topic.name)
        endpoints = self.endpoints(req.endpoints if req.HasField("endpoints") else None)
        group = await self.core.group_config(s, req.group.name, req.topic.name)
        fifo = group is not None and group.orderly
        out: list[Any] = []
        for qd in route.queues:
            b = route.brokers.get(qd.broker_name)
            if not qd.perm & PERM_READ or qd.read_queue_nums <= 0 or b is None or b.master is None:
                continue
            broker = self._broker(b, 0, endpoints)
            ids = range(qd.read_queue_nums) if fifo else [-1]
            out.extend(pb.Assignment(message_queue=pb.MessageQueue(topic=req.topic, id=i, permission=permission(qd.perm),
                                                                   broker=broker)) for i in ids)
        if not out:
            raise ProxyError(Code.FORBIDDEN, "no readable queue")
        return pb.response_class("QueryAssignment")(status=pb.Status(code=Code.OK, message="OK"), assignments=out)
