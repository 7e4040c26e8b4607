"""Broker and cluster commands: clusterList, brokerStatus, getBrokerConfig, updateBrokerConfig, cleanExpiredCQ,
cleanUnusedTopic, deleteExpiredCommitLog, statsAll, clusterRT, haStatus (RocketMQ's tools/command/broker, cluster,
stats, ha). getBrokerConfig/updateBrokerConfig also reach a broker through its container's admin port
(--brokerContainerAddr, --brokerIdentity: options RocketMQ's commands do not have)."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
from collections.abc import Awaitable, Callable

from brokerd.admin import api, formats, messaging
from brokerd.admin.client import AdminClient, AdminError
from brokerd.admin.cmd_group import examine_consume_stats
from brokerd.admin.command import Command, Ctx
from brokerd.admin.javafmt import java_hash_order, java_properties_order, java_set_order, parse_bool
from brokerd.admin.model import StatsItem, broker_stats, compute_24h_sum
from brokerd.admin.options import Group, Opt, UsageError
from brokerd.config_file import parse_properties
from brokerd.message.javahash import java_string_hash
from brokerd.metadata.names import is_retry_or_dlq_topic


def java_props_order(props: dict[str, str]) -> dict[str, str]:
    """java.util.Properties' iteration order of keys loaded in this order."""
    items = list(props.items())
    return dict(items[i] for i in java_properties_order([java_string_hash(k) for k, _ in items]))


async def _repeat(ctx: Ctx, interval: float | None, body: Callable[[], Awaitable[None]]) -> None:
    """Once, or every `interval` seconds until interrupted (each round's output flushed as it is printed)."""
    await body()
    ctx.out.flush()
    while interval is not None:
        await asyncio.sleep(interval)  # sleep-ok: the operator's refresh interval
        await body()
        ctx.out.flush()


# -- clusterList / brokerStatus ------------------------------------------------------------------------------------

async def cluster_list(ctx: Ctx) -> None:
    c = ctx.client
    interval = ctx.int_opt("i", 1) if ctx.has("i") else None
    wanted = ctx.get("c") or ""

    async def once() -> None:
        ci = await c.cluster_info(fresh=True)
        if wanted and wanted not in ci.clusters:
            raise AdminError(f"cluster {wanted} not found. Make sure the specified clusterName exists or the name "
                             "server connected to is correct.")
        names = list(ci.clusters)
        clusters = [wanted] if wanted else java_set_order(names)
        more = ctx.has("m")
        ctx.write(formats.cluster_more_header() if more else formats.cluster_base_header())
        for cluster, name, bid, addr in formats.cluster_rows(ci, clusters):
            try:
                table = await api.runtime_info(c, addr)
            except AdminError as e:
                print(f"mqadmin clusterList: {addr}: {e}", file=sys.stderr)
                table = {}
            if more:
                ctx.write(formats.cluster_more_row(cluster, name, table))
            else:
                ctx.write(formats.cluster_base_row(cluster, name, bid, addr, table, formats.now_ms()))

    await _repeat(ctx, interval, once)


async def broker_status(ctx: Ctx) -> None:
    c = ctx.client
    if ctx.has("b"):
        addr = await c.check_broker_addr(ctx.req("b"))
        ctx.write(formats.broker_status(await api.runtime_info(c, addr)))
        return
    for addr in await c.all_addrs(ctx.req("c")):
        try:
            ctx.write(formats.broker_status(await api.runtime_info(c, addr), addr))
        except AdminError as e:
            print(f"mqadmin brokerStatus: {addr}: {e}", file=sys.stderr)


# -- getBrokerConfig / updateBrokerConfig --------------------------------------------------------------------------

def container_target(ctx: Ctx) -> tuple[str, dict[str, str]] | None:
    """(container admin address, broker identity header) of the container variant, None for RocketMQ's."""
    if not ctx.has("brokerContainerAddr"):
        if ctx.has("brokerIdentity"):
            raise UsageError("--brokerIdentity needs --brokerContainerAddr")
        return None
    ident: dict[str, str] = {}
    if ctx.has("brokerIdentity"):
        parts = ctx.req("brokerIdentity").split(":")
        if len(parts) != 3 or not parts[2].strip().isdigit():
            raise UsageError(f"--brokerIdentity: expected clusterName:brokerName:brokerId, got {ctx.req('brokerIdentity')!r}")
        ident = {"brokerClusterName": parts[0].strip(), "brokerName": parts[1].strip(), "brokerId": parts[2].strip()}
    return ctx.req("brokerContainerAddr"), ident


async def _print_config(ctx: Ctx, header: str, addr: str, ext: dict[str, str] | None = None) -> None:
    ctx.write(header)
    props = parse_properties(await api.broker_config(ctx.client, addr, ext))
    ctx.write(formats.config_lines(java_props_order(props)) + "\n")


async def get_broker_config(ctx: Ctx) -> None:
    c = ctx.client
    target = container_target(ctx)
    if target is not None:
        container, ident = target
        label = ":".join(ident.values()) if ident else container
        await _print_config(ctx, f"============{label}============\n", container, ident)
        return
    if ctx.has("b"):
        addr = await c.check_broker_addr(ctx.req("b"))
        await _print_config(ctx, f"============{addr}============\n", addr)
        return
    if not ctx.has("c"):
        raise UsageError("Missing required option: -b brokerAddr or -c clusterName")
    await c.cluster_names(ctx.req("c"))
    sets = (await c.cluster_info()).masters_and_slaves(ctx.req("c"))
    keys = [java_string_hash(m or "NO_MASTER") for m, _ in sets]  # a HashMap(4) keyed by the master's address
    for master, slaves in (sets[i] for i in java_hash_order(keys, capacity=4)):
        if master is None:
            ctx.write("============Master: NO_MASTER============\n")
        else:
            await _print_config(ctx, f"============Master: {master}============\n", master)
        for slave in slaves:
            await _print_config(ctx, f"============My Master: {master or 'NO_MASTER'}=====Slave: {slave}============\n",
                                slave)


def check_broker_config(key: str, value: str) -> None:
    """Validators.checkBrokerConfig: brokerPermission must be a valid permission."""
    if key == "brokerPermission" and not (value.isdigit() and 0 <= int(value) < 8):
        raise UsageError(f"brokerPermission value: {value} is invalid.")


async def update_broker_config(ctx: Ctx) -> None:
    key, value = ctx.req("k"), ctx.req("v")
    check_broker_config(key, value)
    c = ctx.client
    target = container_target(ctx)
    if target is not None:
        container, ident = target
        await api.update_broker_config(c, container, {key: value}, ident)
        ctx.write(f"update broker config success, {':'.join(ident.values()) if ident else container}\n")
        return
    if ctx.has("b"):
        addr = await c.check_broker_addr(ctx.req("b"))
        await api.update_broker_config(c, addr, {key: value})
        ctx.write(f"update broker config success, {addr}\n")
        return
    if not ctx.has("c"):
        raise UsageError("Missing required option: -b brokerAddr or -c clusterName")
    cluster = ctx.req("c")
    addrs = await c.all_addrs(cluster) if ctx.has("a") else await c.masters(cluster)
    failed = []
    for addr in addrs:
        try:
            await api.update_broker_config(c, addr, {key: value})
            ctx.write(f"update broker config success, {addr}\n")
        except AdminError as e:
            failed.append(str(e))
    if failed:
        raise AdminError("; ".join(failed))


# -- cleanExpiredCQ / cleanUnusedTopic / deleteExpiredCommitLog ----------------------------------------------------

def _broker_action(code: int) -> Callable[[Ctx], Awaitable[None]]:
    async def run(ctx: Ctx) -> None:
        c = ctx.client
        if ctx.has("b"):
            addrs = [await c.check_broker_addr(ctx.req("b"))]
        elif ctx.get("c"):
            addrs = await c.all_addrs(ctx.req("c"))
        else:
            ci = await c.cluster_info()
            addrs = [a for cl in ci.clusters for a in ci.all_addrs(cl)]
        result = False
        for addr in addrs:
            result = await api.broker_action(c, addr, code)
        ctx.write("success" if result else "false")
    return run


# -- statsAll ------------------------------------------------------------------------------------------------------

async def _stats(c: AdminClient, addr: str, name: str, key: str) -> dict[str, StatsItem] | None:
    try:
        return broker_stats(await api.stats_data(c, addr, name, key))
    except AdminError:
        return None


async def topic_detail(ctx: Ctx, topic: str, active_only: bool) -> None:
    c = ctx.client
    route = await c.route(topic)
    masters = [a for b in route.broker_datas if (a := b.master())]
    addr = next((a for b in route.broker_datas if (a := b.select_addr())), None)
    groups = await api.consumed_by(c, addr, topic) if addr else []
    in_tps, in_24h = 0.0, 0
    for m in masters:
        s = await _stats(c, m, "TOPIC_PUT_NUMS", topic)
        if s is not None:
            in_tps += s["statsMinute"].tps
            in_24h += compute_24h_sum(s)
    if not groups:
        if not active_only or in_24h > 0:
            ctx.write(formats.stats_all_row(topic, None, 0, in_tps, 0.0, in_24h, 0))
        return
    for group in groups:
        out_tps, out_24h = 0.0, 0
        for m in masters:
            s = await _stats(c, m, "GROUP_GET_NUMS", f"{topic}@{group}")
            if s is not None:
                out_tps += s["statsMinute"].tps
                out_24h += compute_24h_sum(s)
        try:
            accumulate = max(0, (await examine_consume_stats(c, group, topic)).total_diff())
        except AdminError:
            accumulate = 0
        if not active_only or in_24h > 0 or out_24h > 0:
            ctx.write(formats.stats_all_row(topic, group, accumulate, in_tps, out_tps, in_24h, out_24h))


async def stats_all(ctx: Ctx) -> None:
    c = ctx.client
    topics = await api.all_topics(c)
    ctx.write(formats.stats_all_header())
    selected = ctx.get("t")
    for topic in topics:
        if is_retry_or_dlq_topic(topic) or (selected and topic != selected):
            continue
        try:
            await topic_detail(ctx, topic, ctx.has("a"))
        except AdminError as e:
            print(f"mqadmin statsAll: {topic}: {e}", file=sys.stderr)


# -- clusterRT / haStatus ------------------------------------------------------------------------------------------

async def cluster_rt(ctx: Ctx) -> None:
    amount, size, interval = ctx.int_opt("a", 100), ctx.int_opt("s", 128), ctx.int_opt("i", 10)
    tlog, room = parse_bool(ctx.get("p")), ctx.get("m") or "noname"
    c = ctx.client
    ci = await c.cluster_info()
    clusters = [ctx.req("c")] if ctx.has("c") else sorted(ci.clusters)
    if not tlog:
        ctx.write(formats.jf("%-24s  %-24s  %-4s  %-8s  %-8s%n", "#Cluster Name", "#Broker Name", "#RT",
                             "#successCount", "#failCount"))
    group = str(int(time.time() * 1000))

    async def once() -> None:
        for cluster in clusters:
            names = ci.names_in(cluster)
            if names is None:
                raise AdminError(f"cluster [{cluster}] not exist")
            for name in names:
                route = await c.route(name)
                ok = fail = 0
                elapsed = 0.0
                for i in range(amount):
                    start = time.monotonic()
                    try:
                        await messaging.send(c, group, name, b"a" * size, messaging.message_properties(None, None),
                                             route, retries=0)
                        ok += 1
                    except AdminError:
                        fail += 1
                    if i:
                        elapsed += (time.monotonic() - start) * 1000
                rt = elapsed / (amount - 1) if amount > 1 else float("nan")
                if tlog:
                    now = dt.datetime.now(dt.timezone(dt.timedelta(hours=8))).strftime("%Y-%m-%d %H:%M:%S")
                    ctx.write(f"{now}|{room}|{cluster}|{name}|{round(rt)}\n")
                else:
                    ctx.write(formats.jf("%-24s  %-24s  %-8s  %-16s  %-16s%n", cluster, name, f"{rt:.2f}", ok, fail))

    await _repeat(ctx, float(interval), once)


async def ha_status(ctx: Ctx) -> None:
    c = ctx.client
    interval = float(ctx.int_opt("i", 3)) if ctx.has("i") else None
    if not ctx.has("b") and not ctx.has("c"):
        raise UsageError("Missing required option: -b brokerAddr or -c clusterName")

    async def once() -> None:
        addrs = [await c.check_broker_addr(ctx.req("b"))] if ctx.has("b") else await c.masters(ctx.req("c"))
        for addr in addrs:
            ctx.write(formats.ha_status(addr, await api.ha_status(c, addr)))

    await _repeat(ctx, interval, once)


CONTAINER_OPTS = (Opt(None, "brokerContainerAddr", True, "reach the broker through this container's admin port"),
                  Opt(None, "brokerIdentity", True, "clusterName:brokerName:brokerId of the broker in the container"))
B_OR_C = (Opt("b", "brokerAddr", True, "Broker address"), Opt("c", "cluster", True, "clustername"))

COMMANDS = (
    Command("clusterList", "List cluster infos.", (
        Opt("m", "moreStats", False, "Print more stats"),
        Opt("i", "interval", True, "specify intervals numbers, it is in seconds"),
        Opt("c", "clusterName", True, "which cluster")), cluster_list),
    Command("brokerStatus", "Fetch broker runtime status data.", (
        Group((Opt("b", "brokerAddr", True, "Broker address"), Opt("c", "clusterName", True, "which cluster")),
              required=True),), broker_status),
    Command("getBrokerConfig", "Get broker config by cluster or special broker.", (
        Opt("b", "brokerAddr", True, "get which broker"), Opt("c", "clusterName", True, "get which cluster"),
        *CONTAINER_OPTS), get_broker_config),
    Command("updateBrokerConfig", "Update broker's config.", (
        Opt("b", "brokerAddr", True, "update which broker"), Opt("c", "clusterName", True, "update which cluster"),
        Opt("a", "updateAllBroker", True, "update all brokers include slave"),
        Opt("k", "key", True, "config key", required=True), Opt("v", "value", True, "config value", required=True),
        *CONTAINER_OPTS), update_broker_config),
    Command("cleanExpiredCQ", "Clean expired ConsumeQueue on broker.", B_OR_C, _broker_action(api.Code.CLEAN_EXPIRED_CONSUMEQUEUE)),
    Command("cleanUnusedTopic", "Clean unused topic on broker.", (
        Opt("b", "brokerAddr", True, "Broker address"), Opt("c", "cluster", True, "cluster name")),
        _broker_action(api.Code.CLEAN_UNUSED_TOPIC)),
    Command("deleteExpiredCommitLog", "Delete expired CommitLog files.", (
        Opt("n", "namesrvAddr", True, "Name server address"), *B_OR_C),
        _broker_action(api.Code.DELETE_EXPIRED_COMMITLOG)),
    Command("statsAll", "Topic and Consumer tps stats.", (
        Opt("a", "activeTopic", False, "print active topic only"), Opt("t", "topic", True, "print select topic only")),
        stats_all),
    Command("clusterRT", "List All clusters Message Send RT.", (
        Opt("a", "amount", True, "message amount | default 100"), Opt("s", "size", True, "message size | default 128 Byte"),
        Opt("c", "cluster", True, "cluster name | default display all cluster"),
        Opt("p", "print log", True, "print as tlog | default false"),
        Opt("m", "machine room", True, "machine room name | default noname"),
        Opt("i", "interval", True, "print interval | default 10 seconds")), cluster_rt),
    Command("haStatus", "Fetch ha runtime status data.", (
        Opt("c", "clusterName", True, "which cluster"), Opt("b", "brokerAddr", True, "which broker to fetch"),
        Opt("i", "interval", True, "the interval(second) of get info")), ha_status),
)
