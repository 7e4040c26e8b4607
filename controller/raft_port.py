"""What the controller needs from a Raft node (the `RaftNode` of docs/RAFT-CONTRACT.md), as a Protocol.

The real driver (`controller.raft.driver.RaftNode`) and the unit tests' in-memory fake both satisfy it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from controller.raft.errors import CommitUnknownError, NotLeaderError, ReadLaggingError

__all__ = ["CommitUnknownError", "NotLeaderError", "RaftLike", "ReadLaggingError"]


class RaftLike(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def propose(self, data: bytes) -> object: ...

    async def read_index(self) -> None: ...

    async def lease_read(self) -> None: ...

    async def follower_read(self) -> None: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_id(self) -> str | None: ...

    @property
    def term(self) -> int: ...

    @property
    def commit_index(self) -> int: ...

    @property
    def applied_index(self) -> int: ...

    def on_leadership_change(self, cb: Callable[[bool], None]) -> None: ...
