"""The POP service of one broker: role changes, the revive timer, and the operations the request processors (and
the gRPC endpoint) call — ``pop``, ``ack``, ``renew`` (change invisible time).

A master serves POP once its state is rebuilt from its revive log (``activate``: at start and whenever it becomes
master); a slave serves none and revives nothing (its log receives the master's records by replication, and it
rebuilds from them when promoted). An acknowledgement is applied at once and written with the other acks of the
loop turn (``PopCore.defer``); a changed invisible time is written, then applied. Either is answered only once
the broker's put-acknowledgement rule holds for its record (``BrokerContext.acks``: the flush for SYNC_FLUSH, the
replicas for a SYNC master), so an ack answered OK survives a failover. An admin's reset of a POP group's consumer
offset (resetOffsetByTime) moves where the queue's next pop reads (``reset``), written like the other operations.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brokerd.pop.core import PopCore
from brokerd.pop.pending import Outbox, Sink
from brokerd.pop.popping import PopOutcome, Popper, PopRequest
from brokerd.pop.records import BatchBegin, QKey, Renew, Reset
from brokerd.pop.reviving import Reviver
from brokerd.pop.state import PopState
from brokerd.remoting.codes import ResponseCode
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

PUT_CODES = {PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
             PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
             PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
             PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SLAVE_NOT_AVAILABLE,
             PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE}
PENDING = -1  # Outcome.wait_end: the answer waits for the operations deferred so far (``PopCore.wait_pending``)


@dataclass(slots=True)
class Outcome:
    """The answer of an ACK / CHANGE_MESSAGE_INVISIBLETIME before its durability wait: ``code``/``remark``, and
    ``wait_end`` (commit-log end to wait for; 0: nothing written). A renew also carries its new handle's time."""

    code: int
    remark: str | None = None
    wait_end: int = 0  # PENDING: the deferred operations' record
    pop_time: int = 0
    invisible: int = 0
    revive_qid: int = 0


class PopService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.core = PopCore(broker)
        self.popper = Popper(self.core)
        self.reviver = Reviver(self.core)
        self.core.log.on_cut_closed = self._cut_closed
        self.core.on_lost = self._reload
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._callbacks = _Callbacks()
        self.on_activated: Callable[[], None] | None = None

    @property
    def active(self) -> bool:
        return self.core.active

    @property
    def state(self) -> PopState:
        return self.core.state

    # ------------------------------------------------------------------ roles

    def on_role(self) -> None:
        """Called at start and after every role change of the broker."""
        if self.broker.is_master():
            if not self.core.active:
                self.activate()
        elif self.core.active or self.core.state.cks:
            self.deactivate()

    def activate(self) -> None:
        core = self.core
        t0 = core.now()
        rebuilt = core.log.rebuild(self._bad_record)
        core.state = rebuilt.state
        core.counters.rebuilds += 1
        if rebuilt.open_batch is not None:  # the log ends inside a revive batch: close it before anything else
            core.log.cut_open = True
            if not core.log.ensure_closed():
                core.logger.warning("pop_cut_batch_not_closed")
        core.active = True
        if rebuilt.records or rebuilt.open_batch is not None:
            core.snapshot()
        core.commit_offsets()
        self._arm()
        core.logger.info("pop_state_rebuilt", records=rebuilt.records, snapshot_at=rebuilt.snapshot_offset,
                         checkpoints=len(core.state.cks), queues=len(core.state.queues), bad=rebuilt.bad_records,
                         cut_batch=rebuilt.open_batch is not None, took_ms=core.now() - t0)
        if self.on_activated is not None:
            self.on_activated()

    def deactivate(self) -> None:
        self.core.drop_pending(PutStatus.SERVICE_NOT_AVAILABLE)
        self.core.active = False
        self.core.state = PopState()
        self._cancel()
        self.core.logger.info("pop_deactivated")

    def stop(self) -> None:
        if self.core.active:
            self.core.flush()
        self.core.active = False
        self._cancel()

    def _reload(self) -> None:
        """A record with applied operations was refused: the state is rebuilt from what the log holds."""
        if self.core.active:
            self.deactivate()
            self.on_role()

    def _bad_record(self, qoff: int, error: str) -> None:
        self.core.logger.error("pop_record_unreadable", queue_offset=qoff, error=error)

    def _cut_closed(self, begin: BatchBegin, delivered: int) -> None:
        self.core.state.apply_resolve((*begin.drop, *begin.deliver[:delivered]))
        self.core.logger.warning("pop_cut_revive_batch_closed", delivered=delivered, items=len(begin.deliver))

    # ------------------------------------------------------------------ revive timer

    def _arm(self) -> None:
        due = self.core.state.next_due()
        if due is None or not self.core.active:
            self._cancel()
            return
        if self._timer is not None and self._timer_at <= due:
            return
        self._cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0, due - self.core.now()) / 1000.0, self._fire)
        self._timer_at = due

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        if not self.core.active:
            return
        try:
            done = self.reviver.run(self.core.now())
        except Exception as e:  # noqa: BLE001 - the revive timer must keep running
            self.core.logger.exception("pop_revive_failed", error=repr(e))
            done = True
        if not done:  # more due: at the loop's next turn, after what waits
            self._timer = asyncio.get_running_loop().call_soon(self._fire)  # type: ignore[assignment]
            self._timer_at = 0
            return
        self._arm()

    # ------------------------------------------------------------------ operations

    def pop(self, req: PopRequest, *, defer: bool = False) -> PopOutcome:
        """One pop. ``defer``: its checkpoints are written at the end of the loop turn with the turn's other
        operations; the caller sends the messages only once they are (``wait_written``)."""
        out = self.popper.pop(req, defer)
        if out.found:
            self._arm()
        return out

    def ack_one(self, q: QKey, start: int, pop_time: int, offset: int) -> bool:
        """The common ACK: ``offset``, in flight under the normal checkpoint a handle names, acknowledged (applied
        now, written with the turn's other acks); False when it is not in flight there (nothing changed: ``ack``
        decides the answer)."""
        core = self.core
        key = (*q, start, pop_time)
        if not core.state.ack_now(key, offset):
            return False
        core.defer_ack(key, (offset,))
        core.counters.acks += 1
        core.changed()
        return True

    def ack(self, q: QKey, start: int, pop_time: int, order: bool, offsets: Sequence[int]) -> Outcome:
        """Acknowledge ``offsets`` of the checkpoint a handle names: applied now, written with the turn's other
        acks (``wait_end`` PENDING). SUCCESS when every offset is acknowledged (now or before, its invisible time
        passed or not, as long as it was not revived); NO_MESSAGE when a handle is stale (the others are still
        acknowledged)."""
        core = self.core
        st = core.state
        if len(offsets) == 1 and not order and self.ack_one(q, start, pop_time, offsets[0]):
            return Outcome(ResponseCode.SUCCESS, None, PENDING)
        key = st.handle_key(q, start, pop_time, order)
        done, refused, why = st.ack_many(key, offsets)
        if done:
            core.defer_ack(key, done)
            core.counters.acks += len(done)
            if order and not st.blocked(q, core.now()):
                core.unblocked(q)
            core.changed()
        if why is not None:
            core.counters.refused_acks += refused
            return Outcome(ResponseCode.NO_MESSAGE, why, PENDING if refused < len(offsets) else 0)
        return Outcome(ResponseCode.SUCCESS, None, PENDING)

    def reset(self, q: QKey, offset: int) -> bool:
        """An admin reset the group's consumer offset of the queue: its next pop reads from ``offset`` (False: the
        queue was never popped here — its next pop starts at the consumer offset anyway — or not stored)."""
        core = self.core
        if not core.active or core.state.queue(q) is None:
            return False
        r = Reset(q, offset)
        res = core.append(r)
        if not res.ok:
            core.logger.warning("pop_reset_refused", group=q[0], topic=q[1], queue=q[2], status=res.status.name)
            return False
        core.state.apply_reset(r)
        core.changed()
        core.unblocked(q)  # parked requests of the group read from the new position
        core.logger.info("pop_offset_reset", group=q[0], topic=q[1], queue=q[2], offset=offset)
        return True

    def renew(self, q: QKey, start: int, pop_time: int, order: bool, offset: int, invisible: int) -> Outcome:
        """CHANGE_MESSAGE_INVISIBLETIME: a new handle (normal: a new one-message checkpoint popped now; FIFO: the
        same handle with a later deadline)."""
        core = self.core
        st = core.state
        key = st.handle_key(q, start, pop_time, order)
        now = core.now()
        why = st.check(key, offset) or ("message already acknowledged" if st.is_acked(key, offset) else None)
        if why is not None:
            core.counters.refused_acks += 1
            return Outcome(ResponseCode.NO_MESSAGE, why)
        if order:
            r = Renew(key, offset, key[4], now + invisible - key[4])
        else:
            new_time = now
            while (*q, offset, new_time) in st.cks:
                new_time += 1
            r = Renew(key, offset, new_time, invisible)
        res = core.append(r)
        if not res.ok:
            return Outcome(ResponseCode.SYSTEM_ERROR, f"change not stored: {res.status.name}")
        st.apply_renew(r)
        core.counters.renews += 1
        core.changed()
        self._arm()
        return Outcome(ResponseCode.SUCCESS, None, res.end_offset, r.new_pop_time, r.invisible,
                       999 if order else 0)

    def when_durable(self, out: Outcome, done: Callable[[Outcome], None]) -> Outcome | None:
        """``out`` now, or None and ``done(out)`` once the records it wrote are acknowledged as the broker's puts
        are (a failed wait turns SUCCESS into the put's failure code)."""
        if out.wait_end == PENDING:
            self.core.wait_durable(self._callbacks, lambda st: done(settled(out, st)))
            return None
        if out.wait_end <= 0:
            return out
        now = self.broker.acks.when_acked(out.wait_end, lambda st: done(settled(out, st)))
        return None if now is None else settled(out, now)

    def wait_durable(self, sink: Sink, item: object) -> None:
        """``sink.release([.., item, ..], status)`` once the acks applied so far are durable (the ACK processors:
        one release per record, however many acks it holds)."""
        self.core.wait_durable(sink, item)

    def wait_written(self, sink: Sink, item: object) -> None:
        """``sink.release([.., item, ..], status)`` once the checkpoints applied so far are written (the POP
        processor: a deferred pop's answer goes out then, or an error in its place)."""
        self.core.wait_written(sink, item)

    # ------------------------------------------------------------------ figures

    def stats(self) -> dict[str, Any]:
        core = self.core
        now = core.now()
        groups: dict[str, dict[str, int]] = {}
        for g, (inflight, due) in core.state.inflight_by_group(now).items():
            groups[g] = {"inflight": inflight, "reviveBacklog": due, "retryBacklog": 0}
        store = self.broker.store
        for (g, topic, qid), qs in core.state.queues.items():
            if topic.startswith("%RETRY%"):
                f = groups.setdefault(g, {"inflight": 0, "reviveBacklog": 0, "retryBacklog": 0})
                f["retryBacklog"] += max(0, store.max_offset_in_queue(topic, qid) - qs.next)
            else:
                groups.setdefault(g, {"inflight": 0, "reviveBacklog": 0, "retryBacklog": 0})
        c = core.counters
        return {"active": core.active, "groups": groups, "checkpoints": len(core.state.cks),
                "counters": dataclasses.asdict(c)}


def settled(out: Outcome, status: PutStatus) -> Outcome:
    """``out`` after its records' put acknowledgement: a failed one turns SUCCESS into the put's failure code."""
    if status is not PutStatus.PUT_OK and out.code == ResponseCode.SUCCESS:
        out.code = PUT_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        out.remark = f"recorded, but not acknowledged as durable: {status.name}"
    return out


class _Callbacks:
    """A ``pending.Sink`` of plain callbacks (``when_durable``)."""

    def release(self, items: list[Any], status: PutStatus, out: Outbox) -> None:
        for done in items:
            done(status)
