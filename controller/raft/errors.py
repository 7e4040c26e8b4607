"""Errors raised to users of the Raft package (pure; also raised by the core)."""

from __future__ import annotations


class NotLeaderError(Exception):
    """This node cannot serve the request as leader; retry at `leader_addr` (None when unknown)."""

    def __init__(self, leader_id: str | None = None, leader_addr: str | None = None, msg: str = "") -> None:
        self.leader_id = leader_id or None
        self.leader_addr = leader_addr
        super().__init__(msg or f"not leader (leader={self.leader_id}, addr={self.leader_addr})")


class CommitUnknownError(NotLeaderError):
    """Leadership was lost and this node can no longer tell whether the proposal was committed.

    Raised when a snapshot from the new leader covered the proposal's index (so the entry itself is
    not visible here) or the node stopped while the proposal was pending. It subclasses NotLeaderError
    so callers written against the contract still redirect; callers that retry must make their
    command idempotent or re-read state first.
    """


class ReadLaggingError(Exception):
    """A follower read was refused: this follower trails the leader's commit by too many entries."""

    def __init__(self, leader_id: str | None = None, leader_addr: str | None = None, lag_entries: int = 0) -> None:
        self.leader_id = leader_id or None
        self.leader_addr = leader_addr
        self.lag_entries = lag_entries
        super().__init__(f"follower lags leader by {lag_entries} entries (leader={self.leader_id})")
