"""Consumer and producer group commands: updateSubGroup, deleteSubGroup, consumerProgress, consumerConnection,
producerConnection, consumerStatus, getConsumerConfig, cloneGroupOffset, brokerConsumeStats
(RocketMQ's tools/command/consumer, connection, offset, broker). resetOffsetByTime is in cmd_offset."""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any

from brokerd.admin import api, formats
from brokerd.admin.client import AdminClient, AdminError
from brokerd.admin.command import Command, Ctx, one_of, parse_attributes
from brokerd.admin.formats_msg import is_push, running_info, running_info_queues
from brokerd.admin.javafmt import java_int, java_set_order, parse_bool, version_desc
from brokerd.admin.jsonx import JSONError, loads
from brokerd.admin.model import ConsumerConnection, ConsumeStats, MessageQueue, TopicRoute, consume_stats_list
from brokerd.admin.options import Opt, UsageError
from brokerd.metadata.names import dlq_topic, retry_topic, validate_group

RETRY_PREFIX = "%RETRY%"


def group_of(ctx: Ctx, key: str = "g") -> str:
    group = ctx.req(key)
    problem = validate_group(group)
    if problem:
        raise UsageError(problem)
    return group


# -- the walks of DefaultMQAdminExtImpl ----------------------------------------------------------------------------

async def group_route(c: AdminClient, group: str, topic: str | None = None) -> TopicRoute:
    """The route examineConsumeStats uses: the group's retry topic, else the topic."""
    tried = [retry_topic(group)] + ([topic] if topic else [])
    for name in tried:
        try:
            return await c.route(name)
        except AdminError:
            continue
    raise AdminError(f"consumer group {group} not found: no route for {' or '.join(tried)}")


async def examine_consume_stats(c: AdminClient, group: str, topic: str | None = None,
                                route: TopicRoute | None = None) -> ConsumeStats:
    route = route or await group_route(c, group, topic)
    stats = ConsumeStats()
    for b in route.broker_datas:
        addr = b.select_addr()
        if addr is not None:
            stats.merge(await api.consume_stats(c, addr, group, topic))
    if not stats.offsets:
        try:
            cc = await examine_connection(c, group)
        except AdminError:
            raise AdminError(f"Not found the consumer group {group} consume stats, because return offset table is "
                             "empty, maybe the consumer not online") from None
        if cc.message_model == "BROADCASTING":
            raise AdminError(f"Not found the consumer group {group} consume stats, because return offset table is "
                             "empty, the consumer is under the broadcast mode")
    return stats


async def examine_connection(c: AdminClient, group: str, addr: str | None = None) -> ConsumerConnection:
    if addr is None:
        route = await c.route(retry_topic(group))
        if not route.broker_datas:
            raise AdminError(f"consumer group {group} has no broker in its route")
        addr = random.choice(route.broker_datas).select_addr()
        if addr is None:
            raise AdminError(f"consumer group {group} has no broker address")
    cc = await api.consumer_connection(c, addr, group)
    if not cc.connections:
        raise AdminError(f"Not found the consumer group connection: {group} is not online (broker {addr})")
    return cc


async def running_info_of(c: AdminClient, group: str, client_id: str, jstack: bool = False) -> dict[Any, Any]:
    route = await c.route(retry_topic(group))
    for b in route.broker_datas:
        addr = b.select_addr()
        if addr is not None:
            return await api.consumer_running_info(c, addr, group, client_id, jstack)
    raise AdminError(f"consumer group {group} has no broker to ask")


async def group_exists(c: AdminClient, addrs: list[str], group: str) -> bool:
    for addr in addrs:
        if await api.group_config(c, addr, group) is not None:
            return True
    return False


# -- updateSubGroup / deleteSubGroup -------------------------------------------------------------------------------

def sub_group_config(ctx: Ctx) -> dict[str, Any]:
    g: dict[str, Any] = {"groupName": group_of(ctx), "consumeEnable": True, "consumeFromMinEnable": False,
                         "consumeBroadcastEnable": False, "consumeMessageOrderly": False, "retryQueueNums": 1,
                         "retryMaxTimes": 16, "groupRetryPolicy": {"type": "CUSTOMIZED"}, "brokerId": 0,
                         "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
                         "groupSysFlag": 0, "consumeTimeoutMinute": 15, "subscriptionDataSet": None,
                         "attributes": {}}
    for key, field in (("s", "consumeEnable"), ("m", "consumeFromMinEnable"), ("d", "consumeBroadcastEnable"),
                       ("o", "consumeMessageOrderly"), ("a", "notifyConsumerIdsChangedEnable")):
        if ctx.has(key):
            g[field] = parse_bool(ctx.get(key))
    for key, field in (("q", "retryQueueNums"), ("r", "retryMaxTimes"), ("i", "brokerId"),
                       ("w", "whichBrokerWhenConsumeSlowly")):
        if ctx.has(key):
            g[field] = java_int(ctx.req(key), f"-{key}")
    if ctx.has("p"):
        try:
            policy = loads(ctx.req("p"))
        except JSONError as e:
            raise UsageError(f"option -p: groupRetryPolicy is not JSON: {e}") from None
        if not isinstance(policy, dict) or policy.get("type", "CUSTOMIZED") not in ("CUSTOMIZED", "EXPONENTIAL"):
            raise UsageError("option -p: groupRetryPolicy needs a type of CUSTOMIZED or EXPONENTIAL")
        g["groupRetryPolicy"] = policy
    if ctx.has("attributes"):
        g["attributes"] = parse_attributes(ctx.req("attributes"))
    return g


async def update_sub_group(ctx: Ctx) -> None:
    g = sub_group_config(ctx)
    c = ctx.client
    which = one_of(ctx, "b", "c")
    if which == "b":
        addr = await c.check_broker_addr(ctx.req("b"))
        await api.create_group(c, addr, g)
        ctx.write(f"create subscription group to {addr} success.\n{formats.sub_group_str(g)}")
        return
    for addr in await c.masters(ctx.req("c")):
        await api.create_group(c, addr, g)
        ctx.write(f"create subscription group to {addr} success.\n")
    ctx.write(formats.sub_group_str(g))


async def delete_sub_group(ctx: Ctx) -> None:
    group = group_of(ctx)
    clean = parse_bool(ctx.get("r"))
    c = ctx.client
    which = one_of(ctx, "b", "c")
    if which == "b":
        addr = await c.check_broker_addr(ctx.req("b"))
        if not await group_exists(c, [addr], group):
            raise AdminError(f"subscription group {group} does not exist on broker {addr}")
        await api.delete_group(c, addr, group, clean)
        ctx.write(f"delete subscription group [{group}] from broker [{addr}] success.\n")
        return
    cluster = ctx.req("c")
    masters = await c.masters(cluster)
    if not await group_exists(c, masters, group):
        raise AdminError(f"subscription group {group} does not exist in cluster {cluster}")
    for addr in masters:
        await api.delete_group(c, addr, group, clean)
        ctx.write(f"delete subscription group [{group}] from broker [{addr}] in cluster [{cluster}] success.\n")
    for topic in (retry_topic(group), dlq_topic(group)):  # adminExt.deleteTopic(topic, cluster)
        try:
            for addr in await c.all_addrs(cluster):
                await api.delete_topic_in_broker(c, addr, topic)
            for ns in c.require_namesrv():
                await api.delete_topic_in_namesrv(c, ns, topic, None)
            await api.kv_delete(c, api.NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        except AdminError as e:
            print(f"mqadmin deleteSubGroup: deleting {topic}: {e}", file=sys.stderr)


# -- consumerProgress ----------------------------------------------------------------------------------------------

async def allocation(c: AdminClient, group: str) -> dict[MessageQueue, str]:
    """Which client holds each queue (consumerProgress -s true): GET_CONSUMER_RUNNING_INFO of every client."""
    out: dict[MessageQueue, str] = {}
    try:
        cc = await examine_connection(c, group)
        for conn in cc.connections:
            info = await running_info_of(c, group, conn.client_id)
            for mq in running_info_queues(info):
                out[mq] = conn.client_id.split("@")[0]
    except AdminError as e:
        print(f"mqadmin consumerProgress: client allocation unknown: {e}", file=sys.stderr)
    return out


async def consumer_progress(ctx: Ctx) -> None:
    c = ctx.client
    if ctx.has("g"):
        group = group_of(ctx)
        found = await examine_consume_stats(c, group, ctx.get("t"))
        ips = await allocation(c, group) if (ctx.get("s") or "").lower() == "true" else None
        ctx.write(formats.consumer_progress(found, ips))
        return
    ctx.write(formats.group_list_header())
    for topic in await api.all_topics(c):
        if not topic.startswith(RETRY_PREFIX):
            continue
        group = topic[len(RETRY_PREFIX):]
        stats: ConsumeStats | None = None
        cc: ConsumerConnection | None = None
        try:
            stats = await examine_consume_stats(c, group)
        except AdminError:
            pass
        try:
            cc = await examine_connection(c, group)
        except AdminError:
            pass
        ctx.write(formats.group_list_row(group, cc, stats))


# -- connections ---------------------------------------------------------------------------------------------------

async def consumer_connection(ctx: Ctx) -> None:
    addr = await ctx.client.check_broker_addr(ctx.req("b")) if ctx.has("b") else None
    ctx.write(formats.consumer_connection(await examine_connection(ctx.client, group_of(ctx), addr)))


async def producer_connection(ctx: Ctx) -> None:
    group, topic = group_of(ctx), ctx.req("t")
    c = ctx.client
    route = await c.route(topic)
    if not route.broker_datas:
        raise AdminError(f"topic {topic} has no broker in its route")
    addr = random.choice(route.broker_datas).select_addr()
    conns = await api.producer_connection(c, addr, group) if addr else []
    if not conns:
        raise AdminError(f"Not found the producer group connection: {group} is not online (broker {addr})")
    ctx.write(formats.producer_connection(conns))


# -- consumerStatus ------------------------------------------------------------------------------------------------

async def consumer_status(ctx: Ctx) -> None:
    group = group_of(ctx)
    c = ctx.client
    addr = await c.check_broker_addr(ctx.req("b")) if ctx.has("b") else None
    cc = await examine_connection(c, group, addr)
    jstack = ctx.has("s")
    if ctx.has("i"):
        ctx.write(running_info(await running_info_of(c, group, ctx.req("i"), jstack)))
        return
    now = int(time.time() * 1000)
    ctx.write(formats.jf("%-10s %-40s %-20s %s%n", "#Index", "#ClientId", "#Version", "#ConsumerRunningInfoFile"))
    infos: dict[str, dict[Any, Any]] = {}
    for conn in cc.connections:
        try:
            info = await running_info_of(c, group, conn.client_id, jstack)
        except AdminError as e:
            print(f"mqadmin consumerStatus: {conn.client_id}: {e}", file=sys.stderr)
            continue
        infos[conn.client_id] = info
        path = f"{now}/{conn.client_id}"
        os.makedirs(str(now), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(running_info(info))
        ctx.write(formats.jf("%-10d %-40s %-20s %s%n", len(infos), conn.client_id, version_desc(conn.version), path))
    if infos:
        subs = [sorted((s.get("topic"), s.get("subString")) for s in i.get("subscriptionSet") or [])
                for i in infos.values()]
        if all(s == subs[0] for s in subs) or not all(is_push(i) for i in infos.values()):
            ctx.write("\n\nSame subscription in the same group of consumer")
            ctx.write("\n\nRebalance OK\n")
        else:
            ctx.write("\n\nWARN: Different subscription in the same group of consumer!!!")


# -- getConsumerConfig / cloneGroupOffset / brokerConsumeStats -----------------------------------------------------

async def get_consumer_config(ctx: Ctx) -> None:
    group = group_of(ctx)
    c = ctx.client
    ci = await c.cluster_info()
    found = []
    names = list(ci.brokers)
    for name in java_set_order(names):  # a HashMap in Java
        b = ci.brokers[name]
        addr = b.select_addr()
        cfg = await api.group_config(c, addr, group) if addr else None
        if cfg is not None:
            found.append((ci.cluster_of(name), name, cfg))
    if not found:
        raise AdminError(f"subscription group {group} not found on any broker")
    for cluster, name, cfg in found:
        ctx.write(f"============================={cluster}:{name}=============================\n")
        ctx.write(formats.sub_group_fields(cfg))


async def clone_group_offset(ctx: Ctx) -> None:
    src, dest, topic = group_of(ctx, "s"), group_of(ctx, "d"), ctx.req("t")
    c = ctx.client
    route = await c.route(topic)
    stats = await examine_consume_stats(c, src)
    mqs = [mq for mq in stats.offsets if mq.topic == topic]
    if not mqs:
        raise AdminError(f"consumer group {src} has no offset in topic {topic}")
    for mq in sorted(mqs):
        b = route.broker(mq.broker_name)
        addr = b.select_addr() if b else None
        offset = stats.offsets[mq].consumer_offset
        if addr is not None and offset >= 0:
            await api.update_consumer_offset(c, addr, dest, mq, offset)
    ctx.write(f"clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{topic}]")


async def broker_consume_stats(ctx: Ctx) -> None:
    c = ctx.client
    addr = await c.check_broker_addr(ctx.req("b"))
    timeout_ms = ctx.int_opt("t", 50000)
    level = ctx.int_opt("l", 0)
    body = await api.broker_consume_stats(c, addr, parse_bool(ctx.get("o")), timeout_ms / 1000.0)
    ctx.write(formats.broker_consume_stats(consume_stats_list(body), level, int(body.get("totalDiff") or 0)))


G_OPT = Opt("g", "groupName", True, "consumer group name", required=True)

COMMANDS = (
    Command("updateSubGroup", "Update or create subscription group.", (
        Opt("b", "brokerAddr", True, "create subscription group to which broker"),
        Opt("c", "clusterName", True, "create subscription group to which cluster"), G_OPT,
        Opt("s", "consumeEnable", True, "consume enable"), Opt("m", "consumeFromMinEnable", True, "from min offset"),
        Opt("d", "consumeBroadcastEnable", True, "broadcast"),
        Opt("o", "consumeMessageOrderly", True, "consume message orderly"),
        Opt("q", "retryQueueNums", True, "retry queue nums"), Opt("r", "retryMaxTimes", True, "retry max times"),
        Opt("p", "groupRetryPolicy", True, "the json string of retry policy ( exp: {\"type\":\"EXPONENTIAL\","
            "\"exponentialRetryPolicy\":{\"initial\":5000,\"max\":7200000,\"multiplier\":2}} {\"type\":\"CUSTOMIZED\","
            "\"customizedRetryPolicy\":{\"next\":[1000,5000,10000]}} )"),
        Opt("i", "brokerId", True, "consumer from which broker id"),
        Opt("w", "whichBrokerWhenConsumeSlowly", True, "which broker id when consume slowly"),
        Opt("a", "notifyConsumerIdsChanged", True, "notify consumerId changed"),
        Opt(None, "attributes", True, "attribute(+a=b,+c=d,-e)")), update_sub_group),
    Command("deleteSubGroup", "Delete subscription group from broker.", (
        Opt("b", "brokerAddr", True, "delete subscription group from which broker"),
        Opt("c", "clusterName", True, "delete subscription group from which cluster"),
        Opt("g", "groupName", True, "subscription group name", required=True),
        Opt("r", "removeOffset", True, "remove offset")), delete_sub_group),
    Command("consumerProgress", "Query consumer's progress, speed.", (
        Opt("g", "groupName", True, "consumer group name"), Opt("t", "topicName", True, "topic name"),
        Opt("s", "showClientIP", True, "Show Client IP per Queue"),
        Opt("c", "cluster", True, "Cluster name or lmq parent topic, lmq is used to find the route.")),
        consumer_progress),
    Command("consumerConnection", "Query consumer's socket connection, client version and subscription.", (
        Opt("g", "consumerGroup", True, "consumer group name", required=True),
        Opt("b", "brokerAddr", True, "broker address")), consumer_connection),
    Command("producerConnection", "Query producer's socket connection and client version.", (
        Opt("g", "producerGroup", True, "producer group name", required=True),
        Opt("t", "topic", True, "topic name", required=True)), producer_connection),
    Command("consumerStatus", "Query consumer's internal data structure.", (
        Opt("g", "consumerGroup", True, "consumer group name", required=True),
        Opt("i", "clientId", True, "The consumer's client id"), Opt("b", "brokerAddr", True, "broker address"),
        Opt("s", "jstack", False, "Run jstack command in the consumer progress")), consumer_status),
    Command("getConsumerConfig", "Get consumer config by subscription group name.", (
        Opt("g", "groupName", True, "subscription group name", required=True),), get_consumer_config),
    Command("cloneGroupOffset", "Clone offset from other group.", (
        Opt("s", "srcGroup", True, "set source consumer group", required=True),
        Opt("d", "destGroup", True, "set destination consumer group", required=True),
        Opt("t", "topic", True, "set the topic", required=True),
        Opt("o", "offline", True, "the group or the topic is offline")), clone_group_offset),
    Command("brokerConsumeStats", "Fetch broker consume stats data.", (
        Opt("b", "brokerAddr", True, "Broker address", required=True),
        Opt("t", "timeoutMillis", True, "request timeout Millis"), Opt("l", "level", True, "threshold of print diff"),
        Opt("o", "order", True, "order topic")), broker_consume_stats),
)
