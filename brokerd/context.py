"""What a request processor (and the broker's own services) may use of the broker: `BrokerContext`.

`brokerd/broker.py` builds the processors and services and hands each one the broker as a `BrokerContext`;
no processor imports `broker.py`. The protocol names exactly what they use, so a new processor (or a test)
needs nothing more than an object with these members, and the broker can change its insides freely.

Direction of dependencies (checked by the import-linter contracts in pyproject.toml):
    remoting, message → store → metadata → context → processors / schedule → broker → container
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from brokerd.acl.glue import AclGuard
from brokerd.broker_config import BrokerConfig
from brokerd.clients import ConsumerManager, ProducerManager, RebalanceLockManager
from brokerd.ha.acks import PutAcks
from brokerd.ha.service import HAService
from brokerd.message import MessageInner
from brokerd.metadata import BrokerMetadata
from brokerd.metadata.version import DataVersion
from brokerd.remoting.client import RemotingClient
from brokerd.stats import BrokerStatsManager
from brokerd.store.message_store import MessageStore


@dataclass
class BrokerStats:
    """The broker's traffic counters (runtime info, /metrics)."""

    msgs_in: int = 0
    msgs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors: int = 0


class DelayScheduler(Protocol):
    """The delay-level service as the send and send-back processors see it."""

    def apply_delay(self, msg: MessageInner) -> None:
        """Re-target a message carrying DELAY > 0 to the schedule topic (no-op otherwise)."""


class TimerMessages(Protocol):
    """Timer messages (brokerd/timer) as the send and end-transaction processors see them."""

    def park(self, msg: MessageInner) -> tuple[int, str] | None:
        """Re-target a timer message (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS / __STARTDELIVERTIME due in
        the future) to the timer topic; RocketMQ's refusal (code, remark) for a bad one (nothing to store); None:
        store ``msg`` as it is now."""

    def parked(self, msg: MessageInner, queue_offset: int, phys: int, size: int) -> None:
        """``msg`` (after ``park``) was stored at ``queue_offset`` / commit-log ``phys`` (``size`` bytes)."""

    def recall_handle(self, msg: MessageInner) -> str | None:
        """The recall handle a send of the parked ``msg`` answers (None for anything else)."""


class SlaveOffsetSink(Protocol):
    """Where a slave puts a consumer's commit (brokerd/ha/metasync.py `SlaveMetadataSync`)."""

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store the offset locally at once and forward it to the master; kept pending (and pushed before every
        consumer-offset sync, winning over the master's older value) until the master acknowledges it."""


class BrokerContext(Protocol):
    """One broker as its processors and services see it."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def acl(self) -> AclGuard | None:
        """The ACL check of this broker's requests (aclEnable), None when off."""

    @property
    def store(self) -> MessageStore: ...

    @property
    def meta(self) -> BrokerMetadata: ...

    @property
    def consumers(self) -> ConsumerManager: ...

    @property
    def producers(self) -> ProducerManager: ...

    @property
    def locks(self) -> RebalanceLockManager: ...

    @property
    def stats(self) -> BrokerStats: ...

    @property
    def schedule(self) -> DelayScheduler: ...

    @property
    def timers(self) -> TimerMessages: ...

    @property
    def stats_manager(self) -> BrokerStatsManager:
        """RocketMQ's broker statistics (brokerd/stats.py): per topic / group put and get counts, store figures."""

    @property
    def config_version(self) -> DataVersion: ...

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger: ...

    @property
    def acks(self) -> PutAcks:
        """When a stored put may be answered: after the flush (SYNC_FLUSH) and the replica acks its role needs."""

    @property
    def ha(self) -> HAService:
        """The broker's HA service: its slaves' connections (a master) or its link to the master (GET_BROKER_HA_STATUS)."""

    @property
    def outer(self) -> RemotingClient:
        """The shared outbound client (name servers, the controller, this set's master)."""

    @property
    def slave_sync(self) -> SlaveOffsetSink:
        """Offsets committed while this broker is a slave go here (UPDATE_CONSUMER_OFFSET, PULL's commit flag)."""

    @property
    def namesrv_addrs(self) -> list[str]:
        """The name servers this broker registers with (QUERY_ASSIGNMENT asks them for a topic's route)."""

    def master_broker_addr(self) -> str | None:
        """For a slave: the remoting address (ip:port) of its broker set's master while one is known and
        reachable as far as this broker knows; None otherwise (and always None on a master)."""

    def is_master(self) -> bool:
        """Not a slave: takes writes (when its permission allows)."""

    def is_writeable(self) -> bool:
        """Master with PERM_WRITE in brokerPermission."""

    def is_readable(self) -> bool:
        """PERM_READ in brokerPermission."""

    def config_properties(self) -> dict[str, str]:
        """The broker's whole configuration as RocketMQ key=value properties."""

    def update_config(self, props: dict[str, str]) -> None:
        """Validate and apply runtime-changeable keys (UPDATE_BROKER_CONFIG); raises ConfigError naming a key."""

    def runtime_info(self) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO's table."""
