"""An in-memory hosted broker as container/exporter reads it (container/context.py's ExportedBroker)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from brokerd.broker_config import BrokerConfig
from brokerd.clients import ConsumerManager, ProducerManager
from brokerd.context import BrokerStats
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Dispatcher
from brokerd.stats import BrokerStatsManager


@dataclass(frozen=True)
class Topic:
    read_queue_nums: int = 4
    write_queue_nums: int = 4


@dataclass
class Topics:
    topics: dict[str, Topic]

    def all(self) -> dict[str, Topic]:
        return self.topics


@dataclass
class Offsets:
    rows: dict[str, dict[int, int]]

    def table(self) -> dict[str, dict[int, int]]:
        return {k: dict(v) for k, v in self.rows.items()}

    def entries(self) -> dict[str, dict[int, int]]:
        return dict(self.rows)


@dataclass
class Meta:
    topics: Topics
    offsets: Offsets


@dataclass
class Store:
    queues: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, queue) -> max offset
    mins: dict[tuple[str, int], int] = field(default_factory=dict)
    times: dict[tuple[str, int, int], int] = field(default_factory=dict)  # store time of (topic, queue, offset)
    reads: int = 0
    max_phy_offset: int = 0
    running_flags: Any = None

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), 0)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.mins.get((topic, queue_id), 0)

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        self.reads += 1
        return self.times.get((topic, queue_id, offset), -1)

    def tier_nowait(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_writeable(self) -> bool:
        return True

    def logical_usage_bytes(self) -> int:
        return 0

    def set_quota_checker(self, cb: Any) -> None:
        pass


class Conn:
    """A client connection: answers GET_CONSUMER_RUNNING_INFO with ``body``."""

    def __init__(self, host: str, port: int, body: bytes | None = None) -> None:
        self.remote_addr = (host, port)
        self.is_open = True
        self.body = body
        self.asked: list[RemotingCommand] = []

    async def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        self.asked.append(cmd)
        return RemotingCommand(code=0 if self.body is not None else 1, body=self.body)


RUNTIME_TABLE = {
    "brokerVersionDesc": "V5_3_3", "brokerVersion": "479", "bootTimestamp": "1700000000000",
    "msgPutTotalTodayNow": "120", "msgGetTotalTodayNow": "80", "putTps": "10.5 6.25 1.0",
    "getTransferredTps": "3.0 2.0 1.0", "getFoundTps": "1.0 1.0 1.0", "getMissTps": "0.5 0.5 0.5",
    "getTotalTps": "1.5 1.5 1.5", "commitLogDirCapacity": "Total : 100.0 GiB, Free : 512 B.",
    "remainHowManyDataToFlush": "1.5 KiB", "putMessageDistributeTime": "[<=0ms]:7 [0~10ms]:3 [10~50ms]:0 "
    "[50~100ms]:0 [100~200ms]:0 [200~500ms]:0 [500ms~1s]:0 [1~2s]:0 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:1 ",
    "commitLogDiskRatio": "0.42", "commitLogMaxOffset": "9000", "commitLogMinOffset": "0",
    "sendThreadPoolQueueCapacity": "10000",
}


class FakeBroker:
    def __init__(self, name: str = "broker-a", *, broker_id: int = 0, port: int = 10911,
                 topics: dict[str, Topic] | None = None, offsets: dict[str, dict[int, int]] | None = None,
                 store: Store | None = None, master: bool = True, table: dict[str, str] | None = None) -> None:
        role = "ASYNC_MASTER" if master else "SLAVE"
        self.cfg = BrokerConfig(broker_name=name, broker_id=broker_id, broker_role=role, listen_port=port)
        self.stats_manager = BrokerStatsManager("DefaultCluster", boot_ms=0)
        self.meta = Meta(Topics(topics or {}), Offsets(offsets or {}))
        self.store = store or Store()
        self.consumers = ConsumerManager(on_change=lambda g: None)
        self.producers = ProducerManager()
        self.stats = BrokerStats()
        self.send_lane = None
        self.acl_denied = 0
        self.send_admission: Any = None
        self.master = master
        self.slaves: dict[str, dict[str, Any]] = {}
        self.dispatcher = Dispatcher(name)
        body = orjson.dumps({"table": table if table is not None else RUNTIME_TABLE})
        self.dispatcher.register(28, lambda conn, cmd: cmd.response(body=body))

    def online(self, group: str, conn: Conn, client_id: str, topics: list[str], model: str = "CLUSTERING") -> None:
        data = {"groupName": group, "messageModel": model,
                "subscriptionDataSet": [{"topic": t, "subString": "*"} for t in topics]}
        self.consumers.register(conn, client_id, data, "JAVA", 479)  # type: ignore[arg-type]

    def is_master(self) -> bool:
        return self.master

    def health(self) -> tuple[str, str]:
        return "running", ""

    def ha_status(self) -> dict[str, Any]:
        return {"role": "MASTER" if self.master else "SLAVE", "maxOffset": 1000, "slaves": self.slaves}


@dataclass
class Slot:
    broker: Any


@dataclass
class Directory:
    brokers: dict[str, Slot]


def directory(*brokers: FakeBroker) -> Directory:
    return Directory({b.cfg.identity: Slot(b) for b in brokers})


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(family, ((label, value), ...)): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = []
        for part in _split_labels(rest.rstrip("}")):
            k, _, v = part.partition("=")
            labels.append((k, v[1:-1].replace('\\"', '"').replace("\\\\", "\\")))
        out[(name, tuple(labels))] = float(value)
    return out


def _split_labels(text: str) -> Iterator[str]:
    cur, quoted, esc = "", False, False
    for ch in text:
        if esc:
            cur, esc = cur + ch, False
        elif ch == "\\":
            cur, esc = cur + ch, True
        elif ch == '"':
            cur, quoted = cur + ch, not quoted
        elif ch == "," and not quoted:
            yield cur
            cur = ""
        else:
            cur += ch
    if cur:
        yield cur


def connection(c: Conn) -> Connection:
    return c  # type: ignore[return-value]
