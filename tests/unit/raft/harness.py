"""A small synchronous harness around several RaftCores for unit tests: instant disk, FIFO network.

`stabilize()` runs every core's Ready loop (persist instantly, send, apply, advance) and delivers
messages until nothing moves. Links can be cut per direction, and individual messages filtered.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from controller.raft.core import CoreConfig, RaftCore
from controller.raft.types import Entry, HardState, Message, ReadState, Role, Snapshot

MessageFilter = Callable[[Message], bool]  # True = drop


class Cluster:
    def __init__(self, n: int = 3, *, seed: int = 1, **cfg: object) -> None:
        self.ids = [f"n{i + 1}" for i in range(n)]
        self.cfg_kwargs = cfg
        self.cores: dict[str, RaftCore] = {}
        self.applied: dict[str, list[Entry]] = {i: [] for i in self.ids}
        self.read_states: dict[str, list[ReadState]] = {i: [] for i in self.ids}
        self.restored: dict[str, list[Snapshot]] = {i: [] for i in self.ids}
        self.blocked: set[tuple[str, str]] = set()
        self.drop_filter: MessageFilter | None = None
        self.sent: list[Message] = []
        self.down: set[str] = set()
        for k, nid in enumerate(self.ids):
            self.cores[nid] = self._new_core(nid, seed + k)

    def _new_core(self, nid: str, seed: int, **state: object) -> RaftCore:
        cfg = CoreConfig(nid, tuple(self.ids), **self.cfg_kwargs)  # type: ignore[arg-type]
        return RaftCore(cfg, random.Random(seed), **state)  # type: ignore[arg-type]

    def set_state(self, nid: str, hard_state: HardState, entries: list[Entry]) -> None:
        """Replace a node with one recovered from the given durable state."""
        self.cores[nid] = self._new_core(nid, 99, hard_state=hard_state, entries=entries)

    def __getitem__(self, nid: str) -> RaftCore:
        return self.cores[nid]

    # ------------------------------------------------------------------ network
    def isolate(self, nid: str) -> None:
        for other in self.ids:
            if other != nid:
                self.blocked |= {(nid, other), (other, nid)}

    def heal(self) -> None:
        self.blocked.clear()
        self.drop_filter = None

    def _deliverable(self, m: Message) -> bool:
        if (m.frm, m.to) in self.blocked or m.to in self.down or m.frm in self.down:
            return False
        return not (self.drop_filter and self.drop_filter(m))

    # ------------------------------------------------------------------ driving
    def process_ready(self, nid: str) -> list[Message]:
        core = self.cores[nid]
        out = core.take_early_messages()
        if not core.has_ready():
            return out
        rd = core.ready()
        out += rd.messages
        if rd.snapshot is not None:
            self.restored[nid].append(rd.snapshot)
        self.applied[nid].extend(rd.committed_entries)
        self.read_states[nid].extend(rd.read_states)
        core.advance(rd)
        return out

    def deliver(self, msgs: list[Message]) -> None:
        for m in msgs:
            self.sent.append(m)
            if self._deliverable(m):
                self.cores[m.to].step(m)

    def stabilize(self, max_rounds: int = 1000) -> None:
        for _ in range(max_rounds):
            moved = False
            for nid in self.ids:
                if nid in self.down:
                    continue
                msgs = self.process_ready(nid)
                if msgs:
                    moved = True
                    self.deliver(msgs)
            if not moved and not any(self.cores[i].has_ready() for i in self.ids if i not in self.down):
                return
        raise AssertionError("cluster did not stabilize")

    def tick(self, nid: str, times: int = 1) -> None:
        for _ in range(times):
            self.cores[nid].tick()
            self.stabilize()

    def tick_all(self, times: int = 1) -> None:
        for _ in range(times):
            for nid in self.ids:
                if nid not in self.down:
                    self.cores[nid].tick()
            self.stabilize()

    def elect(self, nid: str) -> None:
        """Make `nid` campaign as if an election timeout had passed everywhere without a leader."""
        for core in self.cores.values():
            core.tick_count = max(core.tick_count, core.cfg.election_ticks)
            if core.role != Role.LEADER:
                core.election_elapsed = max(core.election_elapsed, core.cfg.election_ticks)
        self.cores[nid].campaign()
        self.stabilize()
        assert self.cores[nid].role == Role.LEADER, f"{nid} failed to become leader"

    def leaders(self) -> list[str]:
        return [i for i in self.ids if i not in self.down and self.cores[i].role == Role.LEADER]

    def propose(self, nid: str, data: bytes) -> int:
        index, _ = self.cores[nid].propose(data)
        return index

    def data_applied(self, nid: str) -> list[bytes]:
        return [e.data for e in self.applied[nid] if e.data]
