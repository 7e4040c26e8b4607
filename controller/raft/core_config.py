"""CoreConfig: the tick-based, validated parameters of the pure Raft core (`controller.raft.core.RaftCore`).

Its own module so that both the core and its leader-role half (`controller.raft.leader`) can depend on it
without depending on each other's module; `controller.raft.core` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoreConfig:
    """Tick-based parameters of the pure core (the driver converts milliseconds to ticks)."""

    self_id: str
    peer_ids: tuple[str, ...]  # every member, including self_id
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    max_batch_entries: int = 256
    max_inflight_appends: int = 64
    lease_ratio: float = 0.8
    max_follower_lag_entries: int = 1000
    max_committed_per_ready: int = 4096
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        if not self.self_id or self.self_id not in self.peer_ids:
            raise ValueError(f"self_id: {self.self_id!r} must be one of peer_ids {self.peer_ids}")
        if len(set(self.peer_ids)) != len(self.peer_ids):
            raise ValueError("peer_ids: duplicate member id")
        if self.heartbeat_ticks < 1:
            raise ValueError("heartbeat_ticks: must be >= 1")
        if self.election_ticks < max(3, self.heartbeat_ticks + 1):
            raise ValueError("election_ticks: must be >= 3 and > heartbeat_ticks")
        if not 0.0 < self.lease_ratio < 1.0:
            raise ValueError("lease_ratio: must be in (0, 1)")
        for key in ("max_batch_entries", "max_inflight_appends", "max_committed_per_ready"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be >= 1")
        if self.max_follower_lag_entries < 0:
            raise ValueError("max_follower_lag_entries: must be >= 0")

    @property
    def quorum(self) -> int:
        return len(self.peer_ids) // 2 + 1

    @property
    def lease_ticks(self) -> int:
        """Lease length L in ticks: floor(lease_ratio x election_ticks), capped at election_ticks - 1.

        A follower that received a heartbeat sent at real time s refuses votes until its own
        election timer has counted `election_ticks` (E) ticks, i.e. for at least (E - 1) follower
        ticks after receipt (the first tick may come right after it). The leader's lease for that
        heartbeat ends before s + L leader ticks. Safe while L * leader_tick <= (E - 1) * follower_tick.
        """
        return min(int(self.lease_ratio * self.election_ticks), self.election_ticks - 1)
