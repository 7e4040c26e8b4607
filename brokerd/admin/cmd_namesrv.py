"""Name server commands: getNamesrvConfig, updateNamesrvConfig, updateKvConfig, deleteKvConfig, wipeWritePerm,
addWritePerm (RocketMQ's tools/command/namesrv). Every one acts on each name server of -n / NAMESRV_ADDR."""

from __future__ import annotations

from brokerd.admin import api, formats
from brokerd.admin.client import AdminError
from brokerd.admin.cmd_broker import java_props_order
from brokerd.admin.command import Command, Ctx
from brokerd.admin.javafmt import java_hash_order, jstr
from brokerd.admin.options import Opt, UsageError
from brokerd.message.javahash import java_string_hash


async def get_namesrv_config(ctx: Ctx) -> None:
    c = ctx.client
    addrs = c.require_namesrv()
    configs = {addr: await api.namesrv_config(c, addr) for addr in addrs}
    for i in java_hash_order([java_string_hash(a) for a in addrs]):  # a HashMap by address
        ctx.write(f"============{addrs[i]}============\n")
        ctx.write(formats.config_lines(java_props_order(configs[addrs[i]])))


async def update_namesrv_config(ctx: Ctx) -> None:
    key, value = ctx.req("k"), ctx.req("v")
    c = ctx.client
    for addr in c.require_namesrv():
        await api.update_namesrv_config(c, addr, {key: value})
    ctx.write(f"update name server config success!{jstr(c.require_namesrv())}\n{key} : {value}\n")


async def update_kv_config(ctx: Ctx) -> None:
    namespace, key, value = ctx.req("s"), ctx.req("k"), ctx.req("v")
    if not namespace or not key:
        raise UsageError("namespace and key must not be blank")
    await api.kv_put(ctx.client, namespace, key, value)
    ctx.write("create or update kv config to namespace success.\n")


async def delete_kv_config(ctx: Ctx) -> None:
    await api.kv_delete(ctx.client, ctx.req("s"), ctx.req("k"))
    ctx.write("delete kv config from namespace success.\n")


async def _write_perm(ctx: Ctx, wipe: bool) -> None:
    name = ctx.req("b")
    c = ctx.client
    await c.check_broker_name(name)
    failed = []
    for ns in c.require_namesrv():
        try:
            count = await (api.wipe_write_perm(c, ns, name) if wipe else api.add_write_perm(c, ns, name))
        except AdminError as e:
            ctx.write(f"{'wipe' if wipe else 'add'} write perm of broker[{name}] in name server[{ns}] Failed\n")
            failed.append(str(e))
            continue
        ctx.write(f"{'wipe' if wipe else 'add'} write perm of broker[{name}] in name server[{ns}] OK, {count}\n")
    if failed:
        raise AdminError("; ".join(failed))


async def wipe_write_perm(ctx: Ctx) -> None:
    await _write_perm(ctx, True)


async def add_write_perm(ctx: Ctx) -> None:
    await _write_perm(ctx, False)


KV = (Opt("s", "namespace", True, "set the namespace", required=True),
      Opt("k", "key", True, "set the key name", required=True))

COMMANDS = (
    Command("getNamesrvConfig", "Get configs of name server.", (), get_namesrv_config),
    Command("updateNamesrvConfig", "Update configs of name server.", (
        Opt("k", "key", True, "config key", required=True), Opt("v", "value", True, "config value", required=True)),
        update_namesrv_config),
    Command("updateKvConfig", "Create or update KV config.", (
        *KV, Opt("v", "value", True, "set the key value", required=True)), update_kv_config),
    Command("deleteKvConfig", "Delete KV config.", KV, delete_kv_config),
    Command("wipeWritePerm", "Wipe write perm of broker in all name server you defined in the -n param.", (
        Opt("b", "brokerName", True, "broker name", required=True),), wipe_write_perm),
    Command("addWritePerm", "Add write perm of broker in all name server you defined in the -n param.", (
        Opt("b", "brokerName", True, "broker name", required=True),), add_write_perm),
)
