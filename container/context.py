"""What the container's parts (admin port, metrics endpoint, disk quota) may use of the container and of the
brokers it hosts, as `Protocol`s.

`host.py` builds `register_admin`, `MetricsServer` and `DiskQuota` and hands each the container as the narrow
protocol it needs; none of them imports `host.py` or `brokerd.broker`, so the imports run one way:
host → admin / metrics / quota → context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from brokerd.broker_config import BrokerConfig
from brokerd.remoting.connection import Handler
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
