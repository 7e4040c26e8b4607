"""Route and topic requests: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106), topic lists (206, 224),
DELETE_TOPIC_IN_NAMESRV (216), REGISTER_TOPIC_IN_NAMESRV (217), GET_BROKER_MEMBER_GROUP (901) and the broker
write-permission switches (205, 327). Spec 2.4, 5.1."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from brokerd.namesrv.body import BodyError, dumps
from brokerd.namesrv.context import NamesrvContext
from brokerd.namesrv.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG
from brokerd.namesrv.lenient_json import LenientJSONError, loads
from brokerd.namesrv.routeinfo import QueueData
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler

log = structlog.get_logger(component="namesrv")


def no_route_remark(topic: str) -> str:
    return f"No topic route info in name server for the topic: {topic}"


def parse_queue_datas(body: bytes | None) -> list[QueueData]:
    """The queueDatas of a TopicRouteData body (REGISTER_TOPIC_IN_NAMESRV)."""
    if not body:
        return []
    try:
        obj = loads(body)
    except LenientJSONError as e:
        raise BodyError(f"TopicRouteData is not JSON: {e}") from None
    raw = obj.get("queueDatas") if isinstance(obj, Mapping) else None
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BodyError("queueDatas must be an array")
    out = []
    for i, q in enumerate(raw):
        if not isinstance(q, Mapping) or not isinstance(q.get("brokerName"), str) or not q["brokerName"]:
            raise BodyError(f"queueDatas[{i}] needs a brokerName")
        try:
            out.append(QueueData(q["brokerName"], int(q.get("readQueueNums", 0)), int(q.get("writeQueueNums", 0)),
                                 int(q.get("perm", 6)), int(q.get("topicSysFlag", 0))))
        except (TypeError, ValueError):
            raise BodyError(f"queueDatas[{i}] has a non-integer field") from None
    return out


class RouteProcessors:
    def __init__(self, ctx: NamesrvContext) -> None:
        self.ctx = ctx

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: self.register_topic,
            RequestCode.GET_BROKER_MEMBER_GROUP: self.get_broker_member_group,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
        }

    def get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.str_field("topic")
        if not self.ctx.ready:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "name server not ready")
        order_conf = None
        if self.ctx.cfg.order_message_enable:
            order_conf = self.ctx.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        route = self.ctx.routes.topic_route(topic, order_conf)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, no_route_remark(topic))
        return cmd.response(ResponseCode.SUCCESS, None, {}, dumps(route))

    def get_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, {}, dumps(self.ctx.routes.cluster_info()))

    def _topic_list(self, cmd: RemotingCommand, topics: list[str], enabled: bool) -> RemotingCommand:
        if not enabled:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        body: dict[str, Any] = {"topicList": topics}
        return cmd.response(ResponseCode.SUCCESS, None, {}, dumps(body))

    def get_all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._topic_list(cmd, self.ctx.routes.all_topics(), self.ctx.cfg.enable_all_topic_list)

    def get_topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster = cmd.str_field("cluster")
        return self._topic_list(cmd, self.ctx.routes.topics_by_cluster(cluster), self.ctx.cfg.enable_topic_list)

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.str_field("topic")
        cluster = cmd.opt_str("clusterName")
        self.ctx.routes.delete_topic(topic, cluster)
        log.info("topic_deleted", topic=topic, cluster=cluster)
        return cmd.response()

    def register_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.str_field("topic")
        try:
            queue_datas = parse_queue_datas(cmd.body)
        except BodyError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        error = self.ctx.routes.register_topic(topic, queue_datas)
        if error is not None:
            log.warning("register_topic_refused", topic=topic, reason=error)
            return cmd.response(ResponseCode.SYSTEM_ERROR, error)
        return cmd.response()

    def get_broker_member_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster = cmd.str_field("clusterName")
        name = cmd.str_field("brokerName")
        group = self.ctx.routes.broker_member_group(cluster, name)
        return cmd.response(ResponseCode.SUCCESS, None, {}, dumps({"brokerMemberGroup": group}))

    def _unknown_broker(self, cmd: RemotingCommand, name: str) -> RemotingCommand | None:
        if self.ctx.routes.has_broker(name):
            return None
        return cmd.response(ResponseCode.BROKER_NOT_EXIST, f"broker[{name}] is not registered with this name server")

    def wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = cmd.str_field("brokerName")
        unknown = self._unknown_broker(cmd, name)
        if unknown is not None:
            return unknown
        count = self.ctx.routes.wipe_write_perm(name)
        log.info("broker_write_perm_wiped", broker_name=name, topics=count, remote=conn.remote_addr[0])
        return cmd.response(ResponseCode.SUCCESS, None, {"wipeTopicCount": str(count)})

    def add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = cmd.str_field("brokerName")
        unknown = self._unknown_broker(cmd, name)
        if unknown is not None:
            return unknown
        count = self.ctx.routes.add_write_perm(name)
        log.info("broker_write_perm_added", broker_name=name, topics=count, remote=conn.remote_addr[0])
        return cmd.response(ResponseCode.SUCCESS, None, {"addTopicCount": str(count)})


def route_handlers(ctx: NamesrvContext) -> dict[int, Handler]:
    return RouteProcessors(ctx).table()
