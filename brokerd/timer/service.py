"""The timer service of one broker: the asyncio driver around the index, the marker queue and the firing (see the
package doc for the design).

One task follows the log (the timer topic into the index, the marker queue into the resolved set; on a slave
only what the log holds durably, and it moves the index's floor after the master's markers) and, on a writable
master, fires; another snapshots the index every ``timerFlushIntervalMs``. A change of role is seen on the next
step: a new master (or a master that restarted) first applies everything its log holds, closes a cut batch, carries
what its markers do not show resolved to their floor and starts reading the wheel there; a master that becomes
a slave drops what it read ahead and rebuilds its resolved set from what its log holds durably. A truncation of
the log starts the index over.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brokerd import message as m
from brokerd.locallog import LocalLog
from brokerd.logbatch import TAG_END, TAG_STATE, MarkedLog
from brokerd.message import MessageInner
from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX
from brokerd.metadata.topic import PERM_READ, PERM_WRITE
from brokerd.store.results import PutMessageResult, PutStatus
from brokerd.timer import core, replay
from brokerd.timer.core import PROGRESS_TOPIC, TIMER_TOPIC, Kind, TimerSettings
from brokerd.timer.deliver import due_of
from brokerd.timer.firing import Firer, now_ms
from brokerd.timer.handle import encode_handle
from brokerd.timer.index import TimerIndex
from brokerd.timer.marks import TAG_RECALL, Progress, pack, state_parts
from brokerd.timer.stats import TimerStats, due_buckets

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

FOLLOW_STEP = 4096  # timer-topic messages indexed per loop step
STATE_EVERY_S = 10.0  # a STATE snapshot this often while timers are resolved ...
STATE_IDLE_S = 3600.0  # ... and at least this often (the newest one must not expire with the log)
ROLE_POLL_S = 0.2


class TimerService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        cfg = broker.cfg
        self.s = TimerSettings.of(cfg)
        self.local = LocalLog(broker.store)
        self.marked = MarkedLog(self.local, PROGRESS_TOPIC, 0, store_host=(cfg.broker_ip1, cfg.listen_port))
        self.index = TimerIndex(Path(cfg.store_path_root_dir), self.s.precision_ms, self.s.roll_window_slots)
        self.progress = Progress()
        self.stats = TimerStats()
        self.firer = Firer(self)
        self.log = broker.log.bind(component="timer")
        self.master = False  # firing (recovered as master)
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._gen = -1
        self._snapshotting: asyncio.Task[None] | None = None
        self._state_next = 0.0
        self._state_dirty = False
        self._by_due: tuple[int, list[tuple[str, int]]] = (0, [])
        self._parking = False  # ``park`` re-targeted a message whose put is coming (its dispatch wakes nobody)

    # ------------------------------------------------------------------ what the send path uses (BrokerContext)

    def park(self, msg: MessageInner) -> tuple[int, str] | None:
        """A timer message is re-targeted to the timer topic (a delete one: to a RECALL marker); RocketMQ's
        refusal (code, remark) for a bad one, nothing to store; None: store ``msg`` as it is now."""
        v = core.classify(msg, now_ms(), self.s)
        if v.kind is Kind.PLAIN:
            return None
        if v.kind is Kind.REFUSE:
            self.stats.refused += 1
            return v.code, v.remark
        self._parking = True
        if v.kind is Kind.PARK:
            core.park(msg, v.deliver_ms)
            if self.broker.meta.topics.get(TIMER_TOPIC) is None:  # RocketMQ's TopicConfigManager has it
                self.broker.meta.topics.create_topic_in_send_back_method(TIMER_TOPIC, 1, PERM_READ | PERM_WRITE, 0)
            return None
        target = core.split_delete_key(msg.properties.get(m.TIMER_DEL_UNIQKEY, ""))
        found = self.find(*target, v.deliver_ms - 1) if target is not None else []
        marker = self.marked.marker(TAG_RECALL, pack(r=found, w=self._floor_ms(), s=self.progress.state_at))
        marker.properties[m.UNIQ_KEY] = msg.properties.get(m.UNIQ_KEY, "")
        msg.topic, msg.queue_id, msg.body, msg.properties = marker.topic, 0, marker.body, marker.properties
        msg.tags_code = marker.tags_code
        return None

    def parked(self, msg: MessageInner, queue_offset: int, phys: int, size: int) -> None:
        """``msg`` (after ``park``) was stored at ``queue_offset`` / ``phys``: index it at once."""
        self._parking = False
        if msg.topic == PROGRESS_TOPIC:
            self.applied_locally(msg.properties.get(m.TAGS, ""), msg.body, queue_offset, phys + size)
            return
        if msg.topic != TIMER_TOPIC:
            return
        self.stats.parked += 1
        if queue_offset != self.index.next_q:
            self._poke()  # the follower has messages to index before it
            return
        due = int(msg.properties[m.TIMER_OUT_MS])
        self._add(queue_offset, phys, size, due)
        if due <= now_ms() + 2 * self.s.precision_ms:
            self._poke()

    def recall_handle(self, msg: MessageInner) -> str | None:
        """The recall handle a send of ``msg`` (parked) answers, as RocketMQ's ``attachRecallHandle``."""
        real = msg.properties.get(m.REAL_TOPIC)
        out = msg.properties.get(m.TIMER_OUT_MS)
        if msg.topic != TIMER_TOPIC or not real or out is None or real.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        return encode_handle(real, self.broker.cfg.broker_name, str(int(out) + 1), msg.properties.get(m.UNIQ_KEY, ""))

    # ------------------------------------------------------------------ recall

    def find(self, real_topic: str, uniq: str, due_ms: int = -1) -> list[int]:
        """The unresolved timers parked for ``real_topic`` with UNIQ_KEY ``uniq``: through the store's key index, or
        without one (messageIndexEnable=false) among those placed in the granule of ``due_ms``."""
        idx = self.broker.store.index
        if not uniq:
            return []
        if idx is not None:
            candidates = [self.local.record_at(phys) for phys in idx.query(TIMER_TOPIC, uniq, 64, 0, 2**62)]
        elif due_ms >= 0:
            candidates = [self.local.record(e.phys, e.size) for e in self.index.read(due_ms // self.s.precision_ms)]
        else:
            candidates = []
        out = {ext.queue_offset for ext in candidates
               if ext is not None and ext.topic == TIMER_TOPIC and ext.properties.get(m.UNIQ_KEY) == uniq
               and ext.properties.get(m.REAL_TOPIC) == real_topic and not self.progress.fired.is_set(ext.queue_offset)}
        return sorted(out)

    def recall(self, offsets: list[int], uniq: str) -> PutMessageResult:
        """Resolve the timers ``offsets`` without delivering them: a RECALL marker in the log."""
        marker = self.marked.marker(TAG_RECALL, pack(r=offsets, w=self._floor_ms(), s=self.progress.state_at))
        marker.properties[m.UNIQ_KEY] = uniq
        res = self.local.append_messages([marker])
        if res.ok:
            self.applied_locally(TAG_RECALL, marker.body, res.queue_offset, res.end_offset)
        return res

    # ------------------------------------------------------------------ markers this broker appends

    def applied_locally(self, tag: str, body: bytes, qoff: int, end: int) -> None:
        """A marker this broker appended at ``qoff``: applied now (it is the next one of the queue)."""
        if qoff != self.progress.next:
            self._poke()  # others before it: the follower applies them in order, this one included
            return
        r = self.progress.apply(tag, body, qoff, end)
        self.stats.recalled += len(r.recalled)
        self._state_dirty = self._state_dirty or tag != TAG_STATE

    def _floor_ms(self) -> int:
        if self.firer.active:
            return self.firer.floor_ms()
        return self.progress.floor_ms if self.progress.floor_ms is not None else now_ms()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self.broker.store.add_dispatch_listener(self._on_dispatch)
        self._recover()
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._snapshot_loop())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._snapshotting is not None:
            await asyncio.gather(self._snapshotting, return_exceptions=True)
        self.broker.store.remove_dispatch_listener(self._on_dispatch)
        try:
            await self._snapshot()
        except OSError as e:
            self.log.warning("timer_snapshot_failed", error=repr(e))
        self.firer.clear()
        self.index.close()

    async def pause(self) -> None:
        """Stop the background tasks, keeping the state: ``step`` drives the service from then on (tests, tools)."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def step(self) -> float:
        """One step of the loop (follow, fire); returns how long the loop would wait before the next."""
        return await self._step()

    async def snapshot(self) -> None:
        """Snapshot the index now (the background task does every ``timerFlushIntervalMs``)."""
        await self._snapshot()

    def _on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags: int) -> None:
        """Wake the loop for what it has not taken in yet (a message the send path indexed itself: nothing)."""
        if self._parking:  # the put of a message ``park`` re-targeted: ``parked`` takes it in at once
            self._parking = False
            return
        if (topic == TIMER_TOPIC and queue_offset >= self.index.next_q) or (
                topic == PROGRESS_TOPIC and queue_offset >= self.progress.next):  # fmt: skip
            self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _recover(self) -> None:
        """The resolved set from the marker queue, the index from its snapshot (or started over)."""
        store = self.broker.store
        self._gen = store.truncate_generation
        self.firer.clear()
        self.master = False
        self.progress = replay.rebuild(self.marked, store.flushed_offset)
        floor_ms = self.progress.floor_ms if self.progress.floor_ms is not None else now_ms()
        if not (self.index.load() and self._index_fits(floor_ms)):
            first = max(self.progress.fired.base, self.local.min_offset_in_queue(TIMER_TOPIC, 0))
            before = self.local.entries(TIMER_TOPIC, 0, first - 1, first) if first > 0 else []
            self.index.fresh(first, floor_ms // self.s.precision_ms, before[0][1] if before else -1)
            self.log.info("timer_index_rebuilt", from_offset=first, floor=floor_ms)
        self.log.info("timer_recovered", next_q=self.index.next_q, floor=self.index.floor_g * self.s.precision_ms,
                      pending=self.pending(), markers=self.progress.next)  # fmt: skip

    def _index_fits(self, floor_ms: int) -> bool:
        """The loaded snapshot covers only what the log holds (it was not cut back under it)."""
        idx = self.index
        lo = self.local.min_offset_in_queue(TIMER_TOPIC, 0)
        hi = self.local.max_offset_in_queue(TIMER_TOPIC, 0)
        if idx.next_q > hi or idx.floor_g * self.s.precision_ms > floor_ms:
            return False
        if idx.next_q > lo:
            e = self.local.entries(TIMER_TOPIC, 0, idx.next_q - 1, idx.next_q)
            return bool(e) and e[0][0] == idx.next_q - 1 and e[0][1] == idx.last_phys
        return True

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            try:
                wait = await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep the service alive; the step is retried
                self.log.exception("timer_step_failed")
                wait = 1.0
            if wait > 0:
                await self._pause(wait)
            else:
                await asyncio.sleep(0)  # sleep-ok: let requests run between busy steps

    async def _step(self) -> float:
        """One step; returns how long to wait before the next (0: at once)."""
        store = self.broker.store
        if store.truncate_generation != self._gen:
            self.log.info("timer_log_truncated")
            if self._snapshotting is not None:  # a snapshot of the index as it was: written before it starts over
                await asyncio.gather(self._snapshotting, return_exceptions=True)
            self._recover()
        b = self.broker
        can_fire = b.is_master() and b.is_writeable() and store.is_writeable()
        if can_fire and not self.master:
            if not await self._promote():
                return ROLE_POLL_S
        elif not can_fire and self.master:
            self._demote()
        more = self._follow()
        if not self.master:
            return 0.0 if more else ROLE_POLL_S
        if self.firer.needs_recovery and not self._close_cut_batch():
            return ROLE_POLL_S
        self._advance_floor(None)
        now = now_ms()
        fired = self._fire(now)
        self._maybe_state()
        self.index.tlog.flush()
        if fired or more:
            return 0.0
        return min(ROLE_POLL_S, max(0.0, (self.firer.next_wake(now) - now_ms()) / 1000))

    async def _pause(self, seconds: float) -> None:
        assert self._wake is not None
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass

    def _fire(self, now: int) -> bool:
        f = self.firer
        worked = f.read_ahead(now) + f.prepare(now) > 0
        batch = f.due_batch(now)
        return bool(batch) and f.fire(batch, now) or worked

    def _follow(self) -> bool:
        """Apply markers and index timers the log holds beyond what this broker has; True when more remain."""
        durable = None if self.master else self.broker.store.flushed_offset
        lo = self.local.min_offset_in_queue(TIMER_TOPIC, 0)
        if lo > self.progress.fired.base:  # parked messages expired with the log: they can fire nowhere
            gone = self.progress.fired.pending(lo)
            self.progress.fired.mark_below(lo)
            if gone:
                self.stats.dropped += gone
                self.log.warning("timer_messages_expired", below=lo, count=gone)
        n, r = replay.apply_markers(self.progress, self.marked, 1024, durable)
        self.stats.recalled += len(r.recalled) if not self.master else 0
        more = n == 1024
        entries = self.local.entries(TIMER_TOPIC, 0, self.index.next_q, self.index.next_q + FOLLOW_STEP)
        for qoff, phys, size, _ in entries:
            if self.progress.fired.is_set(qoff):
                self.index.skip(qoff, phys)
                continue
            ext = self.local.record(phys, size)
            due = due_of(ext) if ext is not None else now_ms()
            self._add(qoff, phys, size, due)
        if not self.master:
            self._advance_floor(lambda q: not self.progress.fired.is_set(q))
        return more or len(entries) == FOLLOW_STEP

    def _add(self, qoff: int, phys: int, size: int, due: int) -> None:
        g = self.index.add(qoff, phys, size, due)
        self.firer.late(due, qoff, g, phys, size)

    def _advance_floor(self, unresolved: Any) -> None:
        floor = self.progress.durable(self.broker.store.flushed_offset)
        if floor is not None:
            carried = self.index.advance(floor // self.s.precision_ms, unresolved)
            if carried:
                self.log.debug("timer_floor_carried", floor=floor, carried=carried)

    # ------------------------------------------------------------------ roles

    async def _promote(self) -> bool:
        """Become the firing master: everything the log holds applied and indexed, a cut batch closed, the index's
        floor where the markers put it (carrying what they do not show resolved), reading from there."""
        store = self.broker.store
        if store.flushed_offset < store.max_phy_offset:
            store.request_flush()
            await store.wait_flushed(store.max_phy_offset)
        self.master = True  # markers are applied as they are (no durable gate) from here
        while self._follow():
            await asyncio.sleep(0)  # sleep-ok: yield between chunks of a long catch-up
        if not self._close_cut_batch():
            self._demote()
            return False
        floor = self.progress.floor_ms if self.progress.floor_ms is not None else now_ms()
        carried = self.index.advance(floor // self.s.precision_ms, lambda q: not self.progress.fired.is_set(q))
        self.firer.start(self.index.floor_g)
        self._state_next = time.monotonic()
        self.log.info("timer_firing_started", floor=floor, carried=carried, pending=self.pending())
        return True

    def _demote(self) -> None:
        self.log.info("timer_firing_stopped")
        self.master = False
        self.firer.clear()
        self.progress = replay.rebuild(self.marked, self.broker.store.flushed_offset)

    def _close_cut_batch(self) -> bool:
        """Close the batch a crash (or a failed append) cut: its deliveries found in the log count, the rest is
        fired again. False when the store refused the END marker."""
        cut = self.marked.find_cut_batch()
        if cut is None:
            self.firer.needs_recovery = False
            return True
        begin = self.progress.begin
        w = int(begin[1].get("w", self._floor_ms())) if begin is not None else self._floor_ms()
        body = pack(w=w, s=self.progress.state_at, n=len(cut.delivered))
        res = self.marked.close_cut_batch(body)
        if not res.ok:
            self.log.warning("timer_cut_batch_close_failed", status=res.status.name)
            return False
        self.applied_locally(TAG_END, body, res.queue_offset, res.end_offset)
        self.firer.needs_recovery = False
        self.log.info("timer_cut_batch_closed", begin=cut.begin.queue_offset, delivered=len(cut.delivered))
        return True

    # ------------------------------------------------------------------ snapshots

    def _maybe_state(self) -> None:
        """A STATE snapshot of the resolved set (the start of the next replay)."""
        now = time.monotonic()
        if now < self._state_next:
            return
        idle_due = now >= self._state_next + STATE_IDLE_S and self.progress.next > 0  # timers were ever fired here
        if not (self._state_dirty or idle_due):
            return
        at = self.local.max_offset_in_queue(PROGRESS_TOPIC, 0)
        bodies = state_parts(self.progress.fired, self.firer.floor_ms(), at)
        res = self.marked.append_markers(TAG_STATE, bodies)
        if not res.ok:
            return
        for i, body in enumerate(bodies):
            self.applied_locally(TAG_STATE, body, res.queue_offset + i, res.end_offset)
        self._state_dirty = False
        self._state_next = now + STATE_EVERY_S

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.flush_interval_ms / 1000)  # sleep-ok: the snapshot period
            try:
                await self._snapshot()
            except OSError as e:
                self.log.warning("timer_snapshot_failed", error=repr(e))

    async def _snapshot(self) -> None:
        if not self.index.added:
            return
        parts, targets = self.index.snapshot()
        self._snapshotting = asyncio.create_task(asyncio.to_thread(self.index.write_snapshot, parts, targets))
        try:
            await self._snapshotting
        finally:
            self._snapshotting = None
        self.index.drop_released_segments()

    # ------------------------------------------------------------------ figures

    def pending(self) -> int:
        return self.progress.fired.pending(self.local.max_offset_in_queue(TIMER_TOPIC, 0))

    def pending_by_due(self) -> list[tuple[str, int]]:
        """Pending timers by due time (a pass over the wheel's slots: computed once a second at most)."""
        now = now_ms()
        if now - self._by_due[0] >= 1000:
            start = self.firer.cursor if self.firer.active else self.index.floor_g
            counts = list(self.index.pending_from(start))
            self._by_due = (now, due_buckets(now, self.s.precision_ms, counts, self.firer.pending_ready()))
        return self._by_due[1]

    def figures(self) -> dict[str, int]:
        """The counters and gauges of ``/metrics`` (container/metrics.py)."""
        st = self.stats
        return {"pending": self.pending(), "parked": st.parked, "fired": st.fired, "rolled": st.rolled,
                "recalled": st.recalled, "dropped": st.dropped, "refused": st.refused,
                "latenessP50Ms": int(min(st.lateness.quantile(0.5), 1e12)),
                "latenessP99Ms": int(min(st.lateness.quantile(0.99), 1e12))}  # fmt: skip

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's timer keys (RocketMQ's timerOffsetBehind / timerReadBehind, and ours)."""
        behind = self.local.max_offset_in_queue(TIMER_TOPIC, 0) - self.index.next_q
        read_behind = self.firer.behind(now_ms()) if self.master else 0
        st = self.stats
        return {"timerOffsetBehind": str(max(0, behind)), "timerReadBehind": str(read_behind),
                "timerPending": str(self.pending()), "timerFired": str(st.fired), "timerRecalled": str(st.recalled),
                "timerRolled": str(st.rolled)}  # fmt: skip

    def lateness_buckets(self) -> tuple[list[tuple[str, int]], float, int]:
        h = self.stats.lateness
        return h.cumulative(), h.sum, h.total

    def status(self) -> dict[str, Any]:
        st = self.stats
        return {"pending": self.pending(), "parked": st.parked, "fired": st.fired, "rolled": st.rolled,
                "recalled": st.recalled, "dropped": st.dropped, "refused": st.refused, "firing": self.master,
                "latenessP50Ms": st.lateness.quantile(0.5), "latenessP99Ms": st.lateness.quantile(0.99),
                "indexed": self.index.next_q, "floorMs": self.index.floor_g * self.s.precision_ms,
                "pendingByDue": dict(self.pending_by_due())}  # fmt: skip


def put_ok(res: PutMessageResult) -> bool:
    return res.status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                          PutStatus.SLAVE_NOT_AVAILABLE)  # fmt: skip

