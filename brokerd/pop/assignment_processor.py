"""QUERY_ASSIGNMENT (400), SET_MESSAGE_REQUEST_MODE (401), GET_ALL_MESSAGE_REQUEST_MODE (402), as RocketMQ's
QueryAssignmentProcessor and AdminBrokerProcessor answer them.

RocketMQ 5's remoting push consumer (``clientRebalance=false``) asks a broker which queues it should consume and
how: the broker balances the group's clients over the topic's readable queues (the route from the name servers,
so every broker of the topic is in it) and names the mode of the group and topic — POP once
``mqadmin setConsumeMode -m POP`` (401) set it, else ``defaultMessageRequestMode`` (PULL), retry topics always PULL.
The modes live in the broker's metadata (``messageRequestMode.json``) and replicate to slaves as change records.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import orjson

from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX
from brokerd.metadata.request_mode import MessageRequestMode
from brokerd.metadata.topic import PERM_READ
from brokerd.namesrv.client import get_route
from brokerd.pop.allocate import MQ, assign
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

ROUTE_TTL_S = 1.0


class AssignmentProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self._routes: dict[str, tuple[float, list[MQ] | None]] = {}

    def handlers(self) -> dict[int, object]:
        return {RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
                RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_mode,
                RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: self.get_all_modes}

    # ------------------------------------------------------------------ 401 / 402

    def set_mode(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        body = cmd.json_body()
        topic, group = str(body.get("topic") or ""), str(body.get("consumerGroup") or "")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return cmd.response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        b = self.broker
        if b.meta.topics.get(topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        if b.meta.subscriptions.find_or_create(group) is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group does not exist")
        if not b.is_master():
            return cmd.response(ResponseCode.NO_PERMISSION, "the message request mode is set on the master")
        try:
            mode = MessageRequestMode.from_json({**body, "topic": topic, "consumerGroup": group})
        except ValueError as e:
            raise HeaderError(str(e), ResponseCode.SYSTEM_ERROR) from None
        b.meta.request_modes.set(mode)
        return self._once_replicated(cmd)

    def _once_replicated(self, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        """With incremental metadata sync the answer waits for the change record's put acknowledgement (as the
        admin answers of topics and groups do): an acknowledged mode survives a failover."""
        b = self.broker
        journal = b.meta.hub.journal
        if journal is None:
            return cmd.response()

        def answer(st: PutStatus) -> RemotingCommand:
            if st is PutStatus.PUT_OK:
                return cmd.response()
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"metadata change not replicated: {st.name}")

        out: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        now = b.acks.when_acked(journal.last_end, lambda st: out.set_result(answer(st)))
        return out if now is None else answer(now)

    def get_all_modes(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=orjson.dumps(self.broker.meta.request_modes.rocketmq_json()))

    # ------------------------------------------------------------------ 400

    async def query_assignment(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = cmd.json_body()
        topic, group = str(body.get("topic") or ""), str(body.get("consumerGroup") or "")
        cid, strategy = str(body.get("clientId") or ""), str(body.get("strategyName") or "")
        model = str(body.get("messageModel") or "CLUSTERING")
        mode = self._mode(topic, group)
        mqs = await self._route(topic)
        queues = self._balance(group, cid, strategy, model, mqs, mode)
        out: dict[str, Any] = {}
        if queues is not None:
            out["messageQueueAssignments"] = [
                {"messageQueue": {"topic": t, "brokerName": bn, "queueId": q}, "mode": mode.mode} for t, bn, q in queues]
        return cmd.response(body=orjson.dumps(out))

    def _mode(self, topic: str, group: str) -> MessageRequestMode:
        m = self.broker.meta.request_modes.get(topic, group)
        if m is not None:
            return m
        cfg = self.broker.cfg
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # retry topics are always pulled
            return MessageRequestMode(topic or "-", group or "-", "PULL")
        mode = cfg.default_message_request_mode
        return MessageRequestMode(topic or "-", group or "-", mode,
                                  cfg.default_pop_share_queue_num if mode == "POP" else 0)

    def _balance(self, group: str, cid: str, strategy: str, model: str, mqs: list[MQ] | None,
                 mode: MessageRequestMode) -> list[MQ] | None:  # fmt: skip
        if mqs is None:
            return None
        if model == "BROADCASTING" or not self.broker.cfg.server_load_balancer_enable:
            return mqs
        info = self.broker.consumers.groups.get(group)
        cids = info.client_ids() if info is not None else []
        if not cids:
            return None
        return assign(strategy, cid, mqs, cids, mode.mode == "POP", mode.pop_share_queue_num)

    async def _route(self, topic: str) -> list[MQ] | None:
        """The topic's readable queues on every broker (TopicRouteInfoManager.getTopicSubscribeInfo); this broker's
        own when no name server answers."""
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL_S:
            return cached[1]
        b = self.broker
        mqs: list[MQ] | None = None
        for addr in b.namesrv_addrs:
            try:
                route = await get_route(b.outer, addr, topic)
            except Exception as e:  # noqa: BLE001 - a name server down: ask the next, then use the local config
                b.log.debug("query_assignment_route_failed", namesrv=addr, error=repr(e))
                continue
            mqs = [] if route is None else [(topic, str(qd.get("brokerName")), q)
                                            for qd in route.get("queueDatas") or []
                                            if int(qd.get("perm", 0)) & PERM_READ
                                            for q in range(int(qd.get("readQueueNums", 0)))]
            break
        else:
            tc = b.meta.topics.get(topic)
            if tc is not None and tc.perm & PERM_READ:
                mqs = [(topic, b.cfg.broker_name, q) for q in range(tc.read_queue_nums)]
        mqs = mqs or None
        self._routes[topic] = (time.monotonic(), mqs)
        if len(self._routes) > 10_000:
            self._routes.clear()
        return mqs
