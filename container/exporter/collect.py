"""rocketmq-exporter's figures computed from a hosted master's own state, as the exporter computes them from the
admin requests it sends (pure: generators that yield between slices of work, so that a driver can let the event
loop serve others while a scrape of many topics and groups is computed).

What each figure is (the exporter's request in brackets):

* ``rocketmq_broker_tps`` / ``_qps``: BROKER_PUT_NUMS / BROKER_GET_NUMS per second over the last minute
  [VIEW_BROKER_STATS_DATA statsMinute.tps], two decimals; ``rocketmq_broker_commitlog_diff``: the master's commit
  log end minus each connected slave's acknowledged offset [runtime info of both];
* ``rocketmq_producer_tps`` / ``_message_size``: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE of each topic with puts since the
  broker started (not retry or DLQ topics), per second over the last minute;
* ``rocketmq_producer_offset`` / ``rocketmq_topic_retry_offset`` / ``rocketmq_topic_dlq_offset``: the sum of the
  topic's queues' max offsets over its write queues [GET_TOPIC_STATS_INFO]; the DLQ's label is the group it
  belongs to;
* ``rocketmq_consumer_tps`` / ``_message_size``: GROUP_GET_NUMS / GROUP_GET_SIZE of ``topic@group`` per second over
  the last minute; ``rocketmq_send_back_nums``: SNDBCK_PUT_NUMS' sum over the last minute;
* consume stats [GET_CONSUME_STATS], for every (group, topic) that consumes on the broker: groups online with a
  subscription to the topic, groups with committed offsets on it, and the group a retry or DLQ topic belongs to.
  Per read queue: broker offset = max offset, consumer offset = the committed one (0 when none), as RocketMQ
  answers; a group online without a subscription to the topic is left out, as RocketMQ does (not a retry / DLQ
  topic's own group). ``rocketmq_consumer_offset`` (and ``rocketmq_group_consume_total_offset``) = the sum of the
  consumer offsets, ``rocketmq_group_consume_tps`` = the consume stats' TPS, ``rocketmq_group_get_latency_by_storetime``
  (CLUSTERING groups) = the longest time since the store time of a queue's first unconsumed message (0 for a queue
  consumed to its end); ``rocketmq_group_diff`` / ``_retrydiff`` / ``_dlqdiff`` (by the topic's kind, CLUSTERING
  groups) = the sum over the brokers of broker minus consumer offsets, not clipped at 0, labelled with the group's
  consumers online and the message model's ordinal. The exporter skips DLQ topics (its dlqdiff stays empty); here
  a DLQ's diff is what its group has not consumed of it (everything, when nobody consumes the DLQ);
* ``rocketmq_group_count``: each consuming group's consumers online (their connections' addresses, client ids);
* ``rocketmq_producer_count``: the producer connections of each producer group [GET_PRODUCER_CONNECTION_LIST].
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from brokerd.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    MINUTE,
    SEPARATOR,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
)
from container.context import ExportedBroker
from container.exporter.families import Samples, fixed

RETRY = "%RETRY%"
DLQ = "%DLQ%"
CLUSTERING_ORDINAL = "1"  # MessageModel.CLUSTERING.ordinal()
SLICE = 16  # (group, topic) pairs or topics between two yields (the driver yields the loop every ~2 ms)


def is_retry_or_dlq(topic: str) -> bool:
    return topic.startswith(RETRY) or topic.startswith(DLQ)


def owner_of(topic: str) -> str | None:
    """The group a retry or DLQ topic belongs to."""
    for prefix in (RETRY, DLQ):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return None


@dataclass
class GroupFigures:
    """The consume stats summed over a container's masters: diff per (group, topic), consumers online per group."""

    diff: dict[tuple[str, str], int] = field(default_factory=dict)
    clustering: dict[str, bool] = field(default_factory=dict)
    clients: dict[str, dict[str, str]] = field(default_factory=dict)  # group -> client id -> connection address

    def add(self, group: str, topic: str, diff: int, clustering: bool) -> None:
        self.diff[(group, topic)] = self.diff.get((group, topic), 0) + diff
        self.clustering[group] = self.clustering.get(group, True) and clustering

    def render(self, s: Samples) -> Iterator[None]:
        for group in sorted({g for g, t in self.diff if not t.startswith(DLQ)}):
            clients = self.clients.get(group, {})
            ids = sorted(clients)
            s.add("rocketmq_group_count", (",".join(clients[i] for i in ids), ",".join(ids), group), len(ids))
        yield
        for n, ((group, topic), diff) in enumerate(sorted(self.diff.items())):
            if n % (SLICE * 4) == 0:
                yield
            if not self.clustering.get(group, True):
                continue
            family = ("rocketmq_group_retrydiff" if topic.startswith(RETRY) else
                      "rocketmq_group_dlqdiff" if topic.startswith(DLQ) else "rocketmq_group_diff")
            s.add(family, (group, topic, str(len(self.clients.get(group, {}))), CLUSTERING_ORDINAL), diff)


def broker_figures(s: Samples, b: ExportedBroker, peers: Mapping[tuple[str, str, int], str]) -> None:
    """broker tps / qps, commitlog diff of its slaves, producer counts. ``peers``: hosted brokers' addresses by
    (cluster, name, id), for a slave's label."""
    cfg, sm = b.cfg, b.stats_manager
    cluster, name, addr = cfg.broker_cluster_name, cfg.broker_name, cfg.broker_addr
    s.add("rocketmq_broker_tps", (cluster, addr, name), fixed(sm.minute_tps(BROKER_PUT_NUMS, sm.cluster)))
    s.add("rocketmq_broker_qps", (cluster, addr, name), fixed(sm.minute_tps(BROKER_GET_NUMS, sm.cluster)))
    st = b.ha_status()
    for sid, slave in sorted(st.get("slaves", {}).items()):
        ack = int(slave.get("ack", -1))
        if ack < 0:
            continue
        slave_addr = peers.get((cluster, name, int(sid)), f"{name}:{sid}")
        s.add("rocketmq_broker_commitlog_diff", (cluster, slave_addr, name), int(st["maxOffset"]) - ack)
    for group, chans in sorted(b.producers.groups.items()):
        s.add("rocketmq_producer_count", (cluster, name, group), len(chans))


def topic_figures(s: Samples, b: ExportedBroker) -> Iterator[None]:
    """Topic offsets and put rates."""
    cluster, name = b.cfg.broker_cluster_name, b.cfg.broker_name
    store, sm = b.store, b.stats_manager
    topics = b.meta.topics.all()
    for n, (topic, tc) in enumerate(list(topics.items())):
        if n % SLICE == SLICE - 1:
            yield
        total = sum(max(0, store.max_offset_in_queue(topic, q)) for q in range(tc.write_queue_nums))
        if topic.startswith(RETRY):
            s.add("rocketmq_topic_retry_offset", (cluster, name, topic), total)
        elif topic.startswith(DLQ):
            s.add("rocketmq_topic_dlq_offset", (cluster, name, topic[len(DLQ):]), total)
        else:
            s.add("rocketmq_producer_offset", (cluster, name, topic), total)
    for stats_name, family in ((TOPIC_PUT_NUMS, "rocketmq_producer_tps"),
                               (TOPIC_PUT_SIZE, "rocketmq_producer_message_size")):
        items = sorted(sm.sets[stats_name].items())
        yield
        for n, (topic, item) in enumerate(items):
            if n % (SLICE * 8) == SLICE * 8 - 1:
                yield
            if topic in topics and not is_retry_or_dlq(topic):
                s.add(family, (cluster, name, topic), fixed(item.window(MINUTE).tps))


def consuming_pairs(b: ExportedBroker, offsets: Mapping[str, object]) -> tuple[set[tuple[str, str]],
                                                                              set[tuple[str, str]]]:
    """(group, topic) pairs that consume on the broker, and those of a retry / DLQ topic and its own group."""
    pairs = set()
    for key in offsets:
        topic, _, group = key.partition(SEPARATOR)
        pairs.add((group, topic))
    for group, info in b.consumers.groups.items():
        pairs.update((group, topic) for topic in info.subscriptions)
    owned = set()
    for topic in b.meta.topics.all():
        owner = owner_of(topic)
        if owner:
            owned.add((owner, topic))
    return pairs | owned, owned


def group_figures(s: Samples, b: ExportedBroker, acc: GroupFigures, now_ms: int,
                  latency_cache: LatencyCache) -> Iterator[None]:
    """Consume stats of every consuming (group, topic), and the get rates."""
    cfg, store, sm = b.cfg, b.store, b.stats_manager
    cluster, name = cfg.broker_cluster_name, cfg.broker_name
    topics = b.meta.topics.all()
    yield
    offsets = b.meta.offsets.entries()
    online = b.consumers.groups
    yield
    pairs, owned = consuming_pairs(b, offsets)
    yield
    ordered = sorted(pairs)
    yield
    for n, (group, topic) in enumerate(ordered):
        if n % SLICE == SLICE - 1:
            yield
        tc = topics.get(topic)
        info = online.get(group)
        if tc is None or tc.read_queue_nums <= 0:
            continue
        if info is not None and info.subscriptions and topic not in info.subscriptions and (group, topic) not in owned:
            continue  # RocketMQ: an online group without a subscription to the topic has no stats for it
        clustering = info is None or info.message_model == "CLUSTERING"
        committed = offsets.get(topic + SEPARATOR + group, {})
        broker_sum = consumer_sum = latency = 0
        for q in range(tc.read_queue_nums):
            bo = max(0, store.max_offset_in_queue(topic, q))
            co = max(0, committed.get(q, -1))
            broker_sum += bo
            consumer_sum += co
            if clustering and bo > co:
                latency = max(latency, latency_cache.lag_ms(b, topic, q, co, now_ms))
        labels = (cluster, name, topic, group)
        s.add("rocketmq_consumer_offset", labels, consumer_sum)
        s.add("rocketmq_group_consume_total_offset", labels, consumer_sum)
        s.add("rocketmq_group_consume_tps", labels, sm.minute_tps(GROUP_GET_NUMS, topic + SEPARATOR + group))
        if clustering:
            s.add("rocketmq_group_get_latency_by_storetime", labels, latency)
        acc.add(group, topic, broker_sum - consumer_sum, clustering)
    for group, info in online.items():
        clients = acc.clients.setdefault(group, {})
        for conn, ch in info.channels.items():
            host, port = conn.remote_addr
            clients.setdefault(ch.client_id, f"{host}:{port}")
    yield from get_rates(s, b, topics)


def get_rates(s: Samples, b: ExportedBroker, topics: Mapping[str, object]) -> Iterator[None]:
    cluster, name, sm = b.cfg.broker_cluster_name, b.cfg.broker_name, b.stats_manager
    for stats_name, family, rate in ((GROUP_GET_NUMS, "rocketmq_consumer_tps", True),
                                     (GROUP_GET_SIZE, "rocketmq_consumer_message_size", True),
                                     (SNDBCK_PUT_NUMS, "rocketmq_send_back_nums", False)):
        items = sorted(sm.sets[stats_name].items())
        yield
        for n, (key, item) in enumerate(items):
            if n % (SLICE * 8) == SLICE * 8 - 1:
                yield
            topic, _, group = key.partition(SEPARATOR)
            if topic not in topics or is_retry_or_dlq(topic):
                continue
            w = item.window(MINUTE)
            s.add(family, (cluster, name, topic, group), fixed(w.tps) if rate else w.sum)


class LatencyCache:
    """Store times of queues' first unconsumed messages, kept while the committed offset stays (a scrape reads a
    message only for a queue whose group moved since the previous scrape)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.used: dict[tuple[str, str, int], tuple[int, int]] = {}

    def start(self) -> None:
        self.seen, self.used = self.used, {}

    def lag_ms(self, b: ExportedBroker, topic: str, queue_id: int, offset: int, now_ms: int) -> int:
        key = (b.cfg.identity, topic, queue_id)
        hit = self.seen.get(key) or self.used.get(key)
        if hit is not None and hit[0] == offset:
            ts = hit[1]
        else:
            ts = store_time(b, topic, queue_id, offset)
        self.used[key] = (offset, ts)
        return max(0, now_ms - ts) if ts > 0 else 0


def store_time(b: ExportedBroker, topic: str, queue_id: int, offset: int) -> int:
    """Store time of the message at ``offset``, or of the queue's oldest one when ``offset`` is below it (expired,
    as the exporter reads the queue's min offset after OFFSET_ILLEGAL); -1 when unknown (a tier chunk not cached
    is not fetched for a scrape)."""
    store = b.store
    try:
        with store.tier_nowait():
            ts = store.message_store_timestamp(topic, queue_id, offset)
            if ts <= 0:
                low = store.min_offset_in_queue(topic, queue_id)
                ts = store.message_store_timestamp(topic, queue_id, low) if low > offset else -1
    except Exception:  # noqa: BLE001 - a tier miss or an unreadable record: no latency for this queue
        return -1
    return ts
