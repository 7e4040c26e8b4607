"""One simulated Raft member: the real `RaftCore` plus a simulated disk, KV state machine and clock.

It mirrors what `controller.raft.driver.RaftNode` does around the core (persist -> send -> apply ->
advance, early leader messages while persisting, local checkpoints, the same waiter bookkeeping and
the same disk-operation plans), but on virtual time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from controller.raft.core import CoreConfig, RaftCore
from controller.raft.errors import NotLeaderError
from controller.raft.storage import plan_checkpoint, plan_ready
from controller.raft.types import EntryKind, Message, Ready, Role
from controller.raft.waiters import ProposalWaiters, ReadOutcome, ReadWaiters
from tests.sim.disk import SimDisk
from tests.sim.kv import KVStateMachine, encode_put

if TYPE_CHECKING:
    from tests.sim.cluster import Simulation

# Client callback: (outcome, value) with outcome "ok" | "fail" (definitely no effect) | "unknown".
Callback = Callable[[str, object], None]
ReadToken = tuple[str, Callback]


class SimNode:
    def __init__(self, sim: Simulation, node_id: str, cfg: CoreConfig, tick_ms: float) -> None:
        self.sim = sim
        self.id = node_id
        self.cfg = cfg
        self.tick_ms = tick_ms
        self.disk = SimDisk()
        self.alive = False
        self.incarnation = 0
        self.core: RaftCore | None = None
        self.kv = KVStateMachine()
        self.busy = False
        self.proposals: ProposalWaiters[Callback] = ProposalWaiters()
        self.reads: ReadWaiters[ReadToken] = ReadWaiters()
        self.was_leader = False
        self.read_seq = 0
        self.checked_commit = 0
        self.restores = 0
        self.paused_until = 0.0  # a stalled process: its events wait until then
        self.clock_origin = 0.0
        self.ticks_done = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        st = self.disk.load()
        self.core = RaftCore(
            self.cfg, random.Random(self.sim.rng.getrandbits(64)),
            hard_state=st.hard_state, snapshot=st.snapshot, entries=st.entries,
        )
        self.kv = KVStateMachine()
        if st.snapshot is not None:
            self.kv.restore(st.snapshot.data)
        self.alive = True
        self.incarnation += 1
        self.read_seq = 0
        self.busy = False
        self.was_leader = False
        self.checked_commit = self.core.log.offset
        self.clock_origin = self.sim.now
        self.ticks_done = 0
        self.sim.on_node_started(self)
        self._schedule_tick()

    def crash(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self.incarnation += 1
        self.disk.crash(self.sim.rng)
        self.core = None
        for cb in self.proposals.drain():
            cb("unknown", None)
        for _, cb in self.reads.drain():
            cb("fail", None)

    def _schedule_tick(self) -> None:
        inc = self.incarnation
        self.sim.schedule(self.tick_ms, lambda: self._tick(inc))

    def _tick(self, inc: int) -> None:
        if inc != self.incarnation or self.core is None:
            return
        if self._deferred(lambda: self._tick(inc)):
            return
        self._catch_up_ticks(self.core)
        self.process()
        self._schedule_tick()

    def _catch_up_ticks(self, core: RaftCore) -> None:
        """Tick as often as the node's (drifting) clock says, like the driver's monotonic catch-up."""
        due = int((self.sim.now - self.clock_origin) / self.tick_ms)
        while self.ticks_done < due:
            self.ticks_done += 1
            core.tick()

    def _deferred(self, fn: Callable[[], None]) -> bool:
        """While the node is paused, re-queue its events for when it resumes (keeping their order)."""
        if self.sim.now < self.paused_until:
            self.sim.schedule(self.paused_until - self.sim.now, fn)
            return True
        return False

    def pause(self, ms: float) -> None:
        self.paused_until = max(self.paused_until, self.sim.now + ms)

    # ------------------------------------------------------------------ inputs
    def deliver(self, m: Message) -> None:
        if self.core is None or self._deferred(lambda: self.deliver(m)):
            return
        self.core.step(m)
        self.process()

    def client_write(self, key: str, value: int, cb: Callback) -> None:
        if self.core is None:
            cb("fail", None)
            return
        if self._deferred(lambda: self.client_write(key, value, cb)):
            return
        try:
            index, term = self.core.propose(encode_put(key, value))
        except NotLeaderError as e:
            cb("fail", e.leader_id)
            return
        displaced = self.proposals.add(index, term, cb)
        if displaced is not None:
            displaced("fail", None)
        self.process()

    def client_read(self, mode: str, key: str, cb: Callback, ctx: bytes | None = None) -> None:
        """Start a read. Contexts are numbered per node like the driver's (a per-process nonce, here the
        incarnation, plus a counter), so different members use equal contexts at the same time."""
        core = self.core
        if core is None:
            cb("fail", None)
            return
        if self._deferred(lambda: self.client_read(mode, key, cb, ctx)):
            return
        self._catch_up_ticks(core)  # as the driver does before judging the lease
        if ctx is None:
            self.read_seq += 1
            ctx = self.incarnation.to_bytes(4, "big") + self.read_seq.to_bytes(8, "big")
        try:
            if mode == "lease":
                core.lease_read(ctx)
            elif mode == "index" and core.role != Role.LEADER:
                raise NotLeaderError(core.lead)
            else:
                core.read_index(ctx)  # "index" on the leader, "follower" anywhere
        except NotLeaderError as e:
            cb("fail", e.leader_id)
            return
        self.reads.add(ctx, (key, cb))
        self.process()

    # ------------------------------------------------------------------ the Ready loop
    def process(self) -> None:
        core = self.core
        if core is None:
            return
        self._notice_role_change(core)
        if self.busy:
            self.sim.send(core.take_early_messages())
        elif core.has_ready():
            self._start_ready(core)
        self.sim.check_node(self)

    def _notice_role_change(self, core: RaftCore) -> None:
        is_leader = core.role == Role.LEADER
        if is_leader != self.was_leader:
            self.sim.trace(f"{self.id} {'became leader' if is_leader else 'lost leadership'} term={core.term}")
        if self.was_leader and not is_leader:
            for _, cb in self.reads.drain_unconfirmed():
                cb("fail", None)
        self.was_leader = is_leader

    def _start_ready(self, core: RaftCore) -> None:
        self.sim.send(core.take_early_messages())
        rd = core.ready()
        ops = plan_ready(rd, core.persisted_hs)
        sync = rd.must_sync or rd.snapshot is not None
        self.busy = True
        inc = self.incarnation
        if ops:
            self.disk.begin(ops, sync)
        delay = self.sim.fsync_ms() if ops and sync else 0.01
        self.sim.schedule(delay, lambda: self._ready_done(inc, rd, bool(ops)))

    def _ready_done(self, inc: int, rd: Ready, wrote: bool) -> None:
        if inc != self.incarnation or self.core is None:
            return
        if self._deferred(lambda: self._ready_done(inc, rd, wrote)):
            return
        core = self.core
        if wrote:
            self.disk.complete()
        self.sim.send(rd.messages)
        self._apply(core, rd)
        core.advance(rd)
        self.busy = False
        if not self._maybe_checkpoint(core):
            self.process()

    def _apply(self, core: RaftCore, rd: Ready) -> None:
        if rd.snapshot is not None:
            self.kv.restore(rd.snapshot.data)
            self.restores += 1
            self.sim.on_restored(self, rd.snapshot.index)
            for cb in self.proposals.drop_through(rd.snapshot.index):
                cb("unknown", None)
        for e in rd.committed_entries:
            if e.kind == EntryKind.NORMAL:
                self.kv.apply(e.index, e.data)
            self.kv.applied_index = e.index
            self.sim.on_applied(self, e)
            waiter = self.proposals.on_applied(e)
            if waiter is not None:
                cb, ours = waiter
                cb("ok" if ours else "fail", e.index)
        applied = self.kv.applied_index
        for rs in rd.read_states:
            outcome, token = self.reads.on_read_state(rs, applied)
            if token is None:
                continue
            if outcome == ReadOutcome.READY:
                self._serve_read(token)
            elif outcome == ReadOutcome.LAGGING:
                token[1]("fail", None)
        for token in self.reads.release(applied):
            self._serve_read(token)

    def _serve_read(self, token: ReadToken) -> None:
        key, cb = token
        cb("ok", self.kv.get(key))

    def _maybe_checkpoint(self, core: RaftCore) -> bool:
        log = core.log
        snap_index = log.snapshot.index if log.snapshot else 0
        if log.applied - snap_index < self.sim.params.snapshot_threshold:
            return False
        snap = core.snapshot_at(log.applied, self.kv.snapshot())
        ops = plan_checkpoint(snap, core.persisted_hs, log.slice(snap.index + 1, log.stabled + 1))
        self.disk.begin(ops, True)
        self.busy = True
        inc = self.incarnation

        def done() -> None:
            if inc != self.incarnation or self.core is None:
                return
            self.disk.complete()
            self.core.compact(snap, self.sim.params.snapshot_trailing)
            self.busy = False
            self.process()

        self.sim.schedule(self.sim.fsync_ms(), done)
        return True

    @property
    def role(self) -> Role | None:
        return self.core.role if self.core else None
