"""ACL 1.0 commands: updateAclConfig, deleteAclConfig, clusterAclConfigVersion, updateGlobalWhiteAddr, getAclConfig
(RocketMQ 5.1's tools/command/acl). -b one broker; -c every broker of the cluster (masters and slaves; getAclConfig and
clusterAclConfigVersion ask the masters)."""

from __future__ import annotations

from typing import Any

from brokerd.admin import api, formats
from brokerd.admin.command import Command, Ctx, one_of
from brokerd.admin.javafmt import date_time, jstr, parse_bool
from brokerd.admin.jsonx import JSONError, loads
from brokerd.admin.options import Group, Opt, UsageError

PERMS = ("DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB")
SERIAL_VERSION_UID = -4517357000307227637  # PlainAccessConfig's static field, listed by getAclConfig


def _perm_list(text: str, what: str) -> list[str]:
    items = text.split(",")
    for item in items:
        name, eq, perm = item.partition("=")
        if not eq or not name.strip() or perm.strip() not in PERMS:
            raise UsageError(f"{what} {item!r}: expected name=DENY|PUB|SUB|PUB|SUB")
    return items


def _check_perm(value: str | None, what: str) -> str | None:
    if value is not None and value not in PERMS:
        raise UsageError(f"{what} {value!r}: expected DENY|PUB|SUB|PUB|SUB")
    return value


def account_of(ctx: Ctx) -> dict[str, Any]:
    acct: dict[str, Any] = {"accessKey": ctx.req("a"), "secretKey": ctx.get("s"), "whiteRemoteAddress": ctx.get("w"),
                            "admin": parse_bool(ctx.get("m")) if ctx.has("m") else False,
                            "defaultTopicPerm": _check_perm(ctx.get("i"), "defaultTopicPerm"),
                            "defaultGroupPerm": _check_perm(ctx.get("u"), "defaultGroupPerm"),
                            "topicPerms": _perm_list(ctx.req("t"), "topicPerm") if ctx.has("t") else None,
                            "groupPerms": _perm_list(ctx.req("g"), "groupPerm") if ctx.has("g") else None}
    return acct


def account_str(a: dict[str, Any]) -> str:
    """PlainAccessConfig.toString."""
    return (f"PlainAccessConfig{{accessKey='{jstr(a.get('accessKey'))}', "
            f"whiteRemoteAddress='{jstr(a.get('whiteRemoteAddress'))}', admin={jstr(bool(a.get('admin')))}, "
            f"defaultTopicPerm='{jstr(a.get('defaultTopicPerm'))}', defaultGroupPerm='{jstr(a.get('defaultGroupPerm'))}', "
            f"topicPerms={jstr(a.get('topicPerms'))}, groupPerms={jstr(a.get('groupPerms'))}}}")


async def _targets(ctx: Ctx, with_slaves: bool = True) -> list[str]:
    c = ctx.client
    if one_of(ctx, "b", "c") == "b":
        return [await c.check_broker_addr(ctx.req("b"))]
    return await (c.all_addrs(ctx.req("c")) if with_slaves else c.masters(ctx.req("c")))


async def update_acl_config(ctx: Ctx) -> None:
    acct = account_of(ctx)
    header = dict(acct)
    for k in ("topicPerms", "groupPerms"):
        header[k] = ",".join(acct[k]) if acct[k] is not None else None
    for addr in await _targets(ctx):
        await api.update_acl(ctx.client, addr, header)
        ctx.write(f"create or update plain access config to {addr} success.\n")
    ctx.write(account_str(acct))


async def delete_acl_config(ctx: Ctx) -> None:
    ak = ctx.req("a")
    for addr in await _targets(ctx):
        await api.delete_acl(ctx.client, addr, ak)
        ctx.write(f"delete plain access config account from {addr} success.\n")
    ctx.write(f"account's accessKey is:{ak}")


async def update_global_white_addr(ctx: Ctx) -> None:
    addrs, path = ctx.req("g"), ctx.get("p")
    for addr in await _targets(ctx):
        await api.update_global_white_addrs(ctx.client, addr, addrs, path)
        ctx.write(f"update global white remote addresses to {addr} success.\n")


VERSION_FORMAT = "%-16s  %-22s  %-22s  %-20s  %-22s  %-22s%n"


def version_rows(info: dict[str, str]) -> str:
    try:
        files = loads(info.get("allAclFileVersion") or "{}")
    except JSONError:
        files = {}
    out = []
    for path, v in (files or {}).items():
        v = v if isinstance(v, dict) else {}
        out.append(formats.jf(VERSION_FORMAT, info.get("clusterName"), info.get("brokerName"), info.get("brokerAddr"),
                              path, str(int(v.get("counter") or 0)), date_time(int(v.get("timestamp") or 0))))
    return "".join(out)


async def cluster_acl_config_version(ctx: Ctx) -> None:
    c = ctx.client
    if one_of(ctx, "b", "c") == "b":
        addr = await c.check_broker_addr(ctx.req("b"))
        ctx.write(version_rows(await api.acl_version_info(c, addr)))
        ctx.write(f"get broker's plain access config version success. Address:{addr} \n")
        return
    masters = await c.masters(ctx.req("c"))
    ctx.write(formats.jf(VERSION_FORMAT, "#Cluster Name", "#Broker Name", "#Broker Addr", "#AclFilePath",
                         "#AclConfigVersionNum", "#AclLastUpdateTime"))
    for addr in masters:
        ctx.write(version_rows(await api.acl_version_info(c, addr)))
    ctx.write("get cluster's plain access config version success.\n")


ACCOUNT_FIELDS = ("accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm", "defaultGroupPerm",
                  "topicPerms", "groupPerms")


def acl_config_text(cfg: dict[str, Any]) -> str:
    out = ["\n", formats.jf("%-20s: %s\n", "globalWhiteRemoteAddresses", jstr(cfg.get("globalWhiteAddrs") or [])),
           "\n", "accounts:\n"]
    for acct in cfg.get("plainAccessConfigs") or []:
        out.append(formats.jf("%-1s %-18s: %s\n", "", "serialVersionUID", SERIAL_VERSION_UID))
        for k in ACCOUNT_FIELDS:
            v = acct.get(k, False if k == "admin" else None)
            out.append(formats.jf("%-1s %-18s: %s\n", "", k, "" if v is None else jstr(v)))
        out.append("\n")
    return "".join(out)


async def get_acl_config(ctx: Ctx) -> None:
    for addr in await _targets(ctx, with_slaves=False):
        ctx.write(acl_config_text(await api.acl_config(ctx.client, addr)))


def _b_or_c(what: str, cluster: str = "which cluster") -> Group:
    return Group((Opt("b", "brokerAddr", True, f"{what} which broker"),
                  Opt("c", "clusterName", True, f"{what} {cluster}")), required=True)


COMMANDS = (
    Command("updateAclConfig", "Update acl config yaml file in broker.", (
        _b_or_c("update acl config file to"),
        Opt("a", "accessKey", True, "set accessKey in acl config file", required=True),
        Opt("s", "secretKey", True, "set secretKey in acl config file", required=True),
        Opt("w", "whiteRemoteAddress", True, "set white ip Address for account in acl config file"),
        Opt("i", "defaultTopicPerm", True, "set default topicPerm in acl config file"),
        Opt("u", "defaultGroupPerm", True, "set default GroupPerm in acl config file"),
        Opt("t", "topicPerms", True, "set topicPerms list,eg: topicA=DENY,topicD=SUB"),
        Opt("g", "groupPerms", True, "set groupPerms list,eg: groupD=DENY,groupD=SUB"),
        Opt("m", "admin", True, "set admin flag in acl config file")), update_acl_config),
    Command("deleteAclConfig", "Delete Acl Config Account in broker.", (
        _b_or_c("delete acl config account from"),
        Opt("a", "accessKey", True, "set accessKey in acl config file for deleting which account", required=True)),
        delete_acl_config, alias="deleteAccessConfig"),
    Command("clusterAclConfigVersion", "List all of acl config version information in cluster.", (
        _b_or_c("query acl config version for", "specified cluster"),), cluster_acl_config_version),
    Command("updateGlobalWhiteAddr", "Update global white address for acl Config File in broker.", (
        _b_or_c("update global white address to"),
        Opt("g", "globalWhiteRemoteAddresses", True, "set globalWhiteRemoteAddress list,eg: 10.10.103.*,192.168.0.*",
            required=True),
        Opt("p", "aclFileFullPath", True, "update global white address of specified acl file,eg: /xxx/plain_test.yml")),
        update_global_white_addr),
    Command("getAclConfig", "List all of acl config information in cluster.", (
        _b_or_c("query acl config version for", "specified cluster"),), get_acl_config,
        alias="getAccessConfigSubCommand"),
)
