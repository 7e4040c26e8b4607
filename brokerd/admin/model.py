"""RocketMQ's admin bodies as the Java classes serialise them, decoded into typed values (pure).

Every decoder accepts what fastjson writes (see jsonx): maps keyed by MessageQueue objects, numeric keys, and the
same maps keyed by JSON text."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from brokerd.admin.javafmt import java_hash_order, java_int32, java_set_order
from brokerd.admin.jsonx import loads, object_key
from brokerd.message.javahash import java_string_hash
from brokerd.namesrv.routeinfo import QueueData

MASTER_ID = 0


def _int(v: Any, default: int = 0) -> int:
    if v is None or v == "":
        return default
    if isinstance(v, bool):
        return int(v)
    try:
        return int(v)
    except (TypeError, ValueError):
        return int(float(v))


def _float(v: Any) -> float:
    try:
        return float(v or 0)
    except (TypeError, ValueError):
        return 0.0


def body_json(body: bytes | None) -> dict[Any, Any]:
    if not body:
        return {}
    v = loads(body)
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True, order=True)
class MessageQueue:
    """Ordered as MessageQueue.compareTo: topic, broker name, queue id."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, d: Any) -> MessageQueue:
        get = d.get
        return cls(str(get("topic") or ""), str(get("brokerName") or ""), _int(get("queueId")))


def mq_hash(mq: MessageQueue) -> int:
    """MessageQueue.hashCode."""
    h = 31 + java_string_hash(mq.broker_name)
    h = java_int32(31 * h + mq.queue_id)
    return java_int32(31 * h + java_string_hash(mq.topic))


def hash_set_order(mqs: list[MessageQueue]) -> list[MessageQueue]:
    """The iteration order of a HashSet<MessageQueue> filled with `mqs`."""
    return [mqs[i] for i in java_hash_order([mq_hash(mq) for mq in mqs])]


def mq_table(raw: Any) -> dict[MessageQueue, Any]:
    """A Map<MessageQueue, V> as written by fastjson (object keys) or as JSON-text keys."""
    out: dict[MessageQueue, Any] = {}
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            ok = object_key(k)
            if ok is not None:
                out[MessageQueue.from_json(ok)] = v
    elif isinstance(raw, list):  # [[mq, value], ...] or [{"key": mq, "value": v}]
        for item in raw:
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], Mapping):
                out[MessageQueue.from_json(item[0])] = item[1]
    return out


# -- name server: route and cluster --------------------------------------------------------------------------------

@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str]

    def master(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """BrokerData.selectBrokerAddr: the master, else any replica."""
        m = self.master()
        if m is not None:
            return m
        return random.choice(list(self.addrs.values())) if self.addrs else None

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(sorted(self.addrs.items())), "brokerName": self.broker_name,
                "cluster": self.cluster, "enableActingMaster": False}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BrokerData:
        addrs = {_int(k): str(v) for k, v in (d.get("brokerAddrs") or {}).items() if v}
        return cls(str(d.get("cluster") or ""), str(d.get("brokerName") or ""), addrs)


def _queue_data(d: Mapping[str, Any]) -> QueueData:
    """A route's queue data as the name server writes it (fastjson), read leniently."""
    return QueueData(str(d.get("brokerName") or ""), _int(d.get("readQueueNums")), _int(d.get("writeQueueNums")),
                     _int(d.get("perm"), 6), _int(d.get("topicSysFlag")))


@dataclass
class TopicRoute:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    order_topic_conf: str | None = None
    raw: dict[Any, Any] = field(default_factory=dict)

    def broker(self, name: str) -> BrokerData | None:
        return next((b for b in self.broker_datas if b.broker_name == name), None)

    def queue_data(self, name: str) -> QueueData | None:
        return next((q for q in self.queue_datas if q.broker_name == name), None)

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """MQClientInstance.topicRouteData2TopicSubscribeInfo: the readable queues (a HashSet, in its order)."""
        out = []
        for q in self.queue_datas:
            if q.perm & 4:
                out += [MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums)]
        return hash_set_order(out)

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """MQClientInstance.topicRouteData2TopicPublishInfo: writable queues of brokers with a master."""
        out = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            b = self.broker(q.broker_name)
            if q.perm & 2 and b is not None and b.master():
                out += [MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums)]
        return out

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.broker_datas],
                             "filterServerTable": self.raw.get("filterServerTable") or {}}
        if self.order_topic_conf:
            d["orderTopicConf"] = self.order_topic_conf
        d["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return d

    @classmethod
    def from_json(cls, d: Mapping[Any, Any]) -> TopicRoute:
        return cls([_queue_data(q) for q in d.get("queueDatas") or []],
                   [BrokerData.from_json(b) for b in d.get("brokerDatas") or []], d.get("orderTopicConf"), dict(d))


@dataclass
class ClusterInfo:
    brokers: dict[str, BrokerData]
    clusters: dict[str, list[str]]

    def cluster_of(self, broker_name: str) -> str | None:
        return next((c for c, names in self.clusters.items() if broker_name in names), None)

    def names_in(self, cluster: str) -> list[str] | None:
        names = self.clusters.get(cluster)
        return None if names is None else sorted(names)

    def masters(self, cluster: str) -> list[str]:
        """CommandUtil.fetchMasterAddrByClusterName."""
        return [a for n in self.names_in(cluster) or [] if n in self.brokers
                for a in [self.brokers[n].master()] if a]

    def all_addrs(self, cluster: str) -> list[str]:
        """CommandUtil.fetchMasterAndSlaveAddrByClusterName."""
        return [a for n in self.names_in(cluster) or [] if n in self.brokers
                for _, a in sorted(self.brokers[n].addrs.items())]

    def masters_and_slaves(self, cluster: str) -> list[tuple[str | None, list[str]]]:
        """CommandUtil.fetchMasterAndSlaveDistinguish: (master or None, its slaves) per broker set, in the order
        it walks the cluster's broker names (a HashSet, as fastjson reads the name server's list)."""
        out = []
        for n in java_set_order(self.names_in(cluster) or []):
            b = self.brokers.get(n)
            if b is not None:
                out.append((b.master(), [a for i, a in sorted(b.addrs.items()) if i != MASTER_ID]))
        return out

    def name_of_addr(self, addr: str) -> str | None:
        return next((n for n, b in self.brokers.items() if addr in b.addrs.values()), None)

    def all_broker_addrs(self) -> set[str]:
        return {a for b in self.brokers.values() for a in b.addrs.values()}

    @classmethod
    def from_json(cls, d: Mapping[Any, Any]) -> ClusterInfo:
        brokers = {str(k): BrokerData.from_json(v) for k, v in (d.get("brokerAddrTable") or {}).items()}
        clusters = {str(k): [str(x) for x in v] for k, v in (d.get("clusterAddrTable") or {}).items()}
        return cls(brokers, clusters)


# -- broker bodies -------------------------------------------------------------------------------------------------

@dataclass
class TopicOffset:
    min_offset: int
    max_offset: int
    last_update_timestamp: int


def topic_stats(d: Mapping[Any, Any]) -> dict[MessageQueue, TopicOffset]:
    return {mq: TopicOffset(_int(v.get("minOffset")), _int(v.get("maxOffset")), _int(v.get("lastUpdateTimestamp")))
            for mq, v in mq_table(d.get("offsetTable")).items()}


@dataclass
class OffsetWrapper:
    broker_offset: int
    consumer_offset: int
    pull_offset: int = 0
    last_timestamp: int = 0


@dataclass
class ConsumeStats:
    offsets: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        return sum(o.broker_offset - o.consumer_offset for o in self.offsets.values())

    def merge(self, other: ConsumeStats) -> None:
        self.offsets.update(other.offsets)
        self.consume_tps += other.consume_tps

    @classmethod
    def from_json(cls, d: Mapping[Any, Any]) -> ConsumeStats:
        offsets = {mq: OffsetWrapper(_int(v.get("brokerOffset")), _int(v.get("consumerOffset")),
                                     _int(v.get("pullOffset")), _int(v.get("lastTimestamp")))
                   for mq, v in mq_table(d.get("offsetTable")).items()}
        return cls(offsets, _float(d.get("consumeTps")))


@dataclass
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Connection:
        return cls(str(d.get("clientId") or ""), str(d.get("clientAddr") or ""), str(d.get("language") or ""),
                   _int(d.get("version")))


@dataclass
class ConsumerConnection:
    connections: list[Connection]
    subscriptions: dict[str, dict[str, Any]]
    consume_type: str | None
    message_model: str | None
    consume_from_where: str | None

    def min_version(self) -> int:
        return min((c.version for c in self.connections), default=2147483647)

    @classmethod
    def from_json(cls, d: Mapping[Any, Any]) -> ConsumerConnection:
        conns = sorted((Connection.from_json(c) for c in d.get("connectionSet") or []), key=lambda c: c.client_id)
        subs = {str(k): dict(v) for k, v in (d.get("subscriptionTable") or {}).items()}
        return cls(conns, subs, d.get("consumeType"), d.get("messageModel"), d.get("consumeFromWhere"))


def connections(d: Mapping[Any, Any]) -> list[Connection]:
    return sorted((Connection.from_json(c) for c in d.get("connectionSet") or []), key=lambda c: c.client_id)


def offset_table(d: Mapping[Any, Any]) -> dict[MessageQueue, int]:
    """ResetOffsetBody.offsetTable."""
    return {mq: _int(v) for mq, v in mq_table(d.get("offsetTable")).items()}


def string_list(d: Mapping[Any, Any], key: str) -> list[str]:
    """TopicList.topicList / GroupList.groupList (a set in Java: order not significant)."""
    return [str(x) for x in d.get(key) or []]


def kv_table(d: Mapping[Any, Any]) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in (d.get("table") or {}).items()}


@dataclass
class StatsItem:
    sum: int
    tps: float
    avgpt: float


def broker_stats(d: Mapping[Any, Any]) -> dict[str, StatsItem]:
    """BrokerStatsData: statsMinute / statsHour / statsDay."""
    return {k: StatsItem(_int((d.get(k) or {}).get("sum")), _float((d.get(k) or {}).get("tps")),
                         _float((d.get(k) or {}).get("avgpt")))
            for k in ("statsMinute", "statsHour", "statsDay")}


def compute_24h_sum(stats: Mapping[str, StatsItem]) -> int:
    """StatsAllSubCommand.compute24HourSum."""
    for k in ("statsDay", "statsHour", "statsMinute"):
        if stats[k].sum:
            return stats[k].sum
    return 0


def consume_stats_list(d: Mapping[Any, Any]) -> list[tuple[str, list[ConsumeStats]]]:
    """ConsumeStatsList.consumeStatsList: [(group, [ConsumeStats])] in the order the broker sent them."""
    out: list[tuple[str, list[ConsumeStats]]] = []
    for m in d.get("consumeStatsList") or []:
        for group, stats in (m or {}).items():
            out.append((str(group), [ConsumeStats.from_json(s) for s in stats or []]))
    return out


def merge_offsets(tables: Iterable[Mapping[MessageQueue, Any]]) -> dict[MessageQueue, Any]:
    out: dict[MessageQueue, Any] = {}
    for t in tables:
        out.update(t)
    return out
