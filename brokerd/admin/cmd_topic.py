"""Topic commands: updateTopic, deleteTopic, topicList, topicRoute, topicStatus, topicClusterList, updateTopicPerm,
updateOrderConf, allocateMQ (RocketMQ's tools/command/topic)."""

from __future__ import annotations

from typing import Any

from brokerd.admin import api, formats
from brokerd.admin.client import AdminClient, AdminError
from brokerd.admin.command import Command, Ctx, parse_attributes
from brokerd.admin.javafmt import java_hash_order, parse_bool
from brokerd.admin.jsonx import compact
from brokerd.admin.model import MessageQueue, TopicOffset, TopicRoute
from brokerd.admin.options import Group, Opt, UsageError
from brokerd.message.javahash import java_string_hash
from brokerd.metadata.names import is_retry_or_dlq_topic, validate_topic

T_OPT = Opt("t", "topic", True, "topic name", required=True)


def topic_of(ctx: Ctx, key: str = "t") -> str:
    topic = ctx.req(key)
    problem = validate_topic(topic)
    if problem:
        raise UsageError(problem)
    return topic


def check_perm(perm: int) -> int:
    if not 0 <= perm < 8:
        raise UsageError(f"topicPermission value: {perm} is invalid.")
    return perm


async def _exists_somewhere(c: AdminClient, topic: str, addrs: list[str]) -> bool:
    for addr in addrs:
        if await api.topic_config(c, addr, topic) is not None:
            return True
    return False


# -- updateTopic ---------------------------------------------------------------------------------------------------

def topic_config_from(ctx: Ctx) -> dict[str, Any]:
    tc: dict[str, Any] = {"topicName": topic_of(ctx), "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
                          "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}}
    if ctx.has("a"):
        tc["attributes"] = parse_attributes(ctx.req("a"))
    tc["readQueueNums"] = ctx.int_opt("r", 8)
    tc["writeQueueNums"] = ctx.int_opt("w", 8)
    tc["perm"] = check_perm(ctx.int_opt("p", 6))
    unit, center_sync = parse_bool(ctx.get("u")), parse_bool(ctx.get("s"))
    tc["topicSysFlag"] = (1 if unit else 0) | (2 if center_sync else 0)  # TopicSysFlag.buildSysFlag
    tc["order"] = parse_bool(ctx.get("o"))
    for k in ("readQueueNums", "writeQueueNums"):
        if not 0 < tc[k] <= 1024:
            raise UsageError(f"{k} {tc[k]} is out of range 1..1024")
    return tc


async def update_topic(ctx: Ctx) -> None:
    tc = topic_config_from(ctx)
    c = ctx.client
    if ctx.has("b"):
        addr = await c.check_broker_addr(ctx.req("b"))
        await api.create_topic(c, addr, tc)
        if tc["order"]:
            name = await c.broker_name_of(addr)
            conf = f"{name}:{tc['writeQueueNums']}"
            old = await api.kv_get(c, api.NAMESPACE_ORDER_TOPIC_CONFIG, tc["topicName"]) or ""
            merged = {i.split(":")[0]: i for i in old.split(";") if i}
            merged[name] = conf
            await api.kv_put(c, api.NAMESPACE_ORDER_TOPIC_CONFIG, tc["topicName"], ";".join(merged.values()))
            ctx.write(f"set broker orderConf. isOrder=true, orderConf=[{conf}]\n")
        ctx.write(f"create topic to {addr} success.\n{formats.topic_config_str(tc)}\n")
        return
    cluster = ctx.req("c")
    for addr in await c.masters(cluster):
        await api.create_topic(c, addr, tc)
        ctx.write(f"create topic to {addr} success.\n")
    if tc["order"]:
        conf = ";".join(f"{n}:{tc['writeQueueNums']}" for n in await c.cluster_names(cluster))
        await api.kv_put(c, api.NAMESPACE_ORDER_TOPIC_CONFIG, tc["topicName"], conf)
        ctx.write(f"set cluster orderConf. isOrder=true, orderConf=[{conf}]\n")
    ctx.write(formats.topic_config_str(tc) + "\n")


# -- deleteTopic ---------------------------------------------------------------------------------------------------

async def delete_topic(ctx: Ctx) -> None:
    topic, cluster = topic_of(ctx), ctx.req("c")
    c = ctx.client
    masters = await c.masters(cluster)
    try:
        await c.route(topic)
    except AdminError:
        if not await _exists_somewhere(c, topic, masters):
            raise AdminError(f"topic {topic} does not exist in cluster {cluster}") from None
    for addr in masters:
        await api.delete_topic_in_broker(c, addr, topic)
    ctx.write(f"delete topic [{topic}] from cluster [{cluster}] success.\n")
    for ns in c.require_namesrv():
        await api.delete_topic_in_namesrv(c, ns, topic, cluster)
    ctx.write(f"delete topic [{topic}] from NameServer success.\n")


# -- topicList / topicRoute / topicStatus / topicClusterList -------------------------------------------------------

async def topic_list(ctx: Ctx) -> None:
    c = ctx.client
    topics = await api.all_topics(c)
    if not ctx.has("c"):
        ctx.write("".join(f"{t}\n" for t in topics))
        return
    ci = await c.cluster_info()
    ctx.write(formats.topic_list_cluster_header())
    for topic in topics:
        if is_retry_or_dlq_topic(topic):
            continue
        cluster, groups = "", [""]
        try:
            route = await c.route(topic)
            cluster = ci.cluster_of(route.broker_datas[0].broker_name) or "" if route.broker_datas else ""
            addr = next((a for b in route.broker_datas if (a := b.select_addr())), None)
            if addr is not None:
                groups = await api.consumed_by(c, addr, topic) or [""]
        except AdminError:
            pass
        ctx.write("".join(formats.topic_list_cluster_row(cluster, topic, g) for g in groups))


async def topic_route(ctx: Ctx) -> None:
    route = await ctx.client.route(topic_of(ctx))
    ctx.write(formats.topic_route_list(route) if ctx.has("l") else formats.topic_route_json(route))


async def stats_over(c: AdminClient, route: TopicRoute, topic: str) -> tuple[dict[MessageQueue, TopicOffset], float]:
    """The topic's stats from each broker of the route (its master, else a replica) and the summed put TPS."""
    table: dict[MessageQueue, TopicOffset] = {}
    tps = 0.0
    for b in route.broker_datas:
        addr = b.select_addr()
        if addr is not None:
            offsets, put_tps = await api.topic_stats_tps(c, addr, topic)
            table.update(offsets)
            tps += put_tps
    return table, tps


async def topic_status(ctx: Ctx) -> None:
    topic = topic_of(ctx)
    c = ctx.client
    route = await c.route(ctx.req("c") if ctx.has("c") else topic)
    table, tps = await stats_over(c, route, topic)
    if not table and not ctx.has("c"):
        raise AdminError(f"Not found the topic stats info of {topic}")
    ctx.write(formats.topic_status(table, tps))


async def topic_cluster_list(ctx: Ctx) -> None:
    c = ctx.client
    route = await c.route(topic_of(ctx))
    ci = await c.cluster_info()
    if not route.broker_datas:
        raise AdminError("the topic's route has no broker")
    name = route.broker_datas[0].broker_name
    ctx.write("".join(f"{cl}\n" for cl, names in sorted(ci.clusters.items()) if name in names))


# -- updateTopicPerm -----------------------------------------------------------------------------------------------

async def update_topic_perm(ctx: Ctx) -> None:
    topic = topic_of(ctx)
    perm = check_perm(ctx.int_opt("p", 6))
    if not ctx.has("b") and not ctx.has("c"):
        raise UsageError("Missing required option: -b brokerAddr or -c clusterName")
    c = ctx.client
    route = await c.route(topic)
    if not route.queue_datas:
        raise AdminError(f"topic {topic} has no queue data in its route")
    q0 = route.queue_datas[0]
    tc: dict[str, Any] = {"topicName": topic, "readQueueNums": q0.read_queue_nums, "perm": perm,
                          "writeQueueNums": q0.write_queue_nums, "topicSysFlag": q0.topic_sys_flag}
    if ctx.has("b"):
        addr = ctx.req("b")
        name = next((b.broker_name for b in route.broker_datas if b.master() == addr), None)
        if name is None:
            raise AdminError("updateTopicPerm error broker not exit or broker is not master!.")
        qd = route.queue_data(name)
        old = qd.perm if qd else 0
        if old == perm:
            ctx.write("new perm equals to the old one!\n")
            return
        await api.create_topic(c, addr, tc)
        ctx.write(f"update topic perm from {old} to {perm} in {addr} success.\n{formats.topic_config_str(tc)}.\n")
        return
    for addr in await c.masters(ctx.req("c")):
        await api.create_topic(c, addr, tc)
        ctx.write(f"update topic perm from {q0.perm} to {perm} in {addr} success.\n")


# -- updateOrderConf -----------------------------------------------------------------------------------------------

async def update_order_conf(ctx: Ctx) -> None:
    topic, method = topic_of(ctx), ctx.req("m")
    c = ctx.client
    ns = api.NAMESPACE_ORDER_TOPIC_CONFIG
    if method == "get":
        conf = await api.kv_get(c, ns, topic)
        if conf is None:
            raise AdminError(f"No config item, Namespace: {ns} Key: {topic}")
        ctx.write(f"get orderConf success. topic=[{topic}], orderConf=[{conf}] ")
    elif method == "put":
        conf = (ctx.get("v") or "").strip()
        if not conf:
            raise UsageError("please set orderConf with option -v.")
        for item in conf.split(";"):
            name, _, num = item.partition(":")
            if not name or not num.strip().isdigit():
                raise UsageError(f"orderConf item {item!r}: expected brokerName:queueNum")
        await api.kv_put(c, ns, topic, conf)
        ctx.write(f"update orderConf success. topic=[{topic}], orderConf=[{conf}]")
    elif method == "delete":
        await api.kv_delete(c, ns, topic)
        ctx.write(f"delete orderConf success. topic=[{topic}]")
    else:
        raise UsageError(f"option -m: unknown method {method!r} (put|get|delete)")


# -- allocateMQ ----------------------------------------------------------------------------------------------------

def allocate_averagely(mqs: list[MessageQueue], cids: list[str], cid: str) -> list[MessageQueue]:
    """AllocateMessageQueueAveragely.allocate."""
    if cid not in cids or not mqs:
        return []
    index, n, size = cids.index(cid), len(mqs), len(cids)
    mod = n % size
    avg = (n // size + 1 if mod > 0 and index < mod else n // size) if n > size else 1
    start = index * avg if mod > 0 and index < mod else index * avg + mod
    return [mqs[(start + i) % n] for i in range(min(avg, n - start))]


async def allocate_mq(ctx: Ctx) -> None:
    topic = topic_of(ctx)
    ips = ctx.req("i").split(",")
    route = await ctx.client.route(topic)
    mqs = route.subscribe_queues(topic)  # new ArrayList<>(HashSet)
    order = java_hash_order([java_string_hash(ip) for ip in ips])
    result = {ips[i]: [mq.to_json() for mq in allocate_averagely(mqs, ips, ips[i])] for i in order}
    ctx.write(compact({"result": result}) + "\n")


COMMANDS = (
    Command("updateTopic", "Update or create topic.", (
        Group((Opt("b", "brokerAddr", True, "create topic to which broker"),
               Opt("c", "clusterName", True, "create topic to which cluster")), required=True),
        Opt("a", "attributes", True, "attribute(+a=b,+c=d,-e)"), T_OPT,
        Opt("r", "readQueueNums", True, "set read queue nums"), Opt("w", "writeQueueNums", True, "set write queue nums"),
        Opt("p", "perm", True, "set topic's permission(2|4|6), intro[2:W 4:R; 6:RW]"),
        Opt("o", "order", True, "set topic's order(true|false)"), Opt("u", "unit", True, "is unit topic (true|false)"),
        Opt("s", "hasUnitSub", True, "has unit sub (true|false)")), update_topic),
    Command("deleteTopic", "Delete topic from broker and NameServer.", (
        T_OPT, Opt("c", "clusterName", True, "delete topic from which cluster", required=True)), delete_topic),
    Command("topicList", "Fetch all topic list from name server.", (
        Opt("c", "clusterModel", False, "clusterModel"),), topic_list),
    Command("topicRoute", "Examine topic route info.", (
        T_OPT, Opt("l", "list", False, "Use list format to print data")), topic_route),
    Command("topicStatus", "Examine topic Status info.", (
        T_OPT, Opt("c", "cluster", True, "cluster name or lmq parent topic, lmq is used to find the route.")),
        topic_status),
    Command("topicClusterList", "Get cluster info for topic.", (T_OPT,), topic_cluster_list),
    Command("updateTopicPerm", "Update topic perm.", (
        Opt("b", "brokerAddr", True, "create topic to which broker"),
        Opt("c", "clusterName", True, "create topic to which cluster"), T_OPT,
        Opt("p", "perm", True, "set topic's permission(2|4|6), intro[2:W; 4:R; 6:RW]", required=True)),
        update_topic_perm),
    Command("updateOrderConf", "Create or update or delete order conf.", (
        T_OPT, Opt("v", "orderConf", True, "set order conf [eg. brokerName1:num;brokerName2:num]"),
        Opt("m", "method", True, "option type [eg. put|get|delete", required=True)), update_order_conf),
    Command("allocateMQ", "Allocate MQ.", (T_OPT, Opt("i", "ipList", True, "ipList", required=True)), allocate_mq),
)
