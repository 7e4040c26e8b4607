"""rocketmq-exporter's metric families (apache/rocketmq-exporter's RMQMetricsCollector): their names, HELP texts and
label names exactly as it exports them (every family is a gauge there), and the Prometheus text of their samples.

Label values are the exporter's too: ``cluster`` a cluster name, ``broker`` a broker name, ``brokerIP`` a broker's
``ip:port``, ``msgModel`` the message model's ordinal (``1``: CLUSTERING), the runtime families' ``des`` /
``boottime`` / ``broker_version`` from GET_BROKER_RUNTIME_INFO's brokerVersionDesc / bootTimestamp / brokerVersion
(``brokerHost`` empty, as the exporter leaves it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

Labels = tuple[str, ...]

BROKER_NUMS: Labels = ("cluster", "brokerIP", "broker")
TOPIC_NUMS: Labels = ("cluster", "broker", "topic")
GROUP_NUMS: Labels = ("cluster", "broker", "topic", "group")
GROUP_DIFF: Labels = ("group", "topic", "countOfOnlineConsumers", "msgModel")
GROUP_COUNT: Labels = ("caddr", "localaddr", "group")
DLQ_OFFSET: Labels = ("cluster", "broker", "group")
PRODUCER_COUNT: Labels = ("cluster", "broker", "group")
CLIENT: Labels = ("clientAddr", "clientId", "group", "topic")
RUNTIME: Labels = ("cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version")

# GET_BROKER_RUNTIME_INFO's putMessageDistributeTime buckets, by family
PMDT = (("rocketmq_brokeruntime_pmdt_0ms", "PutMessageDistributeTimeMap0ms", "<=0ms"),
        ("rocketmq_brokeruntime_pmdt_0to10ms", "PutMessageDistributeTimeMap0to10ms", "0~10ms"),
        ("rocketmq_brokeruntime_pmdt_10to50ms", "PutMessageDistributeTimeMap10to50ms", "10~50ms"),
        ("rocketmq_brokeruntime_pmdt_50to100ms", "PutMessageDistributeTimeMap50to100ms", "50~100ms"),
        ("rocketmq_brokeruntime_pmdt_100to200ms", "PutMessageDistributeTimeMap100to200ms", "100~200ms"),
        ("rocketmq_brokeruntime_pmdt_200to500ms", "PutMessageDistributeTimeMap200to500ms", "200~500ms"),
        ("rocketmq_brokeruntime_pmdt_500to1s", "PutMessageDistributeTimeMap500to1s", "500ms~1s"),
        ("rocketmq_brokeruntime_pmdt_1to2s", "PutMessageDistributeTimeMap1to2s", "1~2s"),
        ("rocketmq_brokeruntime_pmdt_2to3s", "PutMessageDistributeTimeMap2to3s", "2~3s"),
        ("rocketmq_brokeruntime_pmdt_3to4s", "PutMessageDistributeTimeMap3to4s", "3~4s"),
        ("rocketmq_brokeruntime_pmdt_4to5s", "PutMessageDistributeTimeMap4to5s", "4~5s"),
        ("rocketmq_brokeruntime_pmdt_5to10s", "PutMessageDistributeTimeMap5to10s", "5~10s"),
        ("rocketmq_brokeruntime_pmdt_10stomore", "PutMessageDistributeTimeMap10toMore", "10s~"))

# runtime families read as one number from a runtime-table key (help text, key)
RUNTIME_SCALARS = (
    ("rocketmq_brokeruntime_msg_put_total_today_now", "brokerRuntimeMsgPutTotalTodayNow", "msgPutTotalTodayNow"),
    ("rocketmq_brokeruntime_msg_gettotal_today_now", "brokerRuntimeMsgGetTotalTodayNow", "msgGetTotalTodayNow"),
    ("rocketmq_brokeruntime_dispatch_behind_bytes", "brokerRuntimeDispatchBehindBytes", "dispatchBehindBytes"),
    ("rocketmq_brokeruntime_put_message_size_total", "brokerRuntimePutMessageSizeTotal", "putMessageSizeTotal"),
    ("rocketmq_brokeruntime_put_message_average_size", "brokerRuntimePutMessageAverageSize",
     "putMessageAverageSize"),
    ("rocketmq_brokeruntime_query_threadpool_queue_capacity", "brokerRuntimeQueryThreadPoolQueueCapacity",
     "queryThreadPoolQueueCapacity"),
    ("rocketmq_brokeruntime_remain_transientstore_buffer_numbs", "brokerRuntimeRemainTransientStoreBufferNumbs",
     "remainTransientStoreBufferNumbs"),
    ("rocketmq_brokeruntime_earliest_message_timestamp", "brokerRuntimeEarliestMessageTimeStamp",
     "earliestMessageTimeStamp"),
    ("rocketmq_brokeruntime_putmessage_entire_time_max", "brokerRuntimePutMessageEntireTimeMax",
     "putMessageEntireTimeMax"),
    ("rocketmq_brokeruntime_start_accept_sendrequest_time", "brokerRuntimeStartAcceptSendRequestTimeStamp",
     "startAcceptSendRequestTimeStamp"),
    ("rocketmq_brokeruntime_send_threadpool_queue_size", "brokerRuntimeSendThreadPoolQueueSize",
     "sendThreadPoolQueueSize"),
    ("rocketmq_brokeruntime_putmessage_times_total", "brokerRuntimePutMessageTimesTotal", "putMessageTimesTotal"),
    ("rocketmq_brokeruntime_getmessage_entire_time_max", "brokerRuntimeGetMessageEntireTimeMax",
     "getMessageEntireTimeMax"),
    ("rocketmq_brokeruntime_pagecache_lock_time_mills", "brokerRuntimePageCacheLockTimeMills",
     "pageCacheLockTimeMills"),
    ("rocketmq_brokeruntime_commitlog_disk_ratio", "brokerRuntimeCommitLogDiskRatio", "commitLogDiskRatio"),
    ("rocketmq_brokeruntime_consumequeue_disk_ratio", "brokerRuntimeConsumeQueueDiskRatio", "consumeQueueDiskRatio"),
)
# runtime families read from a "<10 s> <60 s> <600 s>" rate line: (family prefix, help prefix, key)
RUNTIME_TPS = (("rocketmq_brokeruntime_getfound_tps", "brokerRuntimeGetFoundTps", "getFoundTps"),
               ("rocketmq_brokeruntime_gettotal_tps", "brokerRuntimeGetTotalTps", "getTotalTps"),
               ("rocketmq_brokeruntime_gettransfered_tps", "brokerRuntimeGetTransferedTps", "getTransferredTps"),
               ("rocketmq_brokeruntime_getmiss_tps", "brokerRuntimeGetMissTps", "getMissTps"),
               ("rocketmq_brokeruntime_put_tps", "brokerRuntimePutTps", "putTps"))
TPS_WINDOWS = (("600", 2), ("60", 1), ("10", 0))  # family suffix, position in the rate line
RUNTIME_SCALARS_2 = (
    ("rocketmq_brokeruntime_dispatch_maxbuffer", "brokerRuntimeDispatchMaxBuffer", "dispatchMaxBuffer"),
    ("rocketmq_brokeruntime_pull_threadpoolqueue_capacity", "brokerRuntimePullThreadPoolQueueCapacity",
     "pullThreadPoolQueueCapacity"),
    ("rocketmq_brokeruntime_send_threadpoolqueue_capacity", "brokerRuntimeSendThreadPoolQueueCapacity",
     "sendThreadPoolQueueCapacity"),
    ("rocketmq_brokeruntime_pull_threadpoolqueue_size", "brokerRuntimePullThreadPoolQueueSizeF",
     "pullThreadPoolQueueSize"),
    ("rocketmq_brokeruntime_query_threadpoolqueue_size", "brokerRuntimeQueryThreadPoolQueueSize",
     "queryThreadPoolQueueSize"),
    ("rocketmq_brokeruntime_pull_threadpoolqueue_headwait_timemills",
     "brokerRuntimePullThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills"),
    ("rocketmq_brokeruntime_query_threadpoolqueue_headwait_timemills",
     "brokerRuntimeQueryThreadPoolQueueHeadWaitTimeMills", "queryThreadPoolQueueHeadWaitTimeMills"),
    ("rocketmq_brokeruntime_send_threadpoolqueue_headwait_timemills",
     "brokerRuntimeSendThreadPoolQueueHeadWaitTimeMills", "sendThreadPoolQueueHeadWaitTimeMills"),
    ("rocketmq_brokeruntime_msg_gettotal_yesterdaymorning", "brokerRuntimeMsgGetTotalYesterdayMorning",
     "msgGetTotalYesterdayMorning"),
    ("rocketmq_brokeruntime_msg_puttotal_yesterdaymorning", "brokerRuntimeMsgPutTotalYesterdayMorning",
     "msgPutTotalYesterdayMorning"),
    ("rocketmq_brokeruntime_msg_gettotal_todaymorning", "brokerRuntimeMsgGetTotalTodayMorning",
     "msgGetTotalTodayMorning"),
    ("rocketmq_brokeruntime_msg_puttotal_todaymorning", "brokerRuntimeMsgPutTotalTodayMorning",
     "msgPutTotalTodayMorning"),
)
CAPACITY = (("rocketmq_brokeruntime_commitlogdir_capacity_free", "brokerRuntimeCommitLogDirCapacityFree"),
            ("rocketmq_brokeruntime_commitlogdir_capacity_total", "brokerRuntimeCommitLogDirCapacityTotal"))
RUNTIME_SCALARS_3 = (
    ("rocketmq_brokeruntime_commitlog_maxoffset", "brokerRuntimeCommitLogMaxOffset", "commitLogMaxOffset"),
    ("rocketmq_brokeruntime_commitlog_minoffset", "brokerRuntimeCommitLogMinOffset", "commitLogMinOffset"),
    ("rocketmq_brokeruntime_remain_howmanydata_toflush", "brokerRuntimeRemainHowManyDataToFlush",
     "remainHowManyDataToFlush"),
    ("rocketmq_brokeruntime_put_latency_99", "brokerRuntimePutLatency99", "putLatency99"),
    ("rocketmq_brokeruntime_put_latency_999", "brokerRuntimePutLatency999", "putLatency999"),
)


def _runtime_families() -> list[tuple[str, str, Labels]]:
    out = [(name, help_, RUNTIME) for name, help_, _ in PMDT]
    out += [(name, help_, RUNTIME) for name, help_, _ in RUNTIME_SCALARS]
    out += [(name + suffix, help_ + suffix, RUNTIME) for name, help_, _ in RUNTIME_TPS for suffix, _ in TPS_WINDOWS]
    out += [(name, help_, RUNTIME) for name, help_, _ in RUNTIME_SCALARS_2]
    out += [(name, help_, RUNTIME) for name, help_ in CAPACITY]
    out += [(name, help_, RUNTIME) for name, help_, _ in RUNTIME_SCALARS_3]
    return out


FAMILIES: tuple[tuple[str, str, Labels], ...] = (
    ("rocketmq_group_diff", "GroupDiff", GROUP_DIFF),
    ("rocketmq_group_retrydiff", "GroupRetryDiff", GROUP_DIFF),
    ("rocketmq_group_dlqdiff", "GroupDLQDiff", GROUP_DIFF),
    ("rocketmq_group_count", "GroupCount", GROUP_COUNT),
    ("rocketmq_producer_count", "producer instance counter", PRODUCER_COUNT),
    ("rocketmq_producer_offset", "TopicOffset", TOPIC_NUMS),
    ("rocketmq_topic_retry_offset", "TopicRetryOffset", TOPIC_NUMS),
    ("rocketmq_topic_dlq_offset", "TopicRetryOffset", DLQ_OFFSET),
    ("rocketmq_producer_tps", "TopicPutNums", TOPIC_NUMS),
    ("rocketmq_producer_message_size", "TopicPutMessageSize", TOPIC_NUMS),
    ("rocketmq_consumer_tps", "GroupGetNums", GROUP_NUMS),
    ("rocketmq_group_consume_tps", "GroupConsumeTPS", GROUP_NUMS),
    ("rocketmq_consumer_offset", "GroupBrokerTotalOffset", GROUP_NUMS),
    ("rocketmq_group_consume_total_offset", "GroupConsumeTotalOffset", GROUP_NUMS),
    ("rocketmq_consumer_message_size", "GroupGetMessageSize", GROUP_NUMS),
    ("rocketmq_send_back_nums", "SendBackNums", GROUP_NUMS),
    ("rocketmq_group_get_latency_by_storetime", "GroupGetLatencyByStoreTime", GROUP_NUMS),
    ("rocketmq_client_consume_fail_msg_count", "consumerClientFailedMsgCounts", CLIENT),
    ("rocketmq_client_consume_fail_msg_tps", "consumerClientFailedTPS", CLIENT),
    ("rocketmq_client_consume_ok_msg_tps", "consumerClientOKTPS", CLIENT),
    ("rocketmq_client_consume_rt", "consumerClientRT", CLIENT),
    ("rocketmq_client_consumer_pull_rt", "consumerClientPullRT", CLIENT),
    ("rocketmq_client_consumer_pull_tps", "consumerClientPullTPS", CLIENT),
    ("rocketmq_broker_tps", "BrokerPutNums", BROKER_NUMS),
    ("rocketmq_broker_qps", "BrokerGetNums", BROKER_NUMS),
    ("rocketmq_broker_commitlog_diff", "brokerCommitLogDiffGauge", BROKER_NUMS),
    *_runtime_families(),
)
NAMES = frozenset(name for name, _, _ in FAMILIES)


def escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(v: float) -> str:
    """A sample value as the exporter's Java client prints a double (``7.0``, ``0.33``, ``NaN``)."""
    f = float(v)
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "+Inf" if f > 0 else "-Inf"
    return repr(f)


def fixed(v: float) -> float:
    """The exporter's Utils.getFixedDouble: at most two decimals (its rates are reported that way)."""
    return round(v, 2)


class Samples:
    """Samples by family, rendered in the exporter's family order with its HELP and TYPE lines; a family without
    samples still gets its HELP and TYPE lines (as the exporter's collector emits every family)."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {name: [] for name, _, _ in FAMILIES}
        self._labels = {name: labels for name, _, labels in FAMILIES}

    def add(self, family: str, values: Iterable[str], value: float) -> None:
        names = self._labels[family]
        pairs = ",".join(f'{k}="{escape(v)}"' for k, v in zip(names, values, strict=True))
        self.lines[family].append(f"{family}{{{pairs}}} {number(value)}")

    def count(self) -> int:
        return sum(len(v) for v in self.lines.values())

    def text(self) -> str:
        return "".join(self.parts())

    def parts(self) -> Iterator[str]:
        """The text family by family (a driver may let others run between two)."""
        for name, help_, _ in FAMILIES:
            lines = self.lines[name]
            yield f"# HELP {name} {help_}\n# TYPE {name} gauge\n"
            for at in range(0, len(lines), 2000):
                yield "\n".join(lines[at:at + 2000]) + "\n"
