"""Operations applied to the POP state and not in the revive log yet, and who waits for them to be written or to
be durable. Synchronous; ``PopCore`` decides when they are written (the end of the loop turn, or ahead of an
operation that must be written before it takes effect).

The operations are kept in the order they were applied: checkpoints as they are, acks in runs merged per
checkpoint (a run ends where a checkpoint was deferred after it), so one record written from them replays in
the order the live state took them. ``write`` appends them (and one more operation, if given) as one ``ops``
record, then releases the waiters: the *written* ones (POP answers: their checkpoint is in the log) at once,
the *durable* ones (ACK answers) once the broker's put acknowledgement covers the record (``BrokerContext.acks``).
A record the store refuses releases every waiter with the store's status. The answers released together go out
in one write per connection (``Outbox``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog

from brokerd.pop.records import Ack, CkKey, Op
from brokerd.pop.revive_log import ReviveLog
from brokerd.remoting.codec import encode_parts
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.results import PutMessageResult, PutStatus

log = structlog.get_logger().bind(component="pop")


Outbox = dict[Connection, list[bytes | memoryview]]  # answers released together: one write per connection


class Sink(Protocol):
    """A processor waiting for operations: ``release`` gets every item it registered for one record, with the
    record's status (PUT_OK, or why it is not written / not durable), and puts its answers in ``out``."""

    def release(self, items: list[Any], status: PutStatus, out: Outbox) -> None: ...


class DurableAcks(Protocol):
    """``brokerd.ha.acks.PutAcks``: when a stored put may be answered."""

    def when_acked(self, end: int, done: Callable[[PutStatus], None], wait_store: bool = True) -> PutStatus | None: ...


Waiters = dict[Sink, list[Any]]


class PendingOps:
    def __init__(self, log_: ReviveLog, acks: Callable[[], DurableAcks]) -> None:
        self.log = log_
        self.acks = acks
        self.ops: list[Op | dict[CkKey, list[int] | range]] = []
        self.count = 0  # operations (an ack per checkpoint counts once)
        self._run: dict[CkKey, list[int] | range] | None = None  # the open run of acks (the last element of ``ops``)
        self.written: Waiters = {}
        self.durable: Waiters = {}

    @property
    def idle(self) -> bool:
        return not self.ops and not self.written and not self.durable

    def ack(self, key: CkKey, offsets: Sequence[int]) -> None:
        run = self._run
        if run is None:
            run = self._run = {}
            self.ops.append(run)
        got = run.get(key)
        if got is None:
            run[key] = offsets if type(offsets) is range else list(offsets)  # a range: a whole pop's (one run)
            self.count += 1
        else:
            if type(got) is range:
                got = run[key] = list(got)
            got.extend(offsets)

    def add(self, op: Op) -> None:
        self.ops.append(op)
        self._run = None
        self.count += 1

    def wait(self, table: Waiters, sink: Sink, item: Any) -> None:
        items = table.get(sink)
        if items is None:
            table[sink] = [item]
        else:
            items.append(item)

    def take(self) -> tuple[list[Op], Waiters, Waiters]:
        ops: list[Op] = []
        for op in self.ops:
            if type(op) is dict:
                ops.extend(Ack(key, offsets if type(offsets) is range else tuple(offsets)) for key, offsets in op.items())
            else:
                ops.append(op)  # type: ignore[arg-type]
        written, durable = self.written, self.durable
        self.ops, self.count, self._run, self.written, self.durable = [], 0, None, {}, {}
        return ops, written, durable

    def write(self, extra: Op | None = None) -> tuple[PutMessageResult, bool]:
        """Append the pending operations (and ``extra``) as one record and release the waiters; (the store's
        result, whether applied operations were lost: the record was refused)."""
        ops, written, durable = self.take()
        lost = bool(ops)
        if extra is not None:
            ops.append(extra)
        if ops:
            res = self.log.append_ops(ops)
        else:  # only waiters (a repeated ack): what was written before them
            res = PutMessageResult(PutStatus.PUT_OK, end_offset=self.log.last_end)
        out: Outbox = {}
        release(written, res.status, out)
        if not res.ok:
            release(durable, res.status, out)
        elif durable:
            now = self.acks().when_acked(res.end_offset, lambda st: send(release(durable, st, {})))
            if now is not None:
                release(durable, now, out)
        send(out)
        return res, lost and not res.ok

    def drop(self, status: PutStatus) -> None:
        """The state they were applied to is thrown away (a role change): every waiter gets ``status``."""
        _, written, durable = self.take()
        out: Outbox = {}
        release(written, status, out)
        release(durable, status, out)
        send(out)


def release(waiting: Waiters, status: PutStatus, out: Outbox) -> Outbox:
    for sink, items in waiting.items():
        try:
            sink.release(items, status, out)
        except Exception:  # noqa: BLE001 - one sink's failure must not keep the others' answers back
            log.exception("pop_release_failed")
    return out


def put_answer(out: Outbox, conn: Connection, resp: RemotingCommand) -> None:
    """Put ``resp`` in the outbox."""
    head, body = encode_parts(resp)
    frames = out.get(conn)
    if frames is None:
        frames = out[conn] = []
    frames.append(head)
    if body:
        frames.append(body)


def send(out: Outbox) -> None:
    for conn, frames in out.items():
        conn.write_frames(frames)
