"""1004 CONTROLLER_GET_REPLICA_INFO (consistent read), 1005 CONTROLLER_GET_METADATA_INFO (local),
1006 CONTROLLER_GET_SYNC_STATE_DATA (unsafe read: admin)."""

from __future__ import annotations

from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection, Handler
from controller.context import HandlerContext
from controller.handlers.wire import req_json, req_str, respond
from controller.statemachine.decide_admin import get_sync_state_data
from controller.statemachine.decide_register import get_replica_info


def handlers(srv: HandlerContext) -> dict[int, Handler]:
    async def replica_info(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = req_str(cmd, "brokerName")
        return respond(cmd, await srv.executor.read(lambda: get_replica_info(srv.image, name)))

    def metadata(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(RC.SUCCESS, None, srv.metadata_header())

    async def sync_state_data(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        names = req_json(cmd)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HeaderError("body must be a JSON array of broker names", RC.CONTROLLER_INVALID_REQUEST)
        return respond(cmd, await srv.executor.unsafe_read(lambda: get_sync_state_data(srv.image, srv.live, names)))

    return {
        RequestCode.CONTROLLER_GET_REPLICA_INFO: replica_info,
        RequestCode.CONTROLLER_GET_METADATA_INFO: metadata,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: sync_state_data,
    }
