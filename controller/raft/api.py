"""Public API of the Raft package (names fixed by docs/RAFT-CONTRACT.md).

- `StateMachine`: what the controller plugs in (apply / snapshot / restore).
- `RaftConfig`: validated frozen configuration of one member.
- `RaftNode`: the asyncio driver: start/stop, propose, read_index, lease_read, follower_read,
  is_leader / leader_id / term / commit_index / applied_index, on_leadership_change.
- Errors: `NotLeaderError` (with leader_id / leader_addr), `ReadLaggingError`, and
  `CommitUnknownError` (a NotLeaderError subclass: the proposal's fate cannot be known here).

`propose()` failure semantics (catch `CommitUnknownError` before `NotLeaderError`, it is a subclass):

- a plain `NotLeaderError` means the command was NOT and never will be applied by the group: either it
  was refused before being appended (this member is not the leader, is stopped, or has failed), or it
  was appended and then overwritten by a newer leader (another entry of another term took its index,
  which by Log Matching/Leader Completeness proves it never committed). It may still sit, uncommitted,
  in some member's log, but can never take effect, so a client may safely retry even a non-idempotent
  write (at the leader named by `leader_id`/`leader_addr`, if any).
- `CommitUnknownError` means the entry was appended and may or may not commit: the node stopped or
  failed while waiting, or a snapshot install covered its index before it was applied here. Treat as
  "outcome unknown" (read back, or make the command idempotent).
- an exception raised by `StateMachine.apply` is re-raised to the proposer: committed and applied (with
  that error) on every member.

Read errors (`read_index`, `lease_read`, `follower_read`): `NotLeaderError` / `ReadLaggingError` never
have side effects; retry anywhere. A read that is not confirmed within `read_timeout_ms` raises
`NotLeaderError` (naming the leader this member knows, if any).
"""

from __future__ import annotations

from controller.raft.api_types import StateMachine
from controller.raft.config import RaftConfig
from controller.raft.driver import RaftNode
from controller.raft.errors import CommitUnknownError, NotLeaderError, ReadLaggingError

__all__ = ["CommitUnknownError", "NotLeaderError", "RaftConfig", "RaftNode", "ReadLaggingError", "StateMachine"]
