"""1012 CONTROLLER_GET_NEXT_BROKER_ID, 1013 CONTROLLER_APPLY_BROKER_ID, 1003 CONTROLLER_REGISTER_BROKER."""

from __future__ import annotations

from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler
from controller.context import HandlerContext
from controller.handlers.wire import req_int, req_str, respond
from controller.statemachine import decide_register as d


def handlers(srv: HandlerContext) -> dict[int, Handler]:
    async def get_next_broker_id(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name = req_str(cmd, "clusterName"), req_str(cmd, "brokerName")
        return respond(cmd, await srv.executor.read(lambda: d.get_next_broker_id(srv.image, cluster, name)))

    async def apply_broker_id(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name = req_str(cmd, "clusterName"), req_str(cmd, "brokerName")
        broker_id = req_int(cmd, "appliedBrokerId")
        check_code = req_str(cmd, "registerCheckCode")
        return respond(cmd, await srv.executor.write(
            lambda: d.apply_broker_id(srv.image, cluster, name, broker_id, check_code)))

    async def register_broker(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name = req_str(cmd, "clusterName"), req_str(cmd, "brokerName")
        broker_id = req_int(cmd, "brokerId")
        address = req_str(cmd, "brokerAddress")
        return respond(cmd, await srv.executor.write(
            lambda: d.register_broker(srv.image, srv.live, cluster, name, broker_id, address)))

    return {
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: get_next_broker_id,
        RequestCode.CONTROLLER_APPLY_BROKER_ID: apply_broker_id,
        RequestCode.CONTROLLER_REGISTER_BROKER: register_broker,
    }
