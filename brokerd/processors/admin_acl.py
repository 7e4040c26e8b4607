"""ACL 1.0 admin requests (RocketMQ's AdminBrokerProcessor + PlainPermissionManager): UPDATE_AND_CREATE_ACL_CONFIG
(50), DELETE_ACL_CONFIG (51), GET_BROKER_CLUSTER_ACL_INFO (52), UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53),
GET_BROKER_CLUSTER_ACL_CONFIG (54). They edit this broker's plain_acl.yml (``brokerd.acl.edit``), which the
broker's ACL check reloads at once (other brokers sharing the file: within a second)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from brokerd.acl.edit import (
    AccessConfig,
    acl_config,
    data_version,
    delete_account,
    read_document,
    set_global_white,
    split_list,
    update_account,
    write_document,
)
from brokerd.acl.plain import AclConfigError
from brokerd.processors.admin_common import dumps
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

ACL_OFF = "ACL is not enabled on this broker (aclEnable=false): there is no plain_acl.yml to change"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AclAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.UPDATE_AND_CREATE_ACL_CONFIG: self.update_account, c.DELETE_ACL_CONFIG: self.delete_account,
                c.GET_BROKER_CLUSTER_ACL_INFO: self.version_info, c.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.global_white,
                c.GET_BROKER_CLUSTER_ACL_CONFIG: self.acl_config}

    def _path(self) -> str | None:
        guard = self.broker.acl
        return guard.file.path if guard is not None else None

    def _write(self, path: str, doc: dict[str, object], event: str, conn: Connection, **kv: object) -> None:
        write_document(path, doc)
        guard = self.broker.acl
        if guard is not None:
            guard.file.reload_now()
        self.broker.log.info(event, path=path, remote=conn.remote_addr[0], **kv)

    def update_account(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        path = self._path()
        if path is None:
            return cmd.response(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED, ACL_OFF)
        ak = cmd.ext.get("accessKey") or ""
        cfg = AccessConfig(access_key=ak, secret_key=cmd.ext.get("secretKey"),
                           white_remote_address=cmd.ext.get("whiteRemoteAddress"), admin=cmd.bool_field("admin"),
                           default_topic_perm=cmd.ext.get("defaultTopicPerm"),
                           default_group_perm=cmd.ext.get("defaultGroupPerm"),
                           topic_perms=split_list(cmd.ext.get("topicPerms")),
                           group_perms=split_list(cmd.ext.get("groupPerms")))  # fmt: skip
        try:
            doc = update_account(read_document(path), cfg, now_ms())
            self._write(path, doc, "acl_account_updated", conn, access_key=ak)
        except (AclConfigError, OSError) as e:
            return cmd.response(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
                                f"The accessKey[{ak}] corresponding to accessConfig has been updated failed: {e}")
        return cmd.response()

    def delete_account(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        path = self._path()
        if path is None:
            return cmd.response(ResponseCode.DELETE_ACL_CONFIG_FAILED, ACL_OFF)
        ak = cmd.ext.get("accessKey") or ""
        try:
            doc = delete_account(read_document(path), ak, now_ms())
            if doc is None:
                return cmd.response(ResponseCode.DELETE_ACL_CONFIG_FAILED,
                                    f"The accessKey[{ak}] corresponding to accessConfig has been deleted failed: "
                                    "no such account")
            self._write(path, doc, "acl_account_deleted", conn, access_key=ak)
        except (AclConfigError, OSError) as e:
            return cmd.response(ResponseCode.DELETE_ACL_CONFIG_FAILED,
                                f"The accessKey[{ak}] corresponding to accessConfig has been deleted failed: {e}")
        return cmd.response()

    def global_white(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """``aclFileFullPath``, when given, must name this broker's ACL file (no other file is written)."""
        path = self._path()
        failed = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
        if path is None:
            return cmd.response(failed, ACL_OFF)
        addrs = cmd.ext.get("globalWhiteAddrs")
        named = cmd.ext.get("aclFileFullPath")
        if named and os.path.realpath(named) != os.path.realpath(path):
            return cmd.response(failed, f"The aclFileFullPath[{named}] is not this broker's ACL file")
        if addrs is None:
            return cmd.response(failed, "globalWhiteAddrs is required")
        try:
            doc = set_global_white(read_document(path), split_list(addrs) or [], now_ms())
            self._write(path, doc, "acl_global_white_updated", conn, addrs=addrs)
        except (AclConfigError, OSError) as e:
            return cmd.response(failed, f"The globalWhiteAddresses[{addrs}] has been updated failed: {e}")
        return cmd.response()

    def version_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GetBrokerAclConfigResponseHeader: the ACL data version, per file too (`allAclFileVersion`)."""
        path = self._path()
        if path is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, ACL_OFF)
        try:
            version = data_version(read_document(path))
        except AclConfigError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        cfg = self.broker.cfg
        ext = {"version": dumps(version).decode(), "allAclFileVersion": dumps({path: version}).decode(),
               "brokerName": cfg.broker_name, "brokerAddr": cfg.broker_addr, "clusterName": cfg.broker_cluster_name}
        return cmd.response(ext=ext)

    def acl_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        path = self._path()
        if path is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, ACL_OFF)
        try:
            body = acl_config(read_document(path))
        except AclConfigError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.response(body=dumps(body))
