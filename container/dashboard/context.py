"""What the dashboard reads of the container and its brokers, and what it asks of a credentials source, as
`Protocol`s: the container hands itself over as a `DashboardDirectory`; the ACL package (conf/plain_acl.yml)
provides an `AdminCredentials`. Nothing here imports `container.host` or `brokerd.broker`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from container.context import HostedBroker, HostedStore


class AdminCredentials(Protocol):
    """A credentials source: True only for an account that may use the dashboard's admin actions."""

    def is_admin(self, access_key: str, secret_key: str) -> bool: ...


class TopicView(Protocol):
    """One topic's config as the dashboard lists it."""

    @property
    def read_queue_nums(self) -> int: ...

    @property
    def write_queue_nums(self) -> int: ...

    @property
    def perm(self) -> int: ...

    @property
    def order(self) -> bool: ...


class TopicTable(Protocol):
    def all(self) -> Mapping[str, TopicView]: ...

    def is_system_topic(self, topic: str) -> bool:
        """RocketMQ's system topics plus the broker's own cluster- and broker-name topics."""
        ...


class OffsetTable(Protocol):
    def table(self) -> dict[str, dict[int, int]]:
        """Committed consumer offsets keyed `topic@group` -> {queueId: offset}."""
        ...

    def entries(self) -> Mapping[str, Mapping[int, int]]:
        """The same, the queue maps not copied (not to be changed)."""
        ...


class MetadataView(Protocol):
    @property
    def topics(self) -> TopicTable: ...

    @property
    def offsets(self) -> OffsetTable: ...


class DashboardStore(HostedStore, Protocol):
    """The message store: what `/metrics` reads plus each queue's offsets."""

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...


class OnlineGroup(Protocol):
    @property
    def subscriptions(self) -> Mapping[str, object]:
        """Subscribed topics (the keys)."""
        ...

    def client_ids(self) -> list[str]: ...


class OnlineConsumers(Protocol):
    @property
    def groups(self) -> Mapping[str, OnlineGroup]: ...


class DashboardBroker(HostedBroker, Protocol):
    """A hosted broker as the dashboard sees it: what `/metrics` reads plus metadata, queue offsets and the
    consumers online."""

    @property
    def meta(self) -> MetadataView: ...

    @property
    def consumers(self) -> OnlineConsumers: ...

    @property
    def store(self) -> DashboardStore: ...


class DashboardSlot(Protocol):
    @property
    def broker(self) -> DashboardBroker: ...


class DashboardDirectory(Protocol):
    """The brokers of the container, by identity (cluster:name:id)."""

    @property
    def brokers(self) -> Mapping[str, DashboardSlot]: ...


class GrpcView(Protocol):
    """The container's gRPC endpoint (RocketMQ 5.x SDK clients), when enabled."""

    def snapshot(self) -> dict[str, Any]:
        """{"enabled", "port", "clients": [...], "requests": [{"rpc", "code", "count"}], "messages": {...}}."""
        ...


JSON = dict[str, Any]
