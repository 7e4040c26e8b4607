"""KV configuration requests: PUT_KV_CONFIG (100), GET_KV_CONFIG (101), DELETE_KV_CONFIG (102),
GET_KVLIST_BY_NAMESPACE (219), plus GET_NAMESRV_CONFIG (319)."""

from __future__ import annotations

import structlog

from brokerd.config_file import config_to_properties, to_properties
from brokerd.namesrv.body import dumps
from brokerd.namesrv.context import NamesrvContext
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection, Handler

log = structlog.get_logger(component="namesrv")


class KVProcessors:
    def __init__(self, ctx: NamesrvContext) -> None:
        self.ctx = ctx

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }

    def put_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = cmd.str_field("namespace")
        key = cmd.str_field("key")
        value = cmd.ext.get("value")
        if value is None:
            raise HeaderError("missing header field 'value'")
        self.ctx.kv.put(ns, key, value)
        log.info("kv_config_put", namespace=ns, key=key, remote=conn.remote_addr[0])
        return cmd.response()

    def get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = cmd.str_field("namespace")
        key = cmd.str_field("key")
        value = self.ctx.kv.get(ns, key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(ResponseCode.SUCCESS, None, {"value": value})

    def delete_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = cmd.str_field("namespace")
        key = cmd.str_field("key")
        if self.ctx.kv.delete(ns, key):
            log.info("kv_config_deleted", namespace=ns, key=key, remote=conn.remote_addr[0])
        return cmd.response()

    def get_kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = cmd.str_field("namespace")
        table = self.ctx.kv.namespace(ns)
        if table is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(ResponseCode.SUCCESS, None, {}, dumps({"table": table}))

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        text = to_properties(config_to_properties(self.ctx.cfg))
        return cmd.response(ResponseCode.SUCCESS, None, {}, text.encode())


def kv_handlers(ctx: NamesrvContext) -> dict[int, Handler]:
    return KVProcessors(ctx).table()
