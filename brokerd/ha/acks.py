"""When a stored put may be acknowledged: one mechanism for the disk flush (SYNC_FLUSH group commit) and the
replica acks (SYNC_MASTER / quorum writes / allAckInSyncStateSet), used by the Python send path and the C send
lane alike.

``PutAcks.wait(end, wait_store)`` answers at once (a ``PutStatus``) or with a future of one: PUT_OK once the
log is durable up to ``end`` (when the store flushes synchronously) *and* the replicas the broker's role needs
hold it; else FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE or IN_SYNC_REPLICAS_NOT_ENOUGH, as
RocketMQ's ``handleDiskFlushAndHA`` combines them (the flush outcome first). No task per put: callbacks only.

``ReplicaWaiters`` holds the puts waiting for replicas in end-offset order; the HA master releases them on each
``ReplicationProgress`` and a timer fails the ones older than the timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Protocol

from brokerd.ha.actions import ReplicationProgress
from brokerd.store.results import PutStatus

Ack = PutStatus | asyncio.Future[PutStatus]


class ReplicaWaiters:
    """Puts waiting for replica acks, oldest first; each resolved exactly once."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_s = timeout_ms / 1000.0
        self._q: deque[tuple[int, int, asyncio.Future[PutStatus], float]] = deque()
        self.timeouts = 0

    def __len__(self) -> int:
        return len(self._q)

    def add(self, end: int, need: int) -> asyncio.Future[PutStatus]:
        fut: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()
        self._q.append((end, need, fut, time.monotonic() + self.timeout_s))
        return fut

    def release(self, prog: ReplicationProgress) -> None:
        q = self._q
        while q and prog.releases(q[0][0], q[0][1]):
            fut = q.popleft()[2]
            if not fut.done():
                fut.set_result(PutStatus.PUT_OK)

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        q = self._q
        while q and q[0][3] <= now:
            fut = q.popleft()[2]
            self.timeouts += 1
            if not fut.done():
                fut.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)

    def fail_all(self, status: PutStatus) -> None:
        """The master stepped down or stops: nobody will release these."""
        while self._q:
            fut = self._q.popleft()[2]
            if not fut.done():
                fut.set_result(status)


class FlushWaiter(Protocol):
    """What ``PutAcks`` needs of the store for SYNC_FLUSH."""

    @property
    def sync_flush(self) -> bool: ...

    @property
    def flushed_offset(self) -> int: ...

    def wait_flushed(self, end: int) -> asyncio.Future[bool]:
        """True once the log is durable up to ``end``, False on timeout (or when the store is stopped)."""

    def request_flush(self) -> None:
        """Flush soon (a put that does not wait)."""


class ReplicaGate(Protocol):
    """What ``PutAcks`` needs of replication (``brokerd.ha.service.HAService``)."""

    def replica_ack(self, end: int) -> Ack:
        """PUT_OK now, a refusal now, or a future from ``ReplicaWaiters``."""

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

    def wait(self, end: int, wait_store: bool = True) -> Ack:
        """How the put ending at ``end`` is acknowledged; ``wait_store=False`` (property WAIT=false) answers
        PUT_OK at once, as RocketMQ skips both waits then."""
        if not wait_store:
            if self.flush.sync_flush:
                self.flush.request_flush()
            return PutStatus.PUT_OK
        flush = self.flush
        flushed = flush.wait_flushed(end) if flush.sync_flush and end > flush.flushed_offset else None
        replica = self.replicas.replica_ack(end) if self.replicas is not None else PutStatus.PUT_OK
        if flushed is None:
            return replica
        return _combine(flushed, replica)


def _combine(flushed: asyncio.Future[bool], replica: Ack) -> asyncio.Future[PutStatus]:
    out: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()

    def settle() -> None:
        if out.done() or not flushed.done() or (isinstance(replica, asyncio.Future) and not replica.done()):
            return
        if flushed.cancelled() or not flushed.result():
            out.set_result(PutStatus.FLUSH_DISK_TIMEOUT)
        elif isinstance(replica, asyncio.Future):
            out.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT if replica.cancelled() else replica.result())
        else:
            out.set_result(replica)

    flushed.add_done_callback(lambda _f: settle())
    if isinstance(replica, asyncio.Future):
        replica.add_done_callback(lambda _f: settle())
    return out
