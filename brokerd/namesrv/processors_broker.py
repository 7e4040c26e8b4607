"""Broker-facing name-server requests: REGISTER_BROKER (103), UNREGISTER_BROKER (104), QUERY_DATA_VERSION (322),
BROKER_HEARTBEAT (904). Spec 2.4."""

from __future__ import annotations

import structlog

from brokerd.namesrv.body import BodyError, DataVersion, TopicConfig, TopicMemo, crc32, decode_register_body, dumps
from brokerd.namesrv.context import NamesrvContext
from brokerd.namesrv.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG
from brokerd.namesrv.lenient_json import LenientJSONError, loads
from brokerd.namesrv.routeinfo import BrokerAddrInfo, BrokerRegistration
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection, Handler

log = structlog.get_logger(component="namesrv")

ZONE_NAME_KEY = "__ZONE_NAME"


def _broker_id(cmd: RemotingCommand) -> int:
    bid = cmd.int_field("brokerId")
    if bid < 0:
        raise HeaderError(f"header field 'brokerId' must be >= 0, got {bid}")
    return bid


class BrokerProcessors:
    def __init__(self, ctx: NamesrvContext) -> None:
        self.ctx = ctx
        self._topics: dict[tuple[str, str], dict[str, tuple[object, TopicConfig]]] = {}  # (cluster, addr): TopicMemo

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
        }

    def _parse_registration(self, cmd: RemotingCommand) -> BrokerRegistration:
        """Header and body of REGISTER_BROKER; raises HeaderError/BodyError without touching any state but the
        broker's topic memo (``TopicMemo``: its previous registration's topics, taken as they were when unchanged)."""
        cluster = cmd.str_field("clusterName")
        addr = cmd.str_field("brokerAddr")
        name = cmd.str_field("brokerName")
        bid = _broker_id(cmd)
        memo = TopicMemo(self._topics.get((cluster, addr)))
        body = decode_register_body(cmd.body, compressed=cmd.bool_field("compressed"), version=cmd.version, memo=memo)
        if len(body.topic_config_table) > 1:  # a whole table (not a single topic's incremental registration)
            self._topics[(cluster, addr)] = memo.current
        acting = cmd.ext.get("enableActingMaster")
        timeout = cmd.int_field("heartbeatTimeoutMillis", 0)
        return BrokerRegistration(
            cluster=cluster, broker_addr=addr, broker_name=name, broker_id=bid,
            ha_server_addr=cmd.ext.get("haServerAddr", ""),
            topic_config_table=body.topic_config_table, data_version=body.data_version,
            filter_server_list=body.filter_server_list, zone_name=cmd.opt_str(ZONE_NAME_KEY),
            timeout_ms=timeout if timeout > 0 else None,
            enable_acting_master=None if acting is None or acting == "" else cmd.bool_field("enableActingMaster"),
        )

    def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        expected_crc = cmd.int_field("bodyCrc32", 0)
        if expected_crc != 0 and crc32(cmd.body) != expected_crc:
            log.warning("register_crc_mismatch", remote=conn.remote_addr[0], expected=expected_crc,
                        actual=crc32(cmd.body))
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            reg = self._parse_registration(cmd)
        except BodyError as e:
            log.warning("register_body_rejected", remote=conn.remote_addr[0], error=str(e))
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}")
        routes = self.ctx.routes
        is_new = BrokerAddrInfo(reg.cluster, reg.broker_addr) not in routes.broker_live_table
        result = routes.register_broker(reg, conn)
        if result is None:
            log.warning("register_broker_refused", broker_name=reg.broker_name, broker_id=reg.broker_id,
                        broker_addr=reg.broker_addr, reason="single-topic registration before a full one")
            return cmd.response(ResponseCode.SYSTEM_ERROR, "register broker failed")
        self.ctx.track_channel(conn)
        if is_new:  # a broker the route table let go (expired, its channel closed) keeps no topic memo here
            for gone in [k for k in self._topics if BrokerAddrInfo(*k) not in routes.broker_live_table]:
                del self._topics[gone]
            log.info("broker_registered", cluster=reg.cluster, broker_name=reg.broker_name, broker_id=reg.broker_id,
                     broker_addr=reg.broker_addr, ha_server_addr=reg.ha_server_addr,
                     topics=len(reg.topic_config_table))
        ext: dict[str, str] = {}
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        body = None
        if self.ctx.cfg.return_order_topic_config_to_broker:
            table = self.ctx.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
            if table is not None:
                body = dumps({"table": table})
        return cmd.response(ResponseCode.SUCCESS, None, ext, body)

    def unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster = cmd.str_field("clusterName")
        addr = cmd.str_field("brokerAddr")
        name = cmd.str_field("brokerName")
        bid = _broker_id(cmd)
        self._topics.pop((cluster, addr), None)
        if self.ctx.routes.unregister_broker(cluster, addr, name, bid):
            log.info("broker_unregistered", cluster=cluster, broker_name=name, broker_id=bid, broker_addr=addr)
        return cmd.response()

    def query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster = cmd.str_field("clusterName")
        addr = cmd.str_field("brokerAddr")
        try:
            dv = DataVersion.from_json(loads(cmd.body) if cmd.body else None)
        except (BodyError, LenientJSONError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad DataVersion body: {e}")
        routes = self.ctx.routes
        changed = routes.is_broker_topic_config_changed(cluster, addr, dv)
        routes.update_broker_timestamp(cluster, addr)
        current = routes.query_broker_data_version(cluster, addr)
        body = dumps(current.to_json()) if current is not None else None
        return cmd.response(ResponseCode.SUCCESS, None, {"changed": "true" if changed else "false"}, body)

    def broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster = cmd.str_field("clusterName")
        addr = cmd.str_field("brokerAddr")
        self.ctx.routes.update_broker_timestamp(cluster, addr)
        return cmd.response()


def broker_handlers(ctx: NamesrvContext) -> dict[int, Handler]:
    return BrokerProcessors(ctx).table()
