"""Export commands: exportMetadata, exportConfigs, exportMetrics (RocketMQ's tools/command/export): JSON files under
-f (default /tmp/rocketmq/export) in fastjson's pretty layout."""

from __future__ import annotations

import os
import time
from typing import Any

from brokerd.admin import api
from brokerd.admin.client import AdminClient, AdminError, NotSupported
from brokerd.admin.cmd_group import examine_connection
from brokerd.admin.command import Command, Ctx
from brokerd.admin.javafmt import VERSION_NAMES, version_desc
from brokerd.admin.jsonx import pretty
from brokerd.admin.model import broker_stats, compute_24h_sum
from brokerd.admin.options import Opt, UsageError
from brokerd.config_file import parse_properties
from brokerd.metadata.names import SYSTEM_GROUPS, is_retry_or_dlq_topic, is_sys_consumer_group, is_system_topic
from brokerd.remoting.codes import CURRENT_VERSION

DEFAULT_PATH = "/tmp/rocketmq/export"
CONFIG_KEYS = ("brokerClusterName", "brokerId", "brokerName", "brokerRole", "fileReservedTime", "filterServerNums",
               "flushDiskType", "maxMessageSize", "messageDelayLevel", "msgTraceTopicName", "slaveReadEnable", "traceOn",
               "traceTopicEnable", "useTLS", "autoCreateTopicEnable", "autoCreateSubscriptionGroup")


def write_json(path: str, obj: Any) -> None:
    """MixAll.string2FileNotSafe(JSON.toJSONString(obj, true), path)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(pretty(obj))


async def system_topics(c: AdminClient, addr: str) -> set[str]:
    """The broker's system topic list (GET_SYSTEM_TOPIC_LIST_FROM_BROKER); a broker without that request has the
    static system topics plus its cluster's and brokers' names as topics."""
    try:
        return await api.system_topics(c, addr)
    except NotSupported:
        ci = await c.cluster_info()
        return set(ci.clusters) | set(ci.brokers)


async def user_topics(c: AdminClient, addr: str, special: bool) -> dict[str, dict[str, Any]]:
    """DefaultMQAdminExtImpl.getUserTopicConfig."""
    table = await api.all_topic_config(c, addr)
    system = await system_topics(c, addr)
    return {name: tc for name, tc in table.items()
            if name not in system and not is_system_topic(name) and (special or not is_retry_or_dlq_topic(name))
            and 0 <= int(tc.get("perm", 6)) < 8}


async def user_groups(c: AdminClient, addr: str) -> dict[str, dict[str, Any]]:
    """DefaultMQAdminExtImpl.getUserSubscriptionGroup."""
    return {g: cfg for g, cfg in (await api.all_groups(c, addr)).items()
            if not is_sys_consumer_group(g) and g not in SYSTEM_GROUPS}


# -- exportMetadata ------------------------------------------------------------------------------------------------

async def export_metadata(ctx: Ctx) -> None:
    path = ctx.get("f") or DEFAULT_PATH
    special = ctx.has("s")
    c = ctx.client
    if ctx.has("b"):
        addr = await c.check_broker_addr(ctx.req("b"))
        if ctx.has("t"):
            out = f"{path}/topic.json"
            write_json(out, {"topicConfigTable": await user_topics(c, addr, special)})
        elif ctx.has("g"):
            out = f"{path}/subscriptionGroup.json"
            write_json(out, {"subscriptionGroupTable": await user_groups(c, addr)})
        else:
            raise UsageError("with -b, give -t (topics) or -g (subscription groups)")
        ctx.write(f"export {out} success")
        return
    if not ctx.has("c"):
        raise UsageError("Missing required option: -b brokerAddr or -c clusterName")
    topics: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for addr in await c.masters(ctx.req("c")):
        for name, tc in (await user_topics(c, addr, special)).items():
            if name in topics:
                tc = {**tc, "writeQueueNums": int(tc.get("writeQueueNums", 0)) + int(topics[name].get("writeQueueNums", 0)),
                      "readQueueNums": int(tc.get("readQueueNums", 0)) + int(topics[name].get("readQueueNums", 0))}
            topics[name] = tc
        for name, g in (await user_groups(c, addr)).items():
            if name in groups:
                g = {**g, "retryQueueNums": int(g.get("retryQueueNums", 0)) + int(groups[name].get("retryQueueNums", 0))}
            groups[name] = g
    result: dict[str, Any] = {}
    if ctx.has("t"):
        result["topicConfigTable"], out = topics, f"{path}/topic.json"
    elif ctx.has("g"):
        result["subscriptionGroupTable"], out = groups, f"{path}/subscriptionGroup.json"
    else:
        result.update(topicConfigTable=topics, subscriptionGroupTable=groups)
        out = f"{path}/metadata.json"
    result["exportTime"] = int(time.time() * 1000)
    write_json(out, dict(sorted(result.items())))
    ctx.write(f"export {out} success\n")


# -- exportConfigs -------------------------------------------------------------------------------------------------

async def export_configs(ctx: Ctx) -> None:
    cluster, path = ctx.req("c"), ctx.get("f") or DEFAULT_PATH
    c = ctx.client
    await c.cluster_names(cluster)
    configs: dict[str, dict[str, str]] = {}
    masters = slaves = 0
    for master, its_slaves in (await c.cluster_info()).masters_and_slaves(cluster):
        if master is None:
            continue
        props = parse_properties(await api.broker_config(c, master))
        masters += 1
        slaves += len(its_slaves)
        configs[props.get("brokerName", master)] = {k: props[k] for k in CONFIG_KEYS if k in props}
    out = f"{path}/configs.json"
    write_json(out, {"brokerConfigs": configs, "clusterScale": {
        "masterBrokerSize": masters, "namesrvSize": len(c.require_namesrv()), "slaveBrokerSize": slaves}})
    ctx.write(f"export {out} success")


# -- exportMetrics -------------------------------------------------------------------------------------------------

def _long(t: dict[str, str], key: str) -> int:
    try:
        return int(t.get(key) or 0)
    except ValueError:
        return 0


def _first_float(text: str | None) -> float:
    try:
        return float((text or "0").split(" ")[0] or 0)
    except ValueError:
        return 0.0


async def _put_stats(c: AdminClient, addr: str, topic: str) -> tuple[float, int]:
    try:
        s = broker_stats(await api.stats_data(c, addr, "TOPIC_PUT_NUMS", topic))
    except AdminError:
        return 0.0, 0
    return s["statsMinute"].tps, compute_24h_sum(s)


async def broker_metrics(c: AdminClient, addr: str, totals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    kv = await api.runtime_info(c, addr)
    props = parse_properties(await api.broker_config(c, addr))
    groups = await user_groups(c, addr)
    topics = await user_topics(c, addr, False)
    trans_tps, trans_day = await _put_stats(c, addr, "RMQ_SYS_TRANS_HALF_TOPIC")
    sched_tps, sched_day = await _put_stats(c, addr, "SCHEDULE_TOPIC_XXXX")
    tps = {"normalInTps": _first_float(kv.get("putTps")), "normalOutTps": _first_float(kv.get("getTransferredTps")),
           "transInTps": trans_tps, "scheduleInTps": sched_tps}
    day = {"normalOneDayInNum": _long(kv, "msgPutTotalTodayMorning") - _long(kv, "msgPutTotalYesterdayMorning"),
           "normalOneDayOutNum": _long(kv, "msgGetTotalTodayMorning") - _long(kv, "msgGetTotalYesterdayMorning"),
           "transOneDayInNum": trans_day, "scheduleOneDayInNum": sched_day}
    for k, v in tps.items():
        key = "total" + k[0].upper() + k[1:]
        totals["totalTps"][key] = totals["totalTps"].get(key, 0.0) + v
    for k, v in day.items():
        totals["totalOneDayNum"][k] = totals["totalOneDayNum"].get(k, 0) + v
    clients = set()
    for g in groups:
        try:
            for conn in (await examine_connection(c, g)).connections:
                clients.add(f"{conn.language}%{version_desc(conn.version)}")
        except AdminError:
            continue
    return {
        "runtimeEnv": {"cpuNum": props.get("clientCallbackExecutorThreads"), "totalMemKBytes": kv.get("totalMemKBytes")},
        "runtimeQuota": {"diskRatio": {"commitLogDiskRatio": kv.get("commitLogDiskRatio"),
                                       "consumeQueueDiskRatio": kv.get("consumeQueueDiskRatio")},
                         "groupSize": len(groups), "messageAverageSize": kv.get("putMessageAverageSize"),
                         "oneDayNum": day, "topicSize": len(topics), "tps": tps},
        "runtimeVersion": {"clientInfo": sorted(clients), "rocketmqVersion": VERSION_NAMES[CURRENT_VERSION]},
    }


async def export_metrics(ctx: Ctx) -> None:
    cluster, path = ctx.req("c"), ctx.get("f") or DEFAULT_PATH
    c = ctx.client
    totals: dict[str, dict[str, Any]] = {
        "totalTps": {"totalNormalInTps": 0.0, "totalNormalOutTps": 0.0, "totalTransInTps": 0.0,
                     "totalScheduleInTps": 0.0},
        "totalOneDayNum": {"normalOneDayInNum": 0, "normalOneDayOutNum": 0, "transOneDayInNum": 0,
                           "scheduleOneDayInNum": 0}}
    report = {}
    for name in await c.cluster_names(cluster):
        b = (await c.cluster_info()).brokers.get(name)
        addr = b.master() if b else None
        if addr is not None:
            report[name] = await broker_metrics(c, addr, totals)
    out = f"{path}/metrics.json"
    write_json(out, {"evaluateReport": report, "totalData": totals})
    ctx.write(f"export {out} success")


F_OPT = Opt("f", "filePath", True, "export metadata.json path | default /tmp/rocketmq/export")

COMMANDS = (
    Command("exportMetadata", "Export metadata.", (
        Opt("c", "clusterName", True, "choose a cluster to export"), Opt("b", "brokerAddr", True, "choose a broker to export"),
        F_OPT, Opt("t", "topic", False, "only export topic metadata"),
        Opt("g", "subscriptionGroup", False, "only export subscriptionGroup metadata"),
        Opt("s", "specialTopic", False, "need retryTopic and dlqTopic")), export_metadata),
    Command("exportConfigs", "Export configs.", (
        Opt("c", "clusterName", True, "choose a cluster to export", required=True),
        Opt("f", "filePath", True, "export configs.json path | default /tmp/rocketmq/export")), export_configs),
    Command("exportMetrics", "Export metrics.", (
        Opt("c", "clusterName", True, "choose a cluster to export", required=True),
        Opt("f", "filePath", True, "export metrics.json path | default /tmp/rocketmq/export")), export_metrics),
)
