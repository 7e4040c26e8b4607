"""When a stored put may be acknowledged: one mechanism for the disk flush (SYNC_FLUSH group commit) and the
replica acks (SYNC_MASTER / quorum writes / allAckInSyncStateSet), used by the Python send path and the C send
lane alike.

``PutAcks.when_acked(end, done)`` answers at once (a ``PutStatus``) or calls ``done(status)`` later: PUT_OK once
the log is durable up to ``end`` (when the store flushes synchronously) *and* the replicas the broker's role
needs hold it; else FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE or IN_SYNC_REPLICAS_NOT_ENOUGH,
as RocketMQ's ``handleDiskFlushAndHA`` combines them (the flush outcome first). ``done`` runs right where the
flush completion or the replication progress releases the put (no future, no extra loop iteration per step:
under load each hop costs one loop iteration); ``wait`` is the same as a future, for code that awaits it.

``ReplicaWaiters`` holds the puts waiting for replicas in end-offset order; the HA master releases them on each
``ReplicationProgress`` and a timer fails the ones older than the timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import structlog

from brokerd.ha.actions import ReplicationProgress
from brokerd.store.results import PutStatus

log = structlog.get_logger(component="put_acks")


Acked = Callable[[PutStatus], None]


def _call(done: Acked, status: PutStatus) -> None:
    try:
        done(status)
    except Exception:  # noqa: BLE001 - one put's answer must not keep the others waiting
        log.exception("put_ack_callback_failed")


class ReplicaWaiters:
    """Puts waiting for replica acks, oldest first; each resolved exactly once."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_s = timeout_ms / 1000.0
        self._q: deque[tuple[int, int, Acked, float]] = deque()
        self.timeouts = 0

    def __len__(self) -> int:
        return len(self._q)

    def add(self, end: int, need: int, done: Acked) -> None:
        self._q.append((end, need, done, time.monotonic() + self.timeout_s))

    def release(self, prog: ReplicationProgress) -> None:
        q = self._q
        while q and prog.releases(q[0][0], q[0][1]):
            _call(q.popleft()[2], PutStatus.PUT_OK)

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        q = self._q
        while q and q[0][3] <= now:
            self.timeouts += 1
            _call(q.popleft()[2], PutStatus.FLUSH_SLAVE_TIMEOUT)

    def fail_all(self, status: PutStatus) -> None:
        """The master stepped down or stops: nobody will release these."""
        while self._q:
            _call(self._q.popleft()[2], status)


class FlushWaiter(Protocol):
    """What ``PutAcks`` needs of the store for SYNC_FLUSH."""

    @property
    def sync_flush(self) -> bool: ...

    @property
    def flushed_offset(self) -> int: ...

    def when_flushed(self, end: int, done: Callable[[bool], None]) -> None:
        """``done(True)`` once the log is durable up to ``end``, ``done(False)`` on timeout (or when stopped)."""

    def request_flush(self) -> None:
        """Flush soon (a put that does not wait)."""


class ReplicaGate(Protocol):
    """What ``PutAcks`` needs of replication (``brokerd.ha.service.HAService``)."""

    def replica_ack(self, end: int, done: Acked) -> PutStatus | None:
        """PUT_OK or a refusal now, or None: ``done(status)`` once the replicas decided (``ReplicaWaiters``)."""

    @property
    def waits_for_replicas(self) -> bool:
        """True when puts may wait for replicas (SYNC_MASTER, quorum, allAckInSyncStateSet on a master)."""


class PutAcks:
    def __init__(self, flush: FlushWaiter, replicas: ReplicaGate | None) -> None:
        self.flush = flush
        self.replicas = replicas

    @property
    def may_wait(self) -> bool:
        """Whether any put may need to wait (the C lane then collects answers instead of writing them)."""
        return self.flush.sync_flush or (self.replicas is not None and self.replicas.waits_for_replicas)

    def when_acked(self, end: int, done: Acked, wait_store: bool = True) -> PutStatus | None:
        """How the put ending at ``end`` is acknowledged: a status now, or None and ``done(status)`` later;
        ``wait_store=False`` (property WAIT=false) answers PUT_OK at once, as RocketMQ skips both waits then."""
        flush = self.flush
        if not wait_store:
            if flush.sync_flush:
                flush.request_flush()
            return PutStatus.PUT_OK
        need_flush = flush.sync_flush and end > flush.flushed_offset
        both = _Both(done) if need_flush else None
        replica = (self.replicas.replica_ack(end, both.replica if both else done) if self.replicas is not None
                   else PutStatus.PUT_OK)  # fmt: skip
        if both is None:
            return replica
        if replica is not None:
            both.replica(replica)
        flush.when_flushed(end, both.flushed)
        return None

    def wait(self, end: int, wait_store: bool = True) -> PutStatus | asyncio.Future[PutStatus]:
        """``when_acked`` with a future for the later answer."""
        fut: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()
        now = self.when_acked(end, lambda st: None if fut.done() else fut.set_result(st), wait_store)
        return fut if now is None else now


class _Both:
    """A put waiting for the flush and the replicas: ``done`` once both decided, the flush outcome first."""

    __slots__ = ("done", "ok", "status")

    def __init__(self, done: Acked) -> None:
        self.done: Acked | None = done
        self.ok: bool | None = None
        self.status: PutStatus | None = None

    def flushed(self, ok: bool) -> None:
        self.ok = ok
        self._settle()

    def replica(self, status: PutStatus) -> None:
        self.status = status
        self._settle()

    def _settle(self) -> None:
        done = self.done
        if self.ok is None or self.status is None or done is None:
            return
        self.done = None
        _call(done, self.status if self.ok else PutStatus.FLUSH_DISK_TIMEOUT)
