"""Name-server admin requests: UPDATE_NAMESRV_CONFIG (318), GET_SYSTEM_TOPIC_LIST_FROM_NS (304) and the unit topic
lists GET_UNIT_TOPIC_LIST (311), GET_HAS_UNIT_SUB_TOPIC_LIST (312), GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313)."""

from __future__ import annotations

from typing import Final

import structlog

from brokerd.config_file import BlacklistedKey, ConfigError, config_update
from brokerd.namesrv.body import dumps
from brokerd.namesrv.context import NamesrvContext
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler

log = structlog.get_logger(component="namesrv")

# RocketMQ's configBlackList (configBlackList;configStorePath;kvConfigPath, rocketmqHome) plus what would move the
# listening socket or weaken the ACL of a running name server
CONFIG_BLACKLIST: Final = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome",
                                     "listenPort", "bindAddress", "aclEnable", "aclFilePath"})


class AdminProcessors:
    def __init__(self, ctx: NamesrvContext) -> None:
        self.ctx = ctx

    def table(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.UPDATE_NAMESRV_CONFIG: self.update_config, c.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topics,
                c.GET_UNIT_TOPIC_LIST: self.unit_topics, c.GET_HAS_UNIT_SUB_TOPIC_LIST: self.unit_sub_topics,
                c.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.unit_sub_ununit_topics}

    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Body: `key=value` lines. Black-listed keys answer NO_PERMISSION, an unknown key or a bad value
        SYSTEM_ERROR naming it; nothing is changed then."""
        if not cmd.body:
            return cmd.response()
        try:
            props = config_update(cmd.body, CONFIG_BLACKLIST)
            self.ctx.update_config(props)
        except ConfigError as e:
            code = ResponseCode.NO_PERMISSION if isinstance(e, BlacklistedKey) else ResponseCode.SYSTEM_ERROR
            return cmd.response(code, str(e))
        log.info("namesrv_config_updated", keys=sorted(props), remote=conn.remote_addr[0])
        return cmd.response()

    def system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=dumps(self.ctx.routes.system_topics()))

    def _flagged(self, cmd: RemotingCommand, unit: bool | None, unit_sub: bool | None) -> RemotingCommand:
        if not self.ctx.cfg.enable_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        return cmd.response(body=dumps({"topicList": self.ctx.routes.topics_with_sys_flag(unit, unit_sub)}))

    def unit_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._flagged(cmd, True, None)

    def unit_sub_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._flagged(cmd, None, True)

    def unit_sub_ununit_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._flagged(cmd, False, True)


def admin_handlers(ctx: NamesrvContext) -> dict[int, Handler]:
    return AdminProcessors(ctx).table()
