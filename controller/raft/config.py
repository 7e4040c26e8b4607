"""RaftConfig: the validated, frozen configuration of one Raft member (contract: RAFT-CONTRACT.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.raft.core_config import CoreConfig
from controller.raft.transport import split_addr


@dataclass(frozen=True)
class RaftConfig:
    """Configuration of one member of a Raft group. Invalid values raise ValueError naming the key."""

    group: str
    self_id: str
    peers: dict[str, str] = field(hash=False)  # member id -> "host:port" of its Raft listener (incl. self)
    data_dir: str
    election_timeout_ms: int = 500
    heartbeat_interval_ms: int = 100
    tick_ms: int = 50
    max_batch_entries: int = 256
    max_inflight_appends: int = 64
    snapshot_threshold_entries: int = 10000
    snapshot_trailing_entries: int = 1000
    lease_ratio: float = 0.8
    max_follower_lag_entries: int = 1000
    fsync: bool = True
    seed: int | None = None
    read_timeout_ms: int = 0  # follower/ReadIndex round without an answer fails after this; 0 = 3 x election

    def __post_init__(self) -> None:
        if not self.group:
            raise ValueError("group: must not be empty")
        if not self.data_dir:
            raise ValueError("data_dir: must not be empty")
        if self.self_id not in self.peers:
            raise ValueError(f"self_id: {self.self_id!r} is not a key of peers")
        if not 1 <= len(self.peers) <= 9:
            raise ValueError("peers: a group has 1 to 9 members (3 or 5 recommended)")
        for pid, addr in self.peers.items():
            try:
                split_addr(addr)
            except ValueError as e:
                raise ValueError(f"peers: member {pid!r}: {e}") from None
        if self.tick_ms < 1:
            raise ValueError("tick_ms: must be >= 1")
        if self.heartbeat_interval_ms < self.tick_ms:
            raise ValueError("heartbeat_interval_ms: must be >= tick_ms")
        if self.election_timeout_ms < 3 * self.tick_ms or self.election_timeout_ms <= self.heartbeat_interval_ms:
            raise ValueError("election_timeout_ms: must be >= 3 x tick_ms and > heartbeat_interval_ms")
        for key in ("max_batch_entries", "max_inflight_appends", "snapshot_threshold_entries"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be >= 1")
        for key in ("snapshot_trailing_entries", "max_follower_lag_entries", "read_timeout_ms"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0")
        if not 0.0 < self.lease_ratio < 1.0:
            raise ValueError("lease_ratio: must be in (0, 1)")

    @property
    def election_ticks(self) -> int:
        return self.election_timeout_ms // self.tick_ms

    @property
    def heartbeat_ticks(self) -> int:
        return self.heartbeat_interval_ms // self.tick_ms

    @property
    def read_timeout_s(self) -> float:
        return (self.read_timeout_ms or 3 * self.election_timeout_ms) / 1000.0

    def core_config(self) -> CoreConfig:
        return CoreConfig(
            self.self_id, tuple(sorted(self.peers)), election_ticks=self.election_ticks,
            heartbeat_ticks=self.heartbeat_ticks, max_batch_entries=self.max_batch_entries,
            max_inflight_appends=self.max_inflight_appends, lease_ratio=self.lease_ratio,
            max_follower_lag_entries=self.max_follower_lag_entries,
        )
