"""904 BROKER_HEARTBEAT: leader-local soft state, never a Raft proposal. Served by every member (brokers send
it one-way to all controllers), so a newly elected leader already knows who is alive."""

from __future__ import annotations

from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler
from controller.context import HandlerContext
from controller.handlers.wire import req_int, req_str
from controller.liveness import DEFAULT_PRIORITY, BrokerKey

CONN_KEYS = "controller_heartbeat_keys"


def handlers(srv: HandlerContext) -> dict[int, Handler]:
    def on_close(conn: Connection) -> None:
        keys = conn.attrs.get(CONN_KEYS)
        if isinstance(keys, set):
            srv.on_heartbeat_channel_closed(keys)

    def heartbeat(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        ext = cmd.ext

        def num(key: str, default: int) -> int:  # hot path: plain int(), the strict parser only on odd input
            v = ext.get(key)
            if not v:
                return default
            try:
                return int(v)
            except ValueError:
                return req_int(cmd, key, default)

        name = req_str(cmd, "brokerName")
        raw_id = ext.get("brokerId")
        broker_id = num("brokerId", 0) if raw_id else req_int(cmd, "brokerId")  # required: missing -> 2005
        timeout = num("heartbeatTimeoutMills", 0)
        revived = srv.live.heartbeat(
            ext.get("clusterName", ""), name, broker_id, ext.get("brokerAddr", ""), num("epoch", 0),
            num("maxOffset", 0), num("confirmOffset", 0), num("electionPriority", DEFAULT_PRIORITY),
            timeout if srv.honor_heartbeat_timeout else None)
        keys = conn.attrs.get(CONN_KEYS)
        if keys is None:
            keys = set()
            conn.attrs[CONN_KEYS] = keys
            conn.add_close_callback(on_close)
        assert isinstance(keys, set)
        key: BrokerKey = (name, broker_id)
        keys.add(key)
        if revived:
            srv.on_broker_revived(name, broker_id)
        return None if cmd.is_oneway else cmd.response(RC.SUCCESS)

    return {RequestCode.BROKER_HEARTBEAT: heartbeat}
