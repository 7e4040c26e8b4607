"""HA replication settings (RocketMQ ``MessageStoreConfig`` / ``BrokerConfig`` names in the field docs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_MAX_GAP: Final = 256 * 1024 * 1024


def _fail(key: str, reason: str) -> None:
    raise ValueError(f"{key}: {reason}")


@dataclass(frozen=True)
class HAConfig:
    """Frozen HA settings; ``__post_init__`` rejects bad values with ``ValueError("<key>: <reason>")``."""

    ha_transfer_batch_size: int = 32 * 1024
    """``haTransferBatchSize``: max body bytes of one transfer frame."""
    ha_send_heartbeat_interval_ms: int = 5000
    """``haSendHeartbeatInterval``: master sends an empty frame / slave a report after this long idle."""
    ha_housekeeping_interval_ms: int = 20_000
    """``haHousekeepingInterval``: either side closes a connection after this long without reads."""
    ha_max_gap_not_in_sync: int = DEFAULT_MAX_GAP
    """``haMaxGapNotInSync``: a slave further behind counts as not available for sync replication."""
    ha_max_time_slave_not_catchup_ms: int = 15_000
    """``haMaxTimeSlaveNotCatchup``: a SyncStateSet member not caught up for this long is removed."""
    all_ack_in_sync_state_set: bool = False
    """``allAckInSyncStateSet``: confirmOffset = min ack over the SyncStateSet (else the max offset)."""
    in_sync_replicas: int = 1
    """``inSyncReplicas``: replicas (master included) a SYNC_MASTER put waits for."""
    min_in_sync_replicas: int = 1
    """``minInSyncReplicas``: lower bound of the need when ``enableAutoInSyncReplicas`` adapts it."""
    enable_auto_in_sync_replicas: bool = False
    """``enableAutoInSyncReplicas``: need = clamp(inSyncReplicas, minInSyncReplicas, replicas in sync)."""
    check_sync_state_set_period_ms: int = 5000
    """``checkSyncStateSetPeriod``: how often the master looks for SyncStateSet members to shrink."""
    sync_from_last_file: bool = False
    """``syncFromLastFile``: an empty slave starts from the master's last commit-log file, not its min offset."""
    async_learner: bool = False
    """``asyncLearner``: this slave never joins the SyncStateSet."""
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    """``mappedFileSizeCommitLog``: where "the last file" starts (``syncFromLastFile``)."""
    sync_flush_timeout_ms: int = 5000
    """``syncFlushTimeout``: how long a put waits for its replica acks before FLUSH_SLAVE_TIMEOUT."""
    shrink_on_disconnect: bool = True
    """Not a RocketMQ key: a SyncStateSet member whose connection closes is dropped at the next tick (RocketMQ
    waits for the next ``checkSyncStateSetPeriod``; puts that wait for all of the set stall until then)."""
    transfer_window_bytes: int = 4 * 1024 * 1024
    """Not a RocketMQ key: bytes the master sends beyond a slave's last ack before waiting for the next ack
    (Java relies on blocking socket writes instead; a sans-I/O core needs an explicit bound)."""
    max_frame_body: int = 16 * 1024 * 1024
    """Not a RocketMQ key: the slave decoder's cap on one frame's body (a larger size is a protocol error)."""

    def __post_init__(self) -> None:
        for key in ("ha_transfer_batch_size", "ha_send_heartbeat_interval_ms", "ha_housekeeping_interval_ms",
                    "ha_max_gap_not_in_sync", "ha_max_time_slave_not_catchup_ms", "check_sync_state_set_period_ms",
                    "mapped_file_size_commit_log", "transfer_window_bytes", "max_frame_body",
                    "sync_flush_timeout_ms"):  # fmt: skip
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                _fail(key, f"must be a positive integer, got {value!r}")
        for key in ("in_sync_replicas", "min_in_sync_replicas"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _fail(key, f"must be an integer >= 1, got {value!r}")
        for key in ("all_ack_in_sync_state_set", "enable_auto_in_sync_replicas", "sync_from_last_file",
                    "async_learner", "shrink_on_disconnect"):  # fmt: skip
            if not isinstance(getattr(self, key), bool):
                _fail(key, f"must be a boolean, got {getattr(self, key)!r}")
        if self.ha_transfer_batch_size > self.max_frame_body:
            _fail("ha_transfer_batch_size", f"must be <= max_frame_body ({self.max_frame_body})")
        if self.transfer_window_bytes < self.ha_transfer_batch_size:
            _fail("transfer_window_bytes", f"must be >= ha_transfer_batch_size ({self.ha_transfer_batch_size})")
        if self.ha_send_heartbeat_interval_ms >= self.ha_housekeeping_interval_ms:
            _fail("ha_send_heartbeat_interval_ms",
                  f"must be < ha_housekeeping_interval_ms ({self.ha_housekeeping_interval_ms}), or idle "
                  "connections are closed between heartbeats")  # fmt: skip

    def need_acks(self, replicas_in_sync: int) -> int:
        """Java ``CommitLog.calcNeedAckNums``: replicas (master included) a SYNC_MASTER put waits for."""
        need = self.in_sync_replicas
        if self.enable_auto_in_sync_replicas:
            need = max(min(need, replicas_in_sync), self.min_in_sync_replicas)
        return need
