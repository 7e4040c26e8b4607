"""In-memory stand-ins for a container and its brokers, as the dashboard's Protocols see them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from brokerd.broker_config import BrokerConfig
from brokerd.context import BrokerStats
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Dispatcher


@dataclass(frozen=True)
class Topic:
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    order: bool = False


class Topics:
    def __init__(self, topics: dict[str, Topic], system: frozenset[str] = frozenset()) -> None:
        self.topics = topics
        self.system = system

    def all(self) -> dict[str, Topic]:
        return self.topics

    def is_system_topic(self, topic: str) -> bool:
        return topic in self.system


class Offsets:
    def __init__(self, table: dict[str, dict[int, int]]) -> None:
        self.rows = table

    def table(self) -> dict[str, dict[int, int]]:
        return {k: dict(v) for k, v in self.rows.items()}

    def entries(self) -> dict[str, dict[int, int]]:
        return dict(self.rows)


@dataclass
class Meta:
    topics: Topics
    offsets: Offsets


class Store:
    def __init__(self, queues: dict[tuple[str, int], tuple[int, int]], max_phy: int = 0) -> None:
        self.queues = queues  # (topic, queue) -> (min, max)
        self.max_phy_offset = max_phy
        self.running_flags: Any = None

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), (0, 0))[0]

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), (0, 0))[1]

    def is_writeable(self) -> bool:
        return True

    def logical_usage_bytes(self) -> int:
        return 4096

    def set_quota_checker(self, cb: Any) -> None:
        pass


class Group:
    def __init__(self, ids: list[str], topics: tuple[str, ...] = ()) -> None:
        self.ids = ids
        self.subscriptions = dict.fromkeys(topics, "*")

    def client_ids(self) -> list[str]:
        return list(self.ids)


@dataclass
class Consumers:
    groups: dict[str, Group] = field(default_factory=dict)


class Admission:
    """Overload shedding as /metrics reads it: nothing refused, nothing waiting."""

    refused: dict[str, int] = {}
    pending = 0


class FakeBroker:
    def __init__(self, name: str, *, topics: dict[str, Topic] | None = None,
                 queues: dict[tuple[str, int], tuple[int, int]] | None = None,
                 offsets: dict[str, dict[int, int]] | None = None, ha: dict[str, Any] | None = None,
                 online: dict[str, list[str]] | None = None, subscribed: dict[str, tuple[str, ...]] | None = None,
                 system: frozenset[str] = frozenset()) -> None:
        self.cfg = BrokerConfig(broker_name=name, listen_port=30911)  # port-ok: a fake broker's config, nothing binds it
        self.stats = BrokerStats(msgs_in=10, msgs_out=4, bytes_in=1000, bytes_out=400, errors=1)
        self.send_lane = None
        self.send_admission = Admission()
        self.acl_denied = 0
        self.store = Store(queues or {}, max_phy=1000)
        self.meta = Meta(Topics(topics or {}, system), Offsets(offsets or {}))
        subs = subscribed or {}
        self.consumers = Consumers({g: Group(ids, subs.get(g, ())) for g, ids in (online or {}).items()})
        self.dispatcher = Dispatcher("fake")
        self.requests: list[RemotingCommand] = []
        self.ha = ha if ha is not None else {"role": "MASTER", "masterEpoch": 1, "maxOffset": 1000,
                                               "confirmOffset": 1000, "syncStateSet": [0], "replicaTimeouts": 0}

        def create(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            self.requests.append(cmd)
            if cmd.ext["topic"] == "bad topic":
                return cmd.response(17, "topic name is invalid")
            self.meta.topics.topics[cmd.ext["topic"]] = Topic()
            return cmd.response()

        self.dispatcher.register(17, create)

    def health(self) -> tuple[str, str]:
        return "running", ""

    def ha_status(self) -> dict[str, Any]:
        return dict(self.ha)


@dataclass
class Slot:
    broker: FakeBroker


@dataclass
class Directory:
    brokers: dict[str, Slot]


class Admins:
    def __init__(self, accounts: dict[str, str]) -> None:
        self.accounts = accounts

    def is_admin(self, access_key: str, secret_key: str) -> bool:
        return self.accounts.get(access_key) == secret_key
