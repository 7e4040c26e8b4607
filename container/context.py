"""What the container's parts (admin port, metrics endpoint, disk quota) may use of the container and of the
brokers it hosts, as `Protocol`s.

`host.py` builds `register_admin`, `MetricsServer` and `DiskQuota` and hands each the container as the narrow
protocol it needs; none of them imports `host.py` or `brokerd.broker`, so the imports run one way:
host → admin / metrics / quota → context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from brokerd.broker_config import BrokerConfig
from brokerd.clients import ConsumerManager, ProducerManager
from brokerd.remoting.connection import Handler
from brokerd.stats import BrokerStatsManager
from brokerd.store.flags import RunningFlags


class BrokerCounters(Protocol):
    """A broker's traffic counters (`/metrics`)."""

    @property
    def msgs_in(self) -> int: ...

    @property
    def msgs_out(self) -> int: ...

    @property
    def bytes_in(self) -> int: ...

    @property
    def bytes_out(self) -> int: ...

    @property
    def errors(self) -> int: ...


class LaneCounter(Protocol):
    """The C send lane, as far as `/metrics` counts it."""

    @property
    def handled(self) -> int: ...

    def acl_misses(self) -> dict[str, int]:
        """ACL on: sends the lane left to the Python path, by reason."""
        ...

    def header_cache(self) -> tuple[int, int]:
        """JSON headers parsed by their differences from a cached one (hits), and in full (misses)."""
        ...

    @property
    def fallbacks(self) -> Mapping[str, int]:
        """Sends the Python processor took, by reason."""
        ...


class RefusalCounter(Protocol):
    """Overload shedding (brokerd/processors/admission.py), as far as `/metrics` counts it."""

    @property
    def refused(self) -> Mapping[str, int]:
        """Sends answered SYSTEM_BUSY, by reason."""
        ...

    @property
    def pending(self) -> int:
        """Stored sends not answered yet."""
        ...


class TimerFigures(Protocol):
    """Timer messages (brokerd/timer), as `/metrics` and the dashboard count them."""

    def figures(self) -> dict[str, int]:
        """pending, parked, fired, rolled, recalled, dropped, refused (timers), latenessP50Ms, latenessP99Ms."""
        ...

    def pending_by_due(self) -> list[tuple[str, int]]:
        """Pending timers due within each bound (seconds, cumulative, the last one ``+Inf``)."""
        ...

    def lateness_buckets(self) -> tuple[list[tuple[str, int]], float, int]:
        """The fire-lateness histogram (ms): cumulative (le, count) pairs, the sum and the count."""
        ...


class PopFigures(Protocol):
    """POP consumption (brokerd/pop), as `/metrics` and the dashboard count it."""

    def stats(self) -> dict[str, Any]:
        """``active``, ``checkpoints``, ``parked``, ``counters`` (pops, popped, acks, refused_acks, renews, revived,
        dead_lettered, dropped, ...) and ``groups``: group -> inflight, reviveBacklog, retryBacklog."""
        ...


class HostedStore(Protocol):
    """What the container reads and sets on a hosted broker's message store."""

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def running_flags(self) -> RunningFlags: ...

    def is_writeable(self) -> bool: ...

    def logical_usage_bytes(self) -> int:
        """Commit log + consume queue + index bytes."""
        ...

    def set_quota_checker(self, cb: Callable[[int], bool] | None) -> None:
        """`cb(logical_usage_bytes) -> True` when over quota: the next clean deletes at once."""
        ...

    def batch_stats(self) -> dict[str, Any]:
        """The batch append's implementation (``native``), runs per implementation (``runs``) and the batches the C
        run left to Python by reason (``fallbacks``: brokerd/store/batch_append.py FALLBACK_REASONS)."""
        ...


class HandlerLookup(Protocol):
    """A broker's request table: the admin port forwards GET/UPDATE_BROKER_CONFIG to the broker's own handler."""

    def lookup(self, code: int) -> Handler | None: ...


class HostedBroker(Protocol):
    """A broker as the container's parts see it."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def dispatcher(self) -> HandlerLookup: ...

    @property
    def stats(self) -> BrokerCounters: ...

    @property
    def send_lane(self) -> LaneCounter | None: ...

    @property
    def acl_denied(self) -> int:
        """Requests refused NO_PERMISSION by the ACL check (0 with ACL off)."""
        ...

    @property
    def send_admission(self) -> RefusalCounter: ...

    @property
    def store(self) -> HostedStore: ...

    def health(self) -> tuple[str, str]:
        """(status, last error)."""
        ...

    def ha_status(self) -> dict[str, Any]:
        """Replication state (brokerd.replication.BrokerReplication.status: role, epoch, confirm offset, ...)."""
        ...

    @property
    def pop(self) -> PopFigures:
        """POP consumption: groups in flight, revive backlog, counters (brokerd/pop)."""
        ...

    @property
    def timers(self) -> TimerFigures:
        """Timer messages: pending, fired, recalled, fire lateness (brokerd/timer)."""
        ...


class ExportedTopic(Protocol):
    """A topic's config as rocketmq-exporter's figures read it."""

    @property
    def read_queue_nums(self) -> int: ...

    @property
    def write_queue_nums(self) -> int: ...


class ExportedTopics(Protocol):
    def all(self) -> Mapping[str, ExportedTopic]: ...


class ExportedOffsets(Protocol):
    def table(self) -> dict[str, dict[int, int]]:
        """Committed consumer offsets keyed `topic@group` -> {queueId: offset} (a copy)."""
        ...

    def entries(self) -> Mapping[str, Mapping[int, int]]:
        """The same, the queue maps not copied (not to be changed)."""
        ...


class ExportedMetadata(Protocol):
    @property
    def topics(self) -> ExportedTopics: ...

    @property
    def offsets(self) -> ExportedOffsets: ...


class ExportedStore(Protocol):
    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time (ms) of the message at a queue offset; <= 0 when there is none (may raise for a tier miss)."""
        ...

    def tier_nowait(self) -> AbstractContextManager[None]:
        """Inside: a read needing an uncached tier chunk raises instead of fetching it."""
        ...


@runtime_checkable
class ExportedBroker(Protocol):
    """A hosted broker as rocketmq-exporter's metrics read it (container/exporter): its statistics, metadata,
    clients and queue offsets; GET_BROKER_RUNTIME_INFO through its own handler (`dispatcher`)."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def dispatcher(self) -> HandlerLookup: ...

    def ha_status(self) -> dict[str, Any]:
        """Replication state: a master's connected slaves and their acknowledged offsets."""
        ...

    @property
    def stats_manager(self) -> BrokerStatsManager: ...

    @property
    def meta(self) -> ExportedMetadata: ...

    @property
    def consumers(self) -> ConsumerManager: ...

    @property
    def producers(self) -> ProducerManager: ...

    @property
    def store(self) -> ExportedStore: ...

    def is_master(self) -> bool: ...


class HostedSlot(Protocol):
    """One entry of the container's broker table."""

    @property
    def broker(self) -> HostedBroker: ...


class BrokerDirectory(Protocol):
    """The brokers a container hosts, by identity (cluster:name:id); metrics and the disk quota read it."""

    @property
    def brokers(self) -> Mapping[str, HostedSlot]: ...


class ContainerContext(BrokerDirectory, Protocol):
    """The container as its admin port sees it: the broker table plus adding and removing brokers
    (both raise `container.errors.ContainerError`)."""

    async def add_broker(self, path: str) -> HostedBroker: ...

    async def remove_broker(self, identity: str) -> None: ...
