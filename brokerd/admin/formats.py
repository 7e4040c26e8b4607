"""The tables and lines RocketMQ's mqadmin prints, as pure functions of decoded data (each returns the text the
Java tool's printf calls produce, newlines included). Column widths and headers are RocketMQ 5.3's."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from brokerd.admin.javafmt import date_time, front, human2, java_hash_order, jstr, perm_str, version_desc
from brokerd.admin.jsonx import pretty
from brokerd.admin.model import (
    ClusterInfo,
    Connection,
    ConsumerConnection,
    ConsumeStats,
    MessageQueue,
    TopicOffset,
    TopicRoute,
)
from brokerd.message.javahash import java_string_hash


def jf(fmt: str, *args: Any) -> str:
    """Java's String.format for the conversions the tools use (%s %d %f with flags and widths, %n)."""
    conv = tuple(jstr(a) if isinstance(a, bool) or a is None else a for a in args)
    return fmt.replace("%n", "\n") % conv


def java_map_str(d: Mapping[str, str], capacity: int = 16) -> str:
    """HashMap<String, String>.toString in Java's iteration order (bucket of String.hashCode, then insertion)."""
    items = list(d.items())
    order = java_hash_order([java_string_hash(k) for k, _ in items], capacity)
    return "{" + ", ".join(f"{items[i][0]}={items[i][1]}" for i in order) + "}"


# -- topics --------------------------------------------------------------------------------------------------------

ROUTE_FORMAT = "%-45s %-32s %-50s %-10s %-11s %-5s%n"


def topic_route_json(route: TopicRoute) -> str:
    return pretty(route.to_json()) + "\n"


def topic_route_list(route: TopicRoute) -> str:
    queues = {q.broker_name: q for q in route.queue_datas}
    out = [jf(ROUTE_FORMAT, "#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm")]
    total_r = total_w = 0
    for b in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(b.broker_name)
        if q is None:
            continue
        total_r += q.read_queue_nums
        total_w += q.write_queue_nums
        addrs = "{" + ", ".join(f"{k}={v}" for k, v in sorted(b.addrs.items())) + "}"
        out.append(jf(ROUTE_FORMAT, b.cluster, b.broker_name, addrs, q.read_queue_nums, q.write_queue_nums, q.perm))
    out.append("-" * 158 + "\n")
    out.append(jf(ROUTE_FORMAT, "Total:", len(queues), "", total_r, total_w, ""))
    return "".join(out)


def topic_status(stats: Mapping[MessageQueue, TopicOffset], put_tps: float = 0.0) -> str:
    """topicStatus: a row per queue, then (RocketMQ 5.3.3) the topic's put TPS."""
    out = [jf("%-32s  %-4s  %-20s  %-20s    %s%n", "#Broker Name", "#QID", "#Min Offset", "#Max Offset",
              "#Last Updated")]
    for mq in sorted(stats):
        o = stats[mq]
        when = human2(o.last_update_timestamp) if o.last_update_timestamp > 0 else ""
        out.append(jf("%-32s  %-4d  %-20d  %-20d    %s%n", front(mq.broker_name, 32), mq.queue_id, o.min_offset,
                      o.max_offset, when))
    out.append(f"\nTopic Put TPS: {jstr(float(put_tps))}\n")
    return "".join(out)


def topic_list_cluster_header() -> str:
    return jf("%-20s  %-48s  %-48s%n", "#Cluster Name", "#Topic", "#Consumer Group")


def topic_list_cluster_row(cluster: str, topic: str, group: str) -> str:
    return jf("%-20s  %-64s  %-64s%n", front(cluster, 20), front(topic, 64), front(group, 64))


def topic_config_str(tc: Mapping[str, Any]) -> str:
    """TopicConfig.toString."""
    return (f"TopicConfig [topicName={tc['topicName']}, readQueueNums={tc['readQueueNums']}, "
            f"writeQueueNums={tc['writeQueueNums']}, perm={perm_str(int(tc['perm']))}, "
            f"topicFilterType={tc.get('topicFilterType', 'SINGLE_TAG')}, topicSysFlag={tc.get('topicSysFlag', 0)}, "
            f"order={jstr(bool(tc.get('order')))}, attributes={jstr(tc.get('attributes') or {})}]")


# -- groups --------------------------------------------------------------------------------------------------------

def _guava(name: str, fields: Sequence[tuple[str, Any]]) -> str:
    return name + "{" + ", ".join(f"{k}={v if isinstance(v, str) and v.endswith('}') and '{' in v else jstr(v)}"
                                  for k, v in fields) + "}"


def retry_policy_str(p: Mapping[str, Any] | None) -> str:
    if p is None:
        return "null"

    def sub(name: str, d: Any, keys: tuple[str, ...]) -> str:
        return "null" if not isinstance(d, Mapping) else _guava(name, [(k, d.get(k)) for k in keys])

    return _guava("GroupRetryPolicy", [
        ("type", p.get("type", "CUSTOMIZED")),
        ("exponentialRetryPolicy", sub("ExponentialRetryPolicy", p.get("exponentialRetryPolicy"),
                                       ("initial", "max", "multiplier"))),
        ("customizedRetryPolicy", sub("CustomizedRetryPolicy", p.get("customizedRetryPolicy"), ("next",)))])


SUB_GROUP_FIELDS = ("groupName", "consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable",
                    "consumeMessageOrderly", "retryQueueNums", "retryMaxTimes", "groupRetryPolicy", "brokerId",
                    "whichBrokerWhenConsumeSlowly", "notifyConsumerIdsChangedEnable", "groupSysFlag",
                    "consumeTimeoutMinute", "subscriptionDataSet", "attributes")


SUB_GROUP_DEFAULTS: dict[str, Any] = {
    "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
    "consumeMessageOrderly": False, "retryQueueNums": 1, "retryMaxTimes": 16, "groupRetryPolicy": {"type": "CUSTOMIZED"},
    "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True, "groupSysFlag": 0,
    "consumeTimeoutMinute": 15, "subscriptionDataSet": None, "attributes": {}}


def sub_group_with_defaults(g: Mapping[str, Any]) -> dict[str, Any]:
    """A SubscriptionGroupConfig as Java decodes it: absent fields keep the class's defaults."""
    return {**SUB_GROUP_DEFAULTS, **{k: v for k, v in g.items() if v is not None or k == "subscriptionDataSet"}}


def sub_group_str(g: Mapping[str, Any]) -> str:
    """SubscriptionGroupConfig.toString (Guava's toStringHelper)."""
    return _guava("SubscriptionGroupConfig", [
        (k, retry_policy_str(g.get(k)) if k == "groupRetryPolicy" else g.get(k)) for k in SUB_GROUP_FIELDS])


def sub_group_fields(g: Mapping[str, Any]) -> str:
    """getConsumerConfig's `%-40s=  %s` lines, one per SubscriptionGroupConfig field."""
    g = sub_group_with_defaults(g)
    out = []
    for k in SUB_GROUP_FIELDS:
        v = g.get(k)
        text = "" if v is None else retry_policy_str(v) if k == "groupRetryPolicy" else jstr(v)
        out.append(jf("%s%-40s=  %s\n", "", k, text))
    return "".join(out)


def consumer_progress(stats: ConsumeStats, client_ips: Mapping[MessageQueue, str] | None = None) -> str:
    """consumerProgress -g: the per-queue table, then Consume TPS / Consume Diff Total / Consume Inflight Total."""
    show_ip = client_ips is not None
    if show_ip:
        out = [jf("%-64s  %-32s  %-4s  %-20s  %-20s  %-20s %-20s %-20s%s%n", "#Topic", "#Broker Name", "#QID",
                  "#Broker Offset", "#Consumer Offset", "#Client IP", "#Diff", "#Inflight", "#LastTime")]
    else:
        out = [jf("%-64s  %-32s  %-4s  %-20s  %-20s  %-20s %-20s%s%n", "#Topic", "#Broker Name", "#QID",
                  "#Broker Offset", "#Consumer Offset", "#Diff", "#Inflight", "#LastTime")]
    diff_total = inflight_total = 0
    for mq in sorted(stats.offsets):
        o = stats.offsets[mq]
        diff, inflight = o.broker_offset - o.consumer_offset, o.pull_offset - o.consumer_offset
        diff_total += diff
        inflight_total += inflight
        last = "N/A" if o.last_timestamp == 0 else date_time(o.last_timestamp)
        if show_ip:
            assert client_ips is not None
            out.append(jf("%-64s  %-32s  %-4d  %-20d  %-20d  %-20s %-20d %-20d %s%n", front(mq.topic, 64),
                          front(mq.broker_name, 32), mq.queue_id, o.broker_offset, o.consumer_offset,
                          client_ips.get(mq, "N/A"), diff, inflight, last))
        else:
            out.append(jf("%-64s  %-32s  %-4d  %-20d  %-20d  %-20d %-20d %s%n", front(mq.topic, 64),
                          front(mq.broker_name, 32), mq.queue_id, o.broker_offset, o.consumer_offset, diff, inflight,
                          last))
    out.append("\n")
    out.append(jf("Consume TPS: %.2f%n", stats.consume_tps))
    out.append(jf("Consume Diff Total: %d%n", diff_total))
    out.append(jf("Consume Inflight Total: %d%n", inflight_total))
    return "".join(out)


def group_list_header() -> str:
    return jf("%-64s  %-6s  %-24s %-5s  %-14s  %-7s  %s%n", "#Group", "#Count", "#Version", "#Type", "#Model",
              "#TPS", "#Diff Total")


def group_list_row(group: str, cc: ConsumerConnection | None, stats: ConsumeStats | None) -> str:
    count = len(cc.connections) if cc else 0
    push = cc is not None and cc.consume_type == "CONSUME_PASSIVELY"
    ctype = ("PUSH" if push else "PULL") if count else ""
    model = (cc.message_model or "") if count and push and cc else ""
    version = version_desc(cc.min_version()) if count and cc else "OFFLINE"
    return jf("%-64s  %-6d  %-24s %-5s  %-14s  %-7d  %d%n", front(group, 64), count, version, ctype, model,
              int(stats.consume_tps) if stats else 0, stats.total_diff() if stats else 0)


def consumer_connection(cc: ConsumerConnection) -> str:
    out = [jf("%-36s %-22s %-10s %s%n", "#ClientId", "#ClientAddr", "#Language", "#Version")]
    for c in cc.connections:
        out.append(jf("%-36s %-22s %-10s %s%n", c.client_id, c.client_addr, c.language, version_desc(c.version)))
    out.append("\nBelow is subscription:\n")
    out.append(jf("%-20s %s%n", "#Topic", "#SubExpression"))
    for sd in cc.subscriptions.values():
        out.append(jf("%-20s %s%n", sd.get("topic"), sd.get("subString")))
    out.append("\n")
    out.append(jf("ConsumeType: %s%n", cc.consume_type))
    out.append(jf("MessageModel: %s%n", cc.message_model))
    out.append(jf("ConsumeFromWhere: %s%n", cc.consume_from_where))
    return "".join(out)


def producer_connection(conns: Iterable[Connection]) -> str:
    return "".join(jf("%04d  %-32s %-22s %-8s %s%n", i, c.client_id, c.client_addr, c.language,
                      version_desc(c.version)) for i, c in enumerate(conns, 1))


def reset_offset_table(offsets: Mapping[MessageQueue, int]) -> str:
    out = [jf("%-40s  %-40s  %-40s%n", "#brokerName", "#queueId", "#offset")]
    for mq in sorted(offsets):
        out.append(jf("%-40s  %-40d  %-40d%n", front(mq.broker_name, 32), mq.queue_id, offsets[mq]))
    return "".join(out)


def rollback_table(rows: Iterable[tuple[MessageQueue, int, int, int, int]]) -> str:
    """resetOffsetByTimeOld's table: (queue, broker offset, consumer offset, timestamp offset, reset offset)."""
    out = [jf("%-20s  %-20s  %-20s  %-20s  %-20s  %-20s%n", "#brokerName", "#queueId", "#brokerOffset",
              "#consumerOffset", "#timestampOffset", "#resetOffset")]
    for mq, b, c, t, r in rows:
        out.append(jf("%-20s  %-20d  %-20d  %-20d  %-20d  %-20d%n", front(mq.broker_name, 32), mq.queue_id, b, c, t, r))
    return "".join(out)


def broker_consume_stats(groups: Iterable[tuple[str, list[ConsumeStats]]], diff_level: int, total_diff: int) -> str:
    out = [jf("%-64s  %-64s  %-32s  %-4s  %-20s  %-20s  %-20s  %s%n", "#Topic", "#Group", "#Broker Name", "#QID",
              "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime")]
    for group, stats_list in groups:
        for stats in stats_list:
            for mq in sorted(stats.offsets):
                o = stats.offsets[mq]
                diff = o.broker_offset - o.consumer_offset
                if diff < diff_level or o.last_timestamp <= 0:
                    continue
                out.append(jf("%-64s  %-64s  %-32s  %-4d  %-20d  %-20d  %-20d  %s%n", front(mq.topic, 64), group,
                              front(mq.broker_name, 32), mq.queue_id, o.broker_offset, o.consumer_offset, diff,
                              date_time(o.last_timestamp)))
    out.append(jf("%nDiff Total: %d%n", total_diff))
    return "".join(out)


# -- brokers and the cluster ---------------------------------------------------------------------------------------

CLUSTER_HEADER = "%-22s  %-22s  %-4s  %-22s %-16s  %16s  %30s  %-22s  %-11s  %-12s  %-8s  %-10s%n"
CLUSTER_ROW = "%-22s  %-22s  %-4s  %-22s %-16s  %16s  %30s  %-22s  %11s  %-12s  %-8s  %10s%n"


def _num(table: Mapping[str, str], key: str, kind: type = int) -> Any:
    try:
        return kind(table.get(key, ""))
    except ValueError:
        return kind(0)


def cluster_base_header() -> str:
    return jf(CLUSTER_HEADER, "#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)",
              "#OutTPS(LOAD)", "#Timer(Progress)", "#PCWait(ms)", "#Hour", "#SPACE", "#ACTIVATED")


def cluster_base_row(cluster: str, name: str, bid: int, addr: str, t: Mapping[str, str], now_ms: int) -> str:
    def first(key: str) -> float:
        v = (t.get(key) or "").split(" ")
        try:
            return float(v[0]) if v and v[0] else 0.0
        except ValueError:
            return 0.0

    earliest = t.get("earliestMessageTimeStamp") or ""
    hour = (now_ms - int(earliest)) / 1000.0 / 60.0 / 60.0 if earliest.lstrip("-").isdigit() else 0.0
    space = _num(t, "commitLogDiskRatio", float)
    timer = jf("%d-%d(%.1fw, %.1f, %.1f)", _num(t, "timerReadBehind"), _num(t, "timerOffsetBehind"),
               _num(t, "timerCongestNum") / 10000.0, _num(t, "timerEnqueueTps", float),
               _num(t, "timerDequeueTps", float))
    in_tps = jf("%9.2f(%s,%sms)", first("putTps"), t.get("sendThreadPoolQueueSize"),
                t.get("sendThreadPoolQueueHeadWaitTimeMills"))
    out_tps = jf("%9.2f(%s,%sms|%s,%sms)", first("getTransferredTps"), t.get("pullThreadPoolQueueSize"),
                 t.get("pullThreadPoolQueueHeadWaitTimeMills"), t.get("ackThreadPoolQueueSize", "N"),
                 t.get("ackThreadPoolQueueHeadWaitTimeMills", "N"))
    return jf(CLUSTER_ROW, cluster, name, bid, addr, t.get("brokerVersionDesc", ""), in_tps, out_tps, timer,
              t.get("pageCacheLockTimeMills"), f"{hour:2.2f}", f"{space:.4f}",
              (t.get("brokerActive") or "").lower() == "true")


def cluster_more_header() -> str:
    return jf("%-16s  %-32s %14s %14s %14s %14s%n", "#Cluster Name", "#Broker Name", "#InTotalYest",
              "#OutTotalYest", "#InTotalToday", "#OutTotalToday")


def cluster_more_row(cluster: str, name: str, t: Mapping[str, str]) -> str:
    try:
        g = {k: int(t[k]) for k in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgPutTotalTodayNow",
                                    "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning", "msgGetTotalTodayNow")}
        vals = (g["msgPutTotalTodayMorning"] - g["msgPutTotalYesterdayMorning"],
                g["msgGetTotalTodayMorning"] - g["msgGetTotalYesterdayMorning"],
                g["msgPutTotalTodayNow"] - g["msgPutTotalTodayMorning"],
                g["msgGetTotalTodayNow"] - g["msgGetTotalTodayMorning"])
    except (KeyError, ValueError):
        vals = (0, 0, 0, 0)
    return jf("%-16s  %-32s %14d %14d %14d %14d%n", cluster, name, *vals)


def cluster_rows(ci: ClusterInfo, clusters: Iterable[str]) -> list[tuple[str, str, int, str]]:
    """(cluster, broker name, broker id, address) in clusterList's order."""
    rows = []
    for cluster in clusters:
        for name in ci.names_in(cluster) or []:
            b = ci.brokers.get(name)
            if b is not None:
                rows += [(cluster, name, bid, addr) for bid, addr in sorted(b.addrs.items())]
    return rows


def broker_status(table: Mapping[str, str], addr: str | None = None) -> str:
    if addr is None:
        return "".join(jf("%-32s: %s%n", k, table[k]) for k in sorted(table))
    return "".join(jf("%-24s %-32s: %s%n", addr, k, table[k]) for k in sorted(table))


def config_lines(props: Mapping[str, str]) -> str:
    """getBrokerConfig / getNamesrvConfig: `%-50s=  %s` per key."""
    return "".join(jf("%-50s=  %s\n", k, v) for k, v in props.items())


def stats_all_header() -> str:
    return jf("%-64s  %-64s %12s %11s %11s %14s %14s%n", "#Topic", "#Consumer Group", "#Accumulation", "#InTPS",
              "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour")


def stats_all_row(topic: str, group: str | None, accumulate: int, in_tps: float, out_tps: float, in_24h: int,
                  out_24h: int) -> str:
    if group is None:
        return jf("%-64s  %-64s %12d %11.2f %11s %14d %14s%n", front(topic, 64), "", 0, in_tps, "", in_24h,
                  "NO_CONSUMER")
    return jf("%-64s  %-64s %12d %11.2f %11.2f %14d %14d%n", front(topic, 64), front(group, 64), accumulate, in_tps,
              out_tps, in_24h, out_24h)


def ha_status(addr: str, info: Mapping[str, Any]) -> str:
    if info.get("master"):
        conns = info.get("haConnectionInfo") or []
        out = [jf("\n#MasterAddr\t%s\n#MasterCommitLogMaxOffset\t%d\n#SlaveNum\t%d\n#InSyncSlaveNum\t%d\n", addr,
                  int(info.get("masterCommitLogMaxOffset") or 0), len(conns), int(info.get("inSyncSlaveNums") or 0))]
        out.append(jf("%-32s  %-16s %16s %16s %16s %16s\n", "#SlaveAddr", "#SlaveAckOffset", "#Diff",
                      "#TransferSpeed(KB/s)", "#Status", "#TransferFromWhere"))
        for c in conns:
            out.append(jf("%-32s  %-16d %16d %16.2f %16s %16d\n", c.get("addr"), int(c.get("slaveAckOffset") or 0),
                          int(c.get("diff") or 0), int(c.get("transferredByteInSecond") or 0) / 1024.0,
                          "OK" if c.get("inSync") else "Fall Behind", int(c.get("transferFromWhere") or 0)))
        return "".join(out)
    cl = info.get("haClientRuntimeInfo") or {}
    return (jf("\n#MasterAddr\t%s\n", cl.get("masterAddr"))
            + jf("#CommitLogMaxOffset\t%d\n", int(cl.get("maxOffset") or 0))
            + jf("#TransferSpeed(KB/s)\t%.2f\n", int(cl.get("transferredByteInSecond") or 0) / 1024.0)
            + jf("#LastReadTime\t%s\n", human2(int(cl.get("lastReadTimestamp") or 0)))
            + jf("#LastWriteTime\t%s\n", human2(int(cl.get("lastWriteTimestamp") or 0)))
            + jf("#MasterFlushOffset\t%s\n", cl.get("masterFlushOffset", 0)))


def now_ms() -> int:
    return int(time.time() * 1000)
