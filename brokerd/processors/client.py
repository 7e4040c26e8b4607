"""Client connections: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), CHECK_CLIENT_CONFIG (46); broker -> client NOTIFY_CONSUMER_IDS_CHANGED
(40)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from brokerd.filter import FilterError, compile_filter, is_tag_type, not_supported_remark
from brokerd.metadata.names import retry_topic
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection

if TYPE_CHECKING:
    from brokerd.context import BrokerContext



def _mq_list(items: Any) -> list[tuple[str, str, int]]:
    out = []
    for mq in items or []:
        if isinstance(mq, dict):
            try:
                out.append((str(mq.get("topic", "")), str(mq.get("brokerName", "")), int(mq.get("queueId", 0))))
            except (TypeError, ValueError):
                continue
    return out


def _mq_json(mq: tuple[str, str, int]) -> dict[str, Any]:
    return {"brokerName": mq[1], "queueId": mq[2], "topic": mq[0]}


class ClientProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, object]:
        return {34: self.heartbeat, 35: self.unregister, 38: self.consumer_list, 41: self.lock, 42: self.unlock,
                46: self.check_client_config}

    def _track(self, conn: Connection) -> None:
        if not conn.attrs.get("tracked"):
            conn.attrs["tracked"] = True
            conn.add_close_callback(self._closed)

    def _closed(self, conn: Connection) -> None:
        self.broker.consumers.unregister(conn)
        self.broker.producers.unregister(conn)

    def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = cmd.json_body()
        client_id = str(data.get("clientID") or f"{conn.remote_addr[0]}@unknown")
        self._track(conn)
        b = self.broker
        for cd in data.get("consumerDataSet") or []:
            if not isinstance(cd, dict) or not cd.get("groupName"):
                continue
            group = str(cd["groupName"])
            sg = b.meta.subscriptions.find_or_create(group)
            if sg is None:
                continue
            if sg.retry_queue_nums > 0 and b.meta.topics.get(retry_topic(group)) is None:
                b.meta.topics.create_topic_in_send_back_method(retry_topic(group), sg.retry_queue_nums, 6, 0)
            b.consumers.register(conn, client_id, cd, cmd.language, cmd.version)
        for pd in data.get("producerDataSet") or []:
            if isinstance(pd, dict) and pd.get("groupName"):
                b.producers.register(conn, str(pd["groupName"]), client_id, cmd.language, cmd.version)
        return cmd.response(ext={"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"})

    def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A push consumer with an SQL92 subscription asks at start whether this broker can filter it (body:
        {clientId, group, subscriptionData}); nothing is registered."""
        data = cmd.json_body() if cmd.body else {}
        sub = data.get("subscriptionData") if isinstance(data, dict) else None
        if not isinstance(sub, dict) or is_tag_type(sub.get("expressionType")):
            return cmd.response()
        etype = str(sub.get("expressionType"))
        if not self.broker.cfg.enable_property_filter:
            return cmd.response(ResponseCode.SYSTEM_ERROR, not_supported_remark(etype))
        try:
            compile_filter(etype, sub.get("subString"))
        except FilterError as exc:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return cmd.response()

    def unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.opt_str("consumerGroup")
        if group:
            self.broker.consumers.unregister(conn, group)
        pgroup = cmd.opt_str("producerGroup")
        if pgroup:
            self.broker.producers.unregister(conn, pgroup)
        return cmd.response()

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.str_field("consumerGroup")
        info = self.broker.consumers.groups.get(group)
        if info is None or not info.channels:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(body=orjson.dumps({"consumerIdList": info.client_ids()}))

    def lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = cmd.json_body()
        got = self.broker.locks.try_lock(str(data.get("consumerGroup", "")), str(data.get("clientId", "")),
                                         _mq_list(data.get("mqSet")))
        return cmd.response(body=orjson.dumps({"lockOKMQSet": [_mq_json(mq) for mq in got]}))

    def unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = cmd.json_body()
        self.broker.locks.unlock(str(data.get("consumerGroup", "")), str(data.get("clientId", "")),
                                 _mq_list(data.get("mqSet")))
        return cmd.response()


def notify_consumer_ids_changed(broker: BrokerContext, group: str) -> None:
    """One-way NOTIFY_CONSUMER_IDS_CHANGED to every channel of the group (spec 2.3)."""
    if not broker.cfg.notify_consumer_ids_changed_enable:
        return
    sg = broker.meta.subscriptions.find(group)
    if sg is not None and not sg.notify_consumer_ids_changed_enable:
        return
    info = broker.consumers.groups.get(group)
    if info is None:
        return
    for conn in list(info.channels):
        if conn.is_open:
            conn.oneway(request(40, {"consumerGroup": group}))
