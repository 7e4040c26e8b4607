"""RaftNode: the asyncio driver around the pure RaftCore (contract: docs/RAFT-CONTRACT.md).

One task runs the Ready loop, strictly in order: take Ready -> persist it (WAL append, one write and
at most one fsync, in a worker thread so ticking and networking go on) -> send its messages -> apply
committed entries / restore a snapshot / serve reads -> advance. Everything that arrives while a Ready
is being persisted (proposals, peer messages) lands in the next Ready, so one fsync covers a whole
batch. While persisting, leader replication messages that depend on nothing unpersisted are sent
immediately (`RaftCore.take_early_messages`), so followers write in parallel with the leader.

Ticks come from a monotonic clock: after a stall the missed ticks are replayed at once, so the tick
clock (and so the leader lease) never runs slow. `lease_read` catches up before judging the lease.

Call every method from the event loop the node was started on.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from controller.raft.api_types import StateMachine
from controller.raft.config import RaftConfig
from controller.raft.core import RaftCore
from controller.raft.errors import CommitUnknownError, NotLeaderError, ReadLaggingError
from controller.raft.snapshot import SnapshotStore
from controller.raft.storage import DiskOp, plan_checkpoint, plan_ready, recover
from controller.raft.transport import PeerTransport
from controller.raft.types import EntryKind, Message, Ready, Role
from controller.raft.waiters import ProposalWaiters, ReadOutcome, ReadWaiters
from controller.raft.wal import WriteAheadLog


class RaftNode:
    def __init__(
        self,
        cfg: RaftConfig,
        sm: StateMachine,
        *,
        client_addrs: dict[str, str] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.cfg = cfg
        self.sm = sm
        self.client_addrs = dict(client_addrs or {})
        self._sock = sock
        self.log = structlog.get_logger().bind(component="raft", group=cfg.group, node=cfg.self_id)
        self._rng = random.Random(cfg.seed)
        self._core: RaftCore | None = None
        self._wal = WriteAheadLog(Path(cfg.data_dir) / "wal", fsync=cfg.fsync)
        self._snapshots = SnapshotStore(Path(cfg.data_dir) / "snapshots", fsync=cfg.fsync)
        self._transport: PeerTransport | None = None
        self._proposals: ProposalWaiters[asyncio.Future[Any]] = ProposalWaiters()
        self._reads: ReadWaiters[asyncio.Future[None]] = ReadWaiters()
        # Read contexts: a per-process nonce + a counter, so a read answer addressed to an earlier
        # incarnation of this node (same id, counter restarted) can never complete a new read.
        self._ctx_nonce = os.urandom(8)
        self._ctx_seq = itertools.count(1)
        self._callbacks: list[Callable[[bool], None]] = []
        self._wake = asyncio.Event()
        self._kick_pending = False
        self._persisting = False
        self._loop_task: asyncio.Task[None] | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._clock_origin = 0.0
        self._ticks_done = 0
        self._was_leader = False
        self._lead = ""
        self._stopped = False
        self._failed: BaseException | None = None
        self.snapshots_installed = 0
        self.snapshots_taken = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Load the snapshot image and replay the WAL tail, bind the peer port, begin ticking."""
        snap, wal_state = await asyncio.to_thread(self._load)
        state = recover(snap, wal_state)
        if state.rewrite is not None:
            # A received snapshot image was saved but its WAL marker was not: make the WAL agree first.
            await asyncio.to_thread(self._wal.rotate, state.rewrite)
            self.log.warning("wal_rewritten_after_snapshot_crash", snapshot_index=snap.index if snap else 0)
        if state.snapshot is not None:
            self.sm.restore(state.snapshot.data)
        self._core = RaftCore(
            self.cfg.core_config(), random.Random(self._rng.getrandbits(64)),
            hard_state=state.hard_state, snapshot=state.snapshot, entries=state.entries,
        )
        self.log.info(
            "raft_started", term=state.hard_state.term, commit=state.hard_state.commit,
            snapshot_index=state.snapshot.index if state.snapshot else 0, entries=len(state.entries),
        )
        self._transport = PeerTransport(
            self.cfg.self_id, self.cfg.group, self.cfg.peers, self._on_messages, sock=self._sock,
            rng=random.Random(self._rng.getrandbits(64)),
        )
        await self._transport.start()
        self._loop_task = asyncio.create_task(self._ready_loop(), name=f"raft-ready-{self.cfg.self_id}")
        self._clock_origin = time.monotonic()
        self._schedule_tick()
        self._kick()

    def _load(self) -> tuple[Any, Any]:
        return self._snapshots.load(), self._wal.open()

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self._wake.set()
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self._transport is not None:
            await self._transport.stop()
        self._wal.close()
        err = self._not_leader()
        for fut in self._proposals.drain():
            _fail(fut, CommitUnknownError(self._lead or None, self._addr(self._lead), "raft node stopped"))
        for rfut in self._reads.drain():
            _fail(rfut, err)
        self.log.info("raft_stopped")

    # ------------------------------------------------------------------ client API
    async def propose(self, data: bytes) -> object:
        """Replicate `data`; resolves with StateMachine.apply's result once committed and applied here."""
        core = self._live_core()
        if core.role != Role.LEADER:
            raise self._not_leader()
        index, term = core.propose(data)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        displaced = self._proposals.add(index, term, fut)
        if displaced is not None:
            _fail(displaced, self._not_leader())
        self._kick()
        return await fut

    async def read_index(self) -> None:
        """Linearizable read barrier on the leader: returns once applied >= a leader-confirmed commit index."""
        core = self._live_core()
        if core.role != Role.LEADER:
            raise self._not_leader()
        await self._read(lambda ctx: core.read_index(ctx))

    async def lease_read(self) -> None:
        """Like read_index, but answered locally while the leader lease holds (falls back otherwise)."""
        core = self._live_core()
        if core.role != Role.LEADER:
            raise self._not_leader()
        self._catch_up_ticks()
        await self._read(lambda ctx: core.lease_read(ctx))

    async def follower_read(self) -> None:
        """Linearizable read on any member: the leader confirms the read index, we wait for local apply.

        Raises ReadLaggingError when this follower's commit index trails the leader's by more than
        max_follower_lag_entries, NotLeaderError when no leader is known or it does not answer in time.
        """
        core = self._live_core()
        await self._read(lambda ctx: core.read_index(ctx))

    async def _read(self, register: Callable[[bytes], None]) -> None:
        ctx = self._ctx_nonce + next(self._ctx_seq).to_bytes(8, "big")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            register(ctx)
        except NotLeaderError:
            raise self._not_leader() from None
        self._reads.add(ctx, fut)
        self._kick()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.cfg.read_timeout_s)
        except TimeoutError:
            self._reads.cancel(ctx)
            if self._core is not None:
                self._core.cancel_read(ctx)  # stop re-sending a forwarded follower read
            if not fut.done():
                fut.cancel()
            raise self._not_leader() from None

    @property
    def is_leader(self) -> bool:
        core = self._core
        return core is not None and core.role == Role.LEADER and not self._stopped and self._failed is None

    @property
    def leader_id(self) -> str | None:
        return (self._core.lead or None) if self._core else None

    @property
    def term(self) -> int:
        return self._core.term if self._core else 0

    @property
    def commit_index(self) -> int:
        return self._core.log.committed if self._core else 0

    @property
    def applied_index(self) -> int:
        return self._core.log.applied if self._core else 0

    @property
    def core(self) -> RaftCore:
        """The pure core (read-only use: status, tests)."""
        return self._live_core()

    def on_leadership_change(self, cb: Callable[[bool], None]) -> None:
        self._callbacks.append(cb)

    # ------------------------------------------------------------------ plumbing
    def _live_core(self) -> RaftCore:
        if self._core is None or self._stopped:
            raise NotLeaderError(None, None, "raft node is not running")
        if self._failed is not None:
            raise NotLeaderError(None, None, f"raft node failed: {self._failed}")
        return self._core

    def _addr(self, node_id: str) -> str | None:
        return self.client_addrs.get(node_id) if node_id else None

    def _not_leader(self) -> NotLeaderError:
        lead = self._core.lead if self._core else ""
        return NotLeaderError(lead or None, self._addr(lead))

    def _on_messages(self, msgs: list[Message]) -> None:
        core = self._core
        if core is None or self._stopped:
            return
        me = self.cfg.self_id
        for m in msgs:
            if m.to == me:
                core.step(m)
        self._kick()

    def _schedule_tick(self) -> None:
        if self._stopped:
            return
        tick_s = self.cfg.tick_ms / 1000.0
        next_at = self._clock_origin + (self._ticks_done + 1) * tick_s
        delay = max(0.0, next_at - time.monotonic())
        self._tick_handle = asyncio.get_running_loop().call_later(delay, self._on_tick)

    def _on_tick(self) -> None:
        self._catch_up_ticks()
        self._kick()
        self._schedule_tick()

    def _catch_up_ticks(self) -> None:
        core = self._core
        if core is None:
            return
        due = int((time.monotonic() - self._clock_origin) * 1000.0 / self.cfg.tick_ms)
        while self._ticks_done < due:
            self._ticks_done += 1
            core.tick()

    def _kick(self) -> None:
        if not self._kick_pending and not self._stopped:
            self._kick_pending = True
            asyncio.get_running_loop().call_soon(self._do_kick)

    def _do_kick(self) -> None:
        self._kick_pending = False
        core = self._core
        if core is None or self._stopped:
            return
        self._notice_role_change(core)
        if self._persisting:
            self._send(core.take_early_messages())
        else:
            self._wake.set()

    def _send(self, msgs: list[Message]) -> None:
        if msgs and self._transport is not None:
            self._transport.send(msgs)

    def _notice_role_change(self, core: RaftCore) -> None:
        if core.lead != self._lead:
            self._lead = core.lead
            self.log.info("leader_changed", leader=core.lead or None, term=core.term)
        is_leader = core.role == Role.LEADER
        if is_leader == self._was_leader:
            return
        self._was_leader = is_leader
        self.log.info("became_leader" if is_leader else "lost_leadership", term=core.term)
        if not is_leader:
            err = self._not_leader()
            for fut in self._reads.drain_unconfirmed():
                _fail(fut, err)
            for pfut in self._proposals.overwritten(core.log.term):
                _fail(pfut, err)
        for cb in list(self._callbacks):
            try:
                cb(is_leader)
            except Exception:
                self.log.exception("leadership_callback_failed")

    # ------------------------------------------------------------------ the Ready loop
    async def _ready_loop(self) -> None:
        core = self._core
        assert core is not None
        try:
            while not self._stopped:
                await self._wake.wait()
                self._wake.clear()
                while not self._stopped and core.has_ready():
                    await self._handle_ready(core)
        except Exception as e:
            self._failed = e
            self.log.exception("raft_ready_loop_failed")
            err = NotLeaderError(None, None, f"raft node failed: {e}")
            for fut in self._proposals.drain():  # appended, maybe replicated: the outcome is unknown
                _fail(fut, CommitUnknownError(None, None, f"raft node failed: {e}"))
            for rfut in self._reads.drain():
                _fail(rfut, err)

    async def _handle_ready(self, core: RaftCore) -> None:
        self._send(core.take_early_messages())
        rd = core.ready()
        ops = plan_ready(rd, core.persisted_hs)
        if ops:
            # A received snapshot image (multi-MB) is always written off the loop, fsync or not.
            await self._run_disk(ops, rd.must_sync or rd.snapshot is not None, off_loop=rd.snapshot is not None)
        self._send(rd.messages)
        self._apply(core, rd)
        core.advance(rd)
        self._notice_role_change(core)
        if core.role != Role.LEADER and len(self._proposals):
            for fut in self._proposals.overwritten(core.log.term):
                _fail(fut, self._not_leader())
        await self._maybe_checkpoint(core)

    async def _run_disk(self, ops: list[DiskOp], sync: bool, *, off_loop: bool = False) -> None:
        """Run disk ops in a worker thread (the core is not touched there: ops hold only immutable data).

        Without fsync, small WAL appends stay on the loop (page-cache writes, cheaper than a thread hop).
        """
        self._persisting = True
        try:
            if self.cfg.fsync or off_loop:
                await asyncio.to_thread(self._execute_ops, ops, sync)
            else:
                self._execute_ops(ops, sync)  # page-cache writes only: cheap enough for the loop
        finally:
            self._persisting = False

    def _execute_ops(self, ops: list[DiskOp], sync: bool) -> None:
        for kind, arg in ops:
            if kind == "image":
                self._snapshots.save(arg)
            elif kind == "append":
                self._wal.append(arg, sync=sync)
            elif kind == "rotate":
                self._wal.rotate(arg)
            else:
                raise AssertionError(f"unknown disk op {kind}")

    def _apply(self, core: RaftCore, rd: Ready) -> None:
        if rd.snapshot is not None:
            self.sm.restore(rd.snapshot.data)
            self.snapshots_installed += 1
            self.log.info("raft_snapshot_installed", index=rd.snapshot.index, term=rd.snapshot.term,
                          bytes=len(rd.snapshot.data))
            for fut in self._proposals.drop_through(rd.snapshot.index):
                _fail(fut, CommitUnknownError(core.lead or None, self._addr(core.lead), "covered by a snapshot"))
        for e in rd.committed_entries:
            result: Any = None
            error: BaseException | None = None
            if e.kind == EntryKind.NORMAL:
                try:
                    result = self.sm.apply(e.index, e.data)
                except Exception as exc:  # deterministic application error: report to the proposer
                    error = exc
                    self.log.warning("apply_failed", index=e.index, error=repr(exc))
            waiter = self._proposals.on_applied(e)
            if waiter is not None:
                fut, ours = waiter
                if not ours:
                    _fail(fut, self._not_leader())
                elif error is not None:
                    _fail(fut, error)
                elif not fut.done():
                    fut.set_result(result)
        applied = rd.committed_entries[-1].index if rd.committed_entries else core.log.applied
        applied = max(applied, rd.snapshot.index if rd.snapshot else 0)
        for rs in rd.read_states:
            outcome, rfut = self._reads.on_read_state(rs, applied)
            if rfut is None:
                continue
            if outcome == ReadOutcome.READY and not rfut.done():
                rfut.set_result(None)
            elif outcome == ReadOutcome.LAGGING:
                lead = core.lead
                _fail(rfut, ReadLaggingError(lead or None, self._addr(lead), rs.index - core.log.committed))
        for rfut in self._reads.release(applied):
            if not rfut.done():
                rfut.set_result(None)

    async def _maybe_checkpoint(self, core: RaftCore) -> None:
        log = core.log
        snap_index = log.snapshot.index if log.snapshot else 0
        if log.applied - snap_index < self.cfg.snapshot_threshold_entries:
            return
        t0 = time.monotonic()
        if getattr(self.sm, "snapshot_off_loop", False):
            # The Ready loop is parked here, so nothing applies to or restores the state machine
            # while the worker thread serialises it (see StateMachine.snapshot_off_loop).
            data = await asyncio.to_thread(self.sm.snapshot)
        else:
            data = self.sm.snapshot()
        t1 = time.monotonic()
        snap = core.snapshot_at(log.applied, data)
        ops = plan_checkpoint(snap, core.persisted_hs, log.slice(snap.index + 1, log.stabled + 1))
        await self._run_disk(ops, True, off_loop=True)  # image write + WAL rewrite: always off the loop
        core.compact(snap, self.cfg.snapshot_trailing_entries)
        self.snapshots_taken += 1
        self.log.info(
            "snapshot_taken", index=snap.index, bytes=len(snap.data), log_offset=log.offset,
            sm_snapshot_ms=round((t1 - t0) * 1000, 1), write_ms=round((time.monotonic() - t1) * 1000, 1),
        )


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
