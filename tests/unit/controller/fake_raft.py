"""A tiny in-memory single-node stand-in for `controller.raft.driver.RaftNode` (docs/RAFT-CONTRACT.md API).

Proposals apply to the state machine in order. Tests can hold proposals (`hold()`/`release()`) to see how many
are in flight at once, flip leadership, and make follower reads lag.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from controller.raft.errors import NotLeaderError, ReadLaggingError
from controller.statemachine.machine import ControllerStateMachine


class FakeRaft:
    def __init__(self, sm: ControllerStateMachine, *, node_id: str = "n0", leader: bool = True,
                 peers: dict[str, str] | None = None) -> None:
        self.sm = sm
        self.node_id = node_id
        self.peers = peers or {}
        self._leader = leader
        self._leader_id: str | None = node_id if leader else None
        self._term = 1
        self._index = 0
        self._callbacks: list[Callable[[bool], None]] = []
        self._gate: asyncio.Event | None = None
        self.inflight = 0
        self.max_inflight = 0
        self.proposals = 0
        self.read_index_calls = 0
        self.lease_read_calls = 0
        self.follower_read_calls = 0
        self.follower_lagging = False
        self.fail_next: Exception | None = None  # raised by the next propose after it was "appended"

    # -- test controls ------------------------------------------------------------------------------------

    def set_leader(self, leader: bool, leader_id: str | None = None) -> None:
        changed = leader != self._leader
        self._leader = leader
        self._leader_id = self.node_id if leader else leader_id
        if changed:
            self._term += 1
            for cb in self._callbacks:
                cb(leader)

    def hold(self) -> None:
        self._gate = asyncio.Event()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    def _not_leader(self) -> NotLeaderError:
        lid = self._leader_id
        return NotLeaderError(lid, self.peers.get(lid) if lid else None)

    # -- contract ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.release()

    async def propose(self, data: bytes) -> object:
        if not self._leader:
            raise self._not_leader()
        self.proposals += 1
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await asyncio.sleep(0)  # sleep-ok: commit happens on a later loop turn
            while self._gate is not None:
                await self._gate.wait()
            if not self._leader:
                raise self._not_leader()
            if self.fail_next is not None:
                err, self.fail_next = self.fail_next, None
                raise err
            self._index += 1
            return self.sm.apply(self._index, data)
        finally:
            self.inflight -= 1

    async def read_index(self) -> None:
        if not self._leader:
            raise self._not_leader()
        self.read_index_calls += 1

    async def lease_read(self) -> None:
        if not self._leader:
            raise self._not_leader()
        self.lease_read_calls += 1

    async def follower_read(self) -> None:
        self.follower_read_calls += 1
        if self._leader:
            return
        if self.follower_lagging:
            lid = self._leader_id
            raise ReadLaggingError(lid, self.peers.get(lid) if lid else None, 5000)

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def term(self) -> int:
        return self._term

    @property
    def commit_index(self) -> int:
        return self._index

    @property
    def applied_index(self) -> int:
        return self._index

    def on_leadership_change(self, cb: Callable[[bool], None]) -> None:
        self._callbacks.append(cb)
