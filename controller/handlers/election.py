"""1002 CONTROLLER_ELECT_MASTER and 1001 CONTROLLER_ALTER_SYNC_STATE_SET."""

from __future__ import annotations

from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection, Handler
from controller.context import HandlerContext
from controller.handlers.wire import req_bool, req_int, req_json, req_str, respond
from controller.statemachine import decide_election as d
from controller.statemachine.elect import CONTROLLER_TRIGGER


def parse_sync_state_set(body: object) -> tuple[frozenset[int], int]:
    """SyncStateSet JSON body: {"syncStateSet": [ids], "syncStateSetEpoch": n}."""
    if not isinstance(body, dict):
        raise HeaderError("SyncStateSet body must be a JSON object", RC.CONTROLLER_INVALID_REQUEST)
    ids, epoch = body.get("syncStateSet"), body.get("syncStateSetEpoch")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise HeaderError("syncStateSet must be a list of broker ids", RC.CONTROLLER_INVALID_REQUEST)
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise HeaderError("syncStateSetEpoch must be an integer", RC.CONTROLLER_INVALID_REQUEST)
    return frozenset(ids), epoch


def handlers(srv: HandlerContext) -> dict[int, Handler]:
    async def elect_master(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = req_str(cmd, "brokerName")
        broker_id = req_int(cmd, "brokerId", CONTROLLER_TRIGGER)
        designate = req_bool(cmd, "designateElect")
        unclean = srv.cfg.enable_elect_unclean_master
        reply = await srv.executor.write(lambda: d.elect_master(srv.image, srv.live, name, broker_id, designate, unclean))
        if reply.code == RC.SUCCESS:
            srv.notify_role_change(name)
        return respond(cmd, reply)

    async def alter_sync_state_set(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = req_str(cmd, "brokerName")
        master_id = req_int(cmd, "masterBrokerId")
        master_epoch = req_int(cmd, "masterEpoch")
        new_set, new_epoch = parse_sync_state_set(req_json(cmd))
        return respond(cmd, await srv.executor.write(
            lambda: d.alter_sync_state_set(srv.image, srv.live, name, master_id, master_epoch, new_set, new_epoch)))

    return {
        RequestCode.CONTROLLER_ELECT_MASTER: elect_master,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: alter_sync_state_set,
    }
