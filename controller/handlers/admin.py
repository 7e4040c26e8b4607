"""1011 CLEAN_BROKER_DATA, 1009 UPDATE_CONTROLLER_CONFIG, 1010 GET_CONTROLLER_CONFIG."""

from __future__ import annotations

from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler
from controller.config import ConfigError, parse_properties
from controller.context import HandlerContext
from controller.handlers.wire import req_bool, req_str, respond
from controller.statemachine.decide_admin import clean_broker_data


def handlers(srv: HandlerContext) -> dict[int, Handler]:
    async def clean(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = req_str(cmd, "brokerName")
        ids = cmd.opt_str("brokerControllerIdsToClean")
        clean_living = req_bool(cmd, "isCleanLivingBroker")
        reply = await srv.executor.write(lambda: clean_broker_data(srv.image, srv.live, name, ids, clean_living))
        if reply.code == RC.SUCCESS:
            srv.forget_brokers(name, ids)
        return respond(cmd, reply)

    def update_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        text = (cmd.body or b"").decode("utf-8", "replace")
        props = parse_properties(text)
        if not props:
            return cmd.response(RC.INVALID_PARAMETER, "the body holds no key=value settings")
        try:
            srv.update_config(props)
        except ConfigError as e:
            code = RC.NO_PERMISSION if "runtime" in str(e) else RC.INVALID_PARAMETER
            return cmd.response(code, str(e))
        return cmd.response(RC.SUCCESS)

    def get_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        text = "".join(f"{k}={v}\n" for k, v in sorted(srv.cfg.to_properties().items()))
        return cmd.response(RC.SUCCESS, None, {}, text.encode())

    return {
        RequestCode.CLEAN_BROKER_DATA: clean,
        RequestCode.UPDATE_CONTROLLER_CONFIG: update_config,
        RequestCode.GET_CONTROLLER_CONFIG: get_config,
    }
