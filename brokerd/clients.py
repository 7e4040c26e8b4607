"""Consumer/producer connection registry, subscription data and orderly-consumer queue locks; what the broker
sends its clients on an admin's behalf (RESET_CONSUMER_CLIENT_OFFSET, requests forwarded to one consumer)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from brokerd.message import java_string_hash
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection

# MQVersion ordinals: the client versions that understand a reset-offset notification / a forwarded request
V3_0_7_SNAPSHOT: Final = 28
V3_1_8_SNAPSHOT: Final = 62

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


def enum_name(value: Any, names: tuple[str, ...], default: str) -> str:
    """Java/ali-ons send enum names, the C++ client sends ordinals: accept both."""
    if isinstance(value, str):
        if value in names:
            return value
        if value.isdigit() and int(value) < len(names):
            return names[int(value)]
        return default
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return default


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = "TAG"

    @classmethod
    def build(cls, topic: str, sub_string: str | None, sub_version: int = 0, expression_type: str = "TAG") -> SubscriptionData:
        s = (sub_string or "*").strip() or "*"
        if s == "*" or expression_type.upper() != "TAG":
            return cls(topic, s, sub_version=sub_version, expression_type=expression_type.upper())
        tags = frozenset(t.strip() for t in s.split("||") if t.strip())
        return cls(topic, s, tags, frozenset(java_string_hash(t) for t in tags), sub_version, "TAG")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionData:
        try:
            ver = int(d.get("subVersion") or 0)
        except (TypeError, ValueError):
            ver = 0
        return cls.build(str(d.get("topic", "")), d.get("subString"), ver, str(d.get("expressionType") or "TAG"))

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "subString": self.sub_string, "tagsSet": sorted(self.tags_set),
                "codeSet": sorted(self.code_set), "subVersion": self.sub_version,
                "expressionType": self.expression_type, "classFilterMode": False}

    def tag_filter(self) -> Callable[[int], bool] | None:
        """Broker-side filter on the consume-queue tag hash; None = everything matches. SQL92 expressions are
        evaluated on each record's properties instead (brokerd/filter, the pull processor)."""
        if self.sub_string == "*" or self.expression_type != "TAG" or not self.code_set:
            return None
        codes = self.code_set
        return codes.__contains__


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    conn: Connection
    last_update: float
    language: str = "JAVA"
    version: int = 0

    def connection_json(self) -> dict[str, Any]:
        """RocketMQ's `Connection` (GET_CONSUMER/PRODUCER_CONNECTION_LIST)."""
        return {"clientAddr": client_addr(self.conn), "clientId": self.client_id, "language": self.language,
                "version": self.version}


def client_addr(conn: Connection) -> str:
    """The peer as RocketMQ's RemotingHelper.parseChannelRemoteAddr writes it: ``ip:port``."""
    host, port = conn.remote_addr[0], conn.remote_addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def mq_map(entries: Iterable[tuple[dict[str, Any], Any]]) -> orjson.Fragment:
    """A Java `Map<MessageQueue, V>` as fastjson writes it: the keys are JSON objects, not strings
    (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`), which fastjson (every Java client) reads back."""
    parts = [orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in entries]
    return orjson.Fragment(b"{" + b",".join(parts) + b"}")


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ConsumerManager:
    """Registry of consumer groups. `on_change(group)` fires when a group's membership changes."""

    def __init__(self, on_change: Callable[[str], None], now: Callable[[], float] = time.monotonic) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        # RocketMQ's consumerCompensationTable: consumers that consume without heartbeats (POP), by group; shown
        # by consumerConnection / consumerProgress, no part of rebalancing or NOTIFY_CONSUMER_IDS_CHANGED
        self.compensation: dict[str, ConsumerGroupInfo] = {}
        self.on_change = on_change
        self.now = now

    def register(self, conn: Connection, client_id: str, data: dict[str, Any], language: str, version: int) -> bool:
        """Register one ConsumerData of a heartbeat; returns True when the subscription changed."""
        group = str(data.get("groupName", ""))
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type = enum_name(data.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY")
        info.message_model = enum_name(data.get("messageModel"), MESSAGE_MODELS, "CLUSTERING")
        info.consume_from_where = enum_name(data.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET")
        subs = {}
        for sd in data.get("subscriptionDataSet") or []:
            if isinstance(sd, dict) and sd.get("topic"):
                s = SubscriptionData.from_json(sd)
                subs[s.topic] = s
        sub_changed = {k: (v.sub_string, v.expression_type) for k, v in subs.items()} != {
            k: (v.sub_string, v.expression_type) for k, v in info.subscriptions.items()}
        info.subscriptions = subs
        ch = info.channels.get(conn)
        new_member = ch is None or ch.client_id != client_id
        info.channels[conn] = ClientChannel(client_id, conn, self.now(), language, version)
        if new_member:
            self.on_change(group)
        return sub_changed

    def unregister(self, conn: Connection, group: str | None = None) -> None:
        for name in [group] if group else list(self.groups):
            info = self.groups.get(name)
            if info is not None and info.channels.pop(conn, None) is not None:
                if not info.channels:
                    del self.groups[name]
                self.on_change(name)

    def expire(self, timeout_s: float) -> list[str]:
        cutoff = self.now() - timeout_s
        removed = []
        for info in list(self.groups.values()):
            for conn, ch in list(info.channels.items()):
                if ch.last_update < cutoff or not conn.is_open:
                    removed.append(ch.client_id)
                    self.unregister(conn, info.group)
        for info in list(self.compensation.values()):
            for conn, ch in list(info.channels.items()):
                if ch.last_update < cutoff or not conn.is_open:
                    self.forget_compensated(conn, info.group)
        return removed

    def compensate(self, conn: Connection, group: str, consume_type: str, language: str,
                   version: int) -> ConsumerGroupInfo:  # fmt: skip
        """A request of a consumer that sends no heartbeat (RocketMQ's compensateBasicConsumerInfo): its group
        (CLUSTERING) and connection, refreshed; the caller keeps ``subscriptions`` (compensateSubscribeData)."""
        info = self.compensation.get(group)
        if info is None:
            info = self.compensation[group] = ConsumerGroupInfo(group, consume_type, "CLUSTERING")
        ch = info.channels.get(conn)
        if ch is None:
            info.channels[conn] = ClientChannel(client_addr(conn), conn, self.now(), language, version)
        else:
            ch.last_update = self.now()
        return info

    def forget_compensated(self, conn: Connection, group: str | None = None) -> None:
        for name in [group] if group else list(self.compensation):
            info = self.compensation.get(name)
            if info is not None and info.channels.pop(conn, None) is not None and not info.channels:
                del self.compensation[name]

    def group_info(self, group: str) -> ConsumerGroupInfo | None:
        """The group's consumers (heartbeats), else the ones that consume without (getConsumerGroupInfo(group,
        true))."""
        info = self.groups.get(group)
        return info if info is not None and info.channels else self.compensation.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The group's subscription of ``topic`` (its heartbeats', else a compensated one's, as RocketMQ's
        findSubscriptionData)."""
        info = self.groups.get(group)
        sub = info.subscriptions.get(topic) if info else None
        if sub is None:
            comp = self.compensation.get(group)
            sub = comp.subscriptions.get(topic) if comp else None
        return sub

    def subscription_count(self, group: str) -> int:
        info = self.groups.get(group)
        return len(info.subscriptions) if info else 0

    def find_channel(self, group: str, client_id: str) -> ClientChannel | None:
        """The channel of ``client_id`` in ``group`` (the newest one when it reconnected)."""
        info = self.groups.get(group)
        found = [ch for ch in info.channels.values() if ch.client_id == client_id] if info else []
        return max(found, key=lambda ch: ch.last_update) if found else None

    def groups_of_topic(self, topic: str) -> set[str]:
        """The online groups subscribed to ``topic`` (ConsumerManager.queryTopicConsumeByWho)."""
        return {g for g, info in self.groups.items() if topic in info.subscriptions}


class ProducerManager:
    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.groups: dict[str, dict[Connection, ClientChannel]] = {}
        self.now = now

    def register(self, conn: Connection, group: str, client_id: str, language: str, version: int) -> None:
        self.groups.setdefault(group, {})[conn] = ClientChannel(client_id, conn, self.now(), language, version)

    def unregister(self, conn: Connection, group: str | None = None) -> None:
        for name in [group] if group else list(self.groups):
            chans = self.groups.get(name)
            if chans is not None:
                chans.pop(conn, None)
                if not chans:
                    del self.groups[name]

    def producer_table(self, wall_now_ms: int) -> dict[str, list[dict[str, Any]]]:
        """RocketMQ's `ProducerTableInfo.data`: every group's `ProducerInfo`s (lastUpdateTimestamp in wall ms)."""
        now = self.now()
        return {g: [{"clientId": ch.client_id, "remoteIP": client_addr(ch.conn), "language": ch.language,
                     "version": ch.version, "lastUpdateTimestamp": wall_now_ms - int((now - ch.last_update) * 1000)}
                    for ch in chans.values()]
                for g, chans in sorted(self.groups.items())}

    def expire(self, timeout_s: float) -> None:
        cutoff = self.now() - timeout_s
        for chans in self.groups.values():
            for conn, ch in list(chans.items()):
                if ch.last_update < cutoff or not conn.is_open:
                    chans.pop(conn, None)
        for g in [g for g, c in self.groups.items() if not c]:
            del self.groups[g]


class RebalanceLockManager:
    """Queue locks for orderly consumers: (group, topic, broker, queue) -> (client id, expiry)."""

    def __init__(self, lock_max_live_ms: int = 60_000, now: Callable[[], float] = time.monotonic) -> None:
        self.locks: dict[str, dict[tuple[str, str, int], tuple[str, float]]] = {}
        self.ttl = lock_max_live_ms / 1000.0
        self.now = now
        self.on_locked: Callable[[str], None] | None = None  # group: it took (or renewed) a lock

    def try_lock(self, group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        table = self.locks.setdefault(group, {})
        now = self.now()
        got = []
        for mq in mqs:
            holder = table.get(mq)
            if holder is None or holder[0] == client_id or holder[1] < now:
                table[mq] = (client_id, now + self.ttl)
                got.append(mq)
        if got and self.on_locked is not None:
            self.on_locked(group)
        return got

    def unlock(self, group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> None:
        table = self.locks.get(group, {})
        for mq in mqs:
            holder = table.get(mq)
            if holder is not None and holder[0] == client_id:
                del table[mq]

    def is_locked(self, group: str, topic: str, queue_id: int) -> bool:
        now = self.now()
        return any(mq[0] == topic and mq[2] == queue_id and exp >= now
                   for mq, (_, exp) in self.locks.get(group, {}).items())

    def has_live_locks(self, group: str) -> bool:
        now = self.now()
        return any(exp >= now for _, exp in self.locks.get(group, {}).values())


def reset_offset_notice(topic: str, group: str, timestamp: int, offsets: list[tuple[dict[str, Any], int]],
                        language: str) -> RemotingCommand:
    """RESET_CONSUMER_CLIENT_OFFSET (220) for one consumer: a C++ client reads `ResetOffsetBodyForC` (a list), the
    others RocketMQ's `ResetOffsetBody` (a map keyed by MessageQueue objects)."""
    if language == "CPP":
        body = orjson.dumps({"offsetTable": [{**mq, "offset": off} for mq, off in offsets]})
    else:
        body = orjson.dumps({"offsetTable": mq_map(offsets)})
    return request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                   {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true"}, body, oneway=True)


# rocketmq-client-cpp 2.x drops the queues on RESET_CONSUMER_CLIENT_OFFSET and never pulls them again: C++ consumers
# learn a reset from their next pull (PULL_OFFSET_MOVED) instead
NO_RESET_NOTICE_LANGUAGES: Final = frozenset({"CPP"})


def notify_reset_offset(info: ConsumerGroupInfo, topic: str, group: str, timestamp: int,
                        offsets: list[tuple[dict[str, Any], int]]) -> list[str]:
    """Tell the online consumers of the group to move to ``offsets`` (one-way, as RocketMQ's Broker2Client);
    returns the client ids told (clients too old to understand it, and C++ clients, are skipped)."""
    told = []
    for conn, ch in list(info.channels.items()):
        if conn.is_open and ch.version >= V3_0_7_SNAPSHOT and ch.language not in NO_RESET_NOTICE_LANGUAGES:
            conn.oneway(reset_offset_notice(topic, group, timestamp, offsets, ch.language))
            told.append(ch.client_id)
    return told
