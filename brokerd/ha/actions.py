"""Outputs of the sans-I/O HA cores (``master.py``, ``slave.py``), and the log steps of a role change.

A driver executes the actions in order: ``Send`` = ``transport.writelines(parts)`` on that connection,
``Close`` = close it, ``AlterSyncStateSet`` = CONTROLLER_ALTER_SYNC_STATE_SET (then feed the answer back),
``ReplicationProgress`` = release the sync-replication waiters it satisfies.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokerd.ha.log import ReplicaLog
from brokerd.ha.wire import Body

ConnId = int
"""A connection, named by the driver (any int unique among the live connections of one core)."""

ALL_ACK = -1
"""``need`` value meaning "the confirm offset must reach the end" (allAckInSyncStateSet; Java
``MixAll.ALL_ACK_IN_SYNC_STATE_SET``)."""


@dataclass(frozen=True, slots=True)
class Send:
    conn: ConnId
    parts: tuple[Body, ...]


@dataclass(frozen=True, slots=True)
class Close:
    conn: ConnId
    reason: str


@dataclass(frozen=True, slots=True)
class AlterSyncStateSet:
    """Ask the controller to change the SyncStateSet (request fields of CONTROLLER_ALTER_SYNC_STATE_SET)."""

    master_broker_id: int
    master_epoch: int
    new_sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicationProgress:
    """How far the log is replicated: ``acked[k]`` is the highest offset held by at least k + 1 replicas of the
    (effective) SyncStateSet, the master included (so ``acked[0]`` is the master's max offset)."""

    confirm_offset: int
    acked: tuple[int, ...]

    def releases(self, end_offset: int, need: int) -> bool:
        """True when a put ending at ``end_offset`` that waits for ``need`` replicas (or ``ALL_ACK``) is done."""
        if need == ALL_ACK:
            return self.confirm_offset >= end_offset
        if need <= 1:
            return True
        return len(self.acked) >= need and self.acked[need - 1] >= end_offset


Action = Send | Close | AlterSyncStateSet | ReplicationProgress


def become_master(log: ReplicaLog, epoch: int) -> None:
    """The log side of changeToMaster(epoch) (spec §4.5), after the store truncated invalid tail data:
    drop epoch entries that start at/after the max offset (epochs that wrote nothing) and those >= ``epoch``,
    then append ``(epoch, max offset)``. Nothing changes when the log's last epoch already is ``epoch``
    (this broker restarted as master of the same epoch). Raises ValueError (changing nothing) when an epoch >=
    ``epoch`` wrote data here (spec: "truncate epochs >= E"; relabelling written data would break the
    consistent-point search) or the append is refused."""
    if log.last_epoch() == epoch:
        return  # the same term resumed (a restart before the controller noticed): this log wrote it
    end = log.max_phy_offset
    dropped = [e for e in log.epoch_entries() if e.start_offset >= end or e.epoch >= epoch]
    holding = [e for e in dropped if e.start_offset < end]
    if holding:
        raise ValueError(f"cannot start epoch {epoch}: epoch {holding[0].epoch} wrote data from "
                         f"{holding[0].start_offset} (a controller epoch never goes back)")  # fmt: skip
    if dropped:
        log.truncate_epochs_from(dropped[0].epoch)
    if not log.append_epoch(epoch, end):
        raise ValueError(f"cannot start epoch {epoch} at {end}: epoch history ends at {log.epoch_entries()[-1:]}")
