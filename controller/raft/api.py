"""Public API of the Raft package (names fixed by docs/RAFT-CONTRACT.md).

- `StateMachine`: what the controller plugs in (apply / snapshot / restore).
- `RaftConfig`: validated frozen configuration of one member.
- `RaftNode`: the asyncio driver: start/stop, propose, read_index, lease_read, follower_read,
  is_leader / leader_id / term / commit_index / applied_index, on_leadership_change.
- Errors: `NotLeaderError` (with leader_id / leader_addr), `ReadLaggingError`, and
  `CommitUnknownError` (a NotLeaderError subclass: the proposal's fate cannot be known here).
"""

from __future__ import annotations

from controller.raft.api_types import StateMachine
from controller.raft.config import RaftConfig
from controller.raft.driver import RaftNode
from controller.raft.errors import CommitUnknownError, NotLeaderError, ReadLaggingError

__all__ = ["CommitUnknownError", "NotLeaderError", "RaftConfig", "RaftNode", "ReadLaggingError", "StateMachine"]
