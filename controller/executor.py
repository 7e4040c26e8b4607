"""Request classes and how they run: writes through Raft, consistent reads (log / ReadIndex / lease / follower),
unsafe reads from local state.

`ConcurrentExecutor` (the new design) runs every request in its own task: proposals are pipelined into Raft
(the driver batches them), reads wait only for their barrier. `LegacyExecutor` is the old design kept for
comparison: one queue, one worker; each request reads state, appends, waits for commit, then the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from brokerd.remoting.codes import ResponseCode as RC
from controller.raft_port import CommitUnknownError, NotLeaderError, RaftLike, ReadLaggingError
from controller.statemachine.apply import ApplyResult
from controller.statemachine.events import ReadEvent, encode_event
from controller.statemachine.reply import Decision, Reply

log = structlog.get_logger(component="controller_exec")

MAX_REDECIDE = 4
DecideFn = Callable[[], Decision]
ReadFn = Callable[[], Reply]
_READ_ENTRY = encode_event(ReadEvent())


@dataclass(frozen=True, slots=True)
class ExecSettings:
    read_mode: str = "read_index"      # read_index | lease | log
    follower_read: bool = True
    timeout_s: float = 5.0
    max_inflight: int = 50000
    legacy_read_through_log: bool = False  # RocketMQ isProcessReadEvent (legacy mode only)


class NotLeaderReply:
    """Builds the CONTROLLER_NOT_LEADER (2007) answer carrying the leader's controller address."""

    def __init__(self, raft: RaftLike, peers: dict[str, str]) -> None:
        self.raft = raft
        self.peers = peers

    def __call__(self, leader_id: str | None = None, leader_addr: str | None = None) -> Reply:
        lid = leader_id or self.raft.leader_id
        addr = leader_addr or (self.peers.get(lid) if lid else None)
        hdr = {"controllerLeaderId": lid, "controllerLeaderAddress": addr}
        return Reply(code=RC.CONTROLLER_NOT_LEADER,
                     remark=f"this controller is not the leader; leader: {lid or 'unknown'} at {addr or 'unknown'}",
                     header={k: v for k, v in hdr.items() if v})


def _timeout_reply(what: str, timeout: float) -> Reply:
    return Reply(code=RC.SYSTEM_ERROR, remark=f"{what} timed out after {timeout:g}s; the outcome is unknown")


class _Base:
    def __init__(self, raft: RaftLike, settings: Callable[[], ExecSettings], not_leader: NotLeaderReply) -> None:
        self.raft = raft
        self.settings = settings
        self.not_leader = not_leader
        self.inflight = 0

    async def _propose(self, data: bytes) -> ApplyResult | Reply:
        s = self.settings()
        try:
            async with asyncio.timeout(s.timeout_s):
                res = await self.raft.propose(data)
        except CommitUnknownError as e:
            # appended, then leadership was lost: it may still commit under the new leader
            nl = self.not_leader(e.leader_id, e.leader_addr)
            return Reply(code=nl.code, remark=f"leadership changed; the write's outcome is unknown. {nl.remark}",
                         header={**nl.header, "outcomeUnknown": "true"})
        except NotLeaderError as e:  # not appended (or overwritten by a new leader): definitely not applied
            return self.not_leader(e.leader_id, e.leader_addr)
        except TimeoutError:
            return _timeout_reply("the write", s.timeout_s)
        if not isinstance(res, ApplyResult):
            return Reply(code=RC.SYSTEM_ERROR, remark=f"unexpected apply result {type(res).__name__}")
        return res

    async def _barrier(self, fn: Callable[[], Awaitable[None]], what: str) -> Reply | None:
        s = self.settings()
        try:
            async with asyncio.timeout(s.timeout_s):
                await fn()
        except NotLeaderError as e:
            return self.not_leader(e.leader_id, e.leader_addr)
        except ReadLaggingError as e:
            nl = self.not_leader(e.leader_id, e.leader_addr)
            return Reply(code=nl.code, header=nl.header,
                         remark=f"this follower lags the leader by {e.lag_entries} entries; read from the leader: {nl.remark}")
        except TimeoutError:
            return _timeout_reply(what, s.timeout_s)
        return None

    async def _consistent_barrier(self) -> Reply | None:
        """Wait until local state reflects every write acknowledged before this call (linearizable read)."""
        s = self.settings()
        if not self.raft.is_leader:
            if s.follower_read:
                return await self._barrier(self.raft.follower_read, "the follower read")
            return self.not_leader()
        if s.read_mode == "log":
            res = await self._propose(_READ_ENTRY)
            return res if isinstance(res, Reply) else None
        if s.read_mode == "lease":
            return await self._barrier(self.raft.lease_read, "the lease read")
        return await self._barrier(self.raft.read_index, "the read index")

    async def _write_once(self, decide: DecideFn, *, barrier_on_noop: bool) -> Reply:
        last: ApplyResult | None = None
        for attempt in range(MAX_REDECIDE):
            d = decide()
            if d.event is None:
                if attempt == 0 and barrier_on_noop:
                    # nothing to change, but the answer must not come from a stale leader: confirm, re-decide
                    err = await self._consistent_barrier_leader()
                    if err is not None:
                        return err
                    d = decide()
                if d.event is None:
                    assert d.reply is not None
                    return d.reply
            res = await self._propose(encode_event(d.event))
            if isinstance(res, Reply):
                return res
            if res.ok:
                assert d.build is not None
                return d.build(res)
            last = res  # a precondition changed between decide and apply: decide again on the newer image
        assert last is not None
        return Reply(code=last.code, remark=last.remark)

    async def _consistent_barrier_leader(self) -> Reply | None:
        if not self.raft.is_leader:
            return self.not_leader()
        s = self.settings()
        if s.read_mode == "lease":
            return await self._barrier(self.raft.lease_read, "the lease read")
        return await self._barrier(self.raft.read_index, "the read index")


class ConcurrentExecutor(_Base):
    """The new design: every request concurrently, proposals pipelined."""

    async def write(self, decide: DecideFn) -> Reply:
        if not self.raft.is_leader:
            return self.not_leader()
        if self.inflight >= self.settings().max_inflight:
            return Reply(code=RC.SYSTEM_BUSY, remark="too many controller requests in flight; retry later")
        self.inflight += 1
        try:
            return await self._write_once(decide, barrier_on_noop=True)
        finally:
            self.inflight -= 1

    async def read(self, fn: ReadFn) -> Reply:
        err = await self._consistent_barrier()
        return err if err is not None else fn()

    async def unsafe_read(self, fn: ReadFn) -> Reply:
        return fn()

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


@dataclass(slots=True)
class _Job:
    run: Callable[[], Awaitable[Reply]]
    fut: asyncio.Future[Reply]


class LegacyExecutor(_Base):
    """The old design (RocketMQ's EventScheduler): one bounded queue, one worker, strictly one request at a time."""

    QUEUE_CAPACITY = 1024  # RocketMQ DLedgerController event queue

    def __init__(self, raft: RaftLike, settings: Callable[[], ExecSettings], not_leader: NotLeaderReply) -> None:
        super().__init__(raft, settings, not_leader)
        self.queue: asyncio.Queue[_Job] = asyncio.Queue(self.QUEUE_CAPACITY)
        self._worker: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="controller-legacy-scheduler")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        while not self.queue.empty():
            job = self.queue.get_nowait()
            if not job.fut.done():
                job.fut.set_result(Reply(code=RC.SYSTEM_ERROR, remark="controller stopping"))

    async def _run(self) -> None:
        while True:
            job = await self.queue.get()
            try:
                reply = await job.run()
            except Exception as e:  # noqa: BLE001 - one bad request must not stop the scheduler
                log.warning("legacy_request_failed", error=repr(e))
                reply = Reply(code=RC.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}")
            if not job.fut.done():
                job.fut.set_result(reply)

    async def _submit(self, run: Callable[[], Awaitable[Reply]]) -> Reply:
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(_Job(run, fut))
        except asyncio.QueueFull:
            return Reply(code=RC.SYSTEM_BUSY, remark="controller event queue is full")
        return await fut

    async def write(self, decide: DecideFn) -> Reply:
        async def run() -> Reply:
            if not self.raft.is_leader:
                return self.not_leader()
            return await self._write_once(decide, barrier_on_noop=False)
        return await self._submit(run)

    async def read(self, fn: ReadFn) -> Reply:
        async def run() -> Reply:
            if not self.raft.is_leader:
                return self.not_leader()
            if self.settings().legacy_read_through_log:
                res = await self._propose(_READ_ENTRY)
                if isinstance(res, Reply):
                    return res
            return fn()
        return await self._submit(run)

    async def unsafe_read(self, fn: ReadFn) -> Reply:
        return fn()


Executor = ConcurrentExecutor | LegacyExecutor
