"""The master's firing: read the wheel ahead of time, prepare the due messages before they are due, and store them
in bracketed synchronous batches (brokerd/logbatch.py) whose markers name what each batch resolved.

* Reading: the granules from the *cursor* on are read up to ``LOOKAHEAD_MS`` ahead of now into ``ready`` (a heap by
  due time); a timer added behind the cursor (due already, or a late follower) goes there at once.
* Preparing: the parked records of the earliest ready timers due within ``PREPARE_MS`` are read from the log
  (``staged``, their bytes in due order: not objects the garbage collector would scan again and again while they
  wait);
  at the due time they are turned into the messages to store (``deliver.prepare``) and appended.
* Firing: everything due (``due <= now``) goes out in one batch of at most ``BATCH_MAX`` messages:
  ``BEGIN {t, d, w}``, the messages, ``END``, appended without yielding to the loop. A timer resolved in between (a
  recall) is skipped. Lateness (append time - due time) is recorded per fired timer.
* The floor ``w`` written in each marker: the lowest granule holding a timer this master knows unresolved (the
  cursor, or below it the ready and staged timers'), in ms.

A batch the store refuses as a whole (an illegal message in it) is split to find the culprits, which are resolved
without a delivery (RocketMQ skips them too); a failed append may leave a cut batch in the log: firing stops until
the service closes it (``needs_recovery``).
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections import Counter
from typing import Any, Final, Protocol

from brokerd import message as m
from brokerd.locallog import LocalLog
from brokerd.logbatch import MAX_BATCH_BYTES, TAG_BEGIN, TAG_END, MarkedLog
from brokerd.message import MessageInner, encode_properties, record_size
from brokerd.store.results import PutMessageResult, PutStatus
from brokerd.timer import deliver
from brokerd.timer.core import TimerSettings
from brokerd.timer.index import TimerIndex
from brokerd.timer.marks import Progress, pack
from brokerd.timer.stats import TimerStats

LOOKAHEAD_MS: Final = 2000
PREPARE_MS: Final = 1500
READY_MAX: Final = 200_000  # timers read ahead (a tuple each)
STAGED_MAX: Final = 200_000  # timers prepared ahead (their parked record's bytes each) ...
STAGED_BYTES: Final = 64 << 20  # ... and those bytes at most (what 50k prepared message objects took before)
BATCH_MAX: Final = 1024
STEP_READS: Final = 20_000  # entries read or prepared per loop step: the loop stays responsive
SOON_MS: Final = 50  # a timer due within this: a step prepares at most BATCH_MAX, so the firing is not held up
_ILLEGAL: Final = (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED)

# (due, qoff, place granule, phys, size)
Ready = tuple[int, int, int, int, int]
# (due, qoff, place granule, roll, message or None: resolved without a delivery)
Staged = tuple[int, int, int, bool, "MessageInner | None"]
# staged: the parked record's bytes (read ahead), or the message already made of it (a refused batch staged again)
Pending = tuple[int, int, int, bool, "bytes | MessageInner | None"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Host(Protocol):
    """What the firing uses of the timer service (brokerd/timer/service.py)."""

    @property
    def s(self) -> TimerSettings: ...

    @property
    def index(self) -> TimerIndex: ...

    @property
    def local(self) -> LocalLog: ...

    @property
    def marked(self) -> MarkedLog: ...

    @property
    def progress(self) -> Progress: ...

    @property
    def stats(self) -> TimerStats: ...

    @property
    def log(self) -> Any: ...

    def applied_locally(self, tag: str, body: bytes, qoff: int, end: int) -> None: ...


class Firer:
    def __init__(self, svc: Host) -> None:
        self.svc = svc
        self.cursor = 0  # the next granule to read
        self.ready: list[Ready] = []
        self.staged = DueList()
        self.staged_bytes = 0  # of the parked records in ``staged``
        self.queued: set[int] = set()  # offsets in ready or staged
        self.places: Counter[int] = Counter()  # granule -> timers of ready + staged placed there
        self.active = False
        self.needs_recovery = False
        self.batches = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self, cursor: int) -> None:
        self.clear()
        self.cursor = cursor
        self.active = True

    def clear(self) -> None:
        self.ready.clear()
        self.staged.clear()
        self.staged_bytes = 0
        self.queued.clear()
        self.places.clear()
        self.active = False

    def floor_ms(self) -> int:
        """The floor the next marker carries (module doc)."""
        low = min(self.places) if self.places else self.cursor
        return min(low, self.cursor) * self.svc.s.precision_ms

    def late(self, due: int, qoff: int, place: int, phys: int, size: int) -> None:
        """A timer added behind the cursor (placed in a granule read already) goes to the ready timers at once."""
        if self.active and place < self.cursor:
            self._push((due, qoff, place, phys, size))

    def _push(self, r: Ready) -> None:
        if r[1] in self.queued or self.svc.progress.fired.is_set(r[1]):
            return
        heapq.heappush(self.ready, r)
        self.queued.add(r[1])
        self.places[r[2]] += 1

    def _forget_all(self, batch: list[Staged]) -> None:
        """``_forget`` of every timer of a batch (most share one granule)."""
        self.queued.difference_update([s[1] for s in batch])
        places = self.places
        for g, n in Counter(s[2] for s in batch).items():
            left = places[g] - n
            if left > 0:
                places[g] = left
            else:
                del places[g]

    def _forget(self, qoff: int, place: int) -> None:
        self.queued.discard(qoff)
        n = self.places[place] - 1
        if n > 0:
            self.places[place] = n
        else:
            del self.places[place]

    # ------------------------------------------------------------------ reading and preparing

    def read_ahead(self, now: int) -> int:
        """Read the granules due within the look-ahead; returns the entries read (a step stops reading when a
        staged timer falls due: the firing goes first)."""
        p = self.svc.s.precision_ms
        index = self.svc.index
        target = (now + LOOKAHEAD_MS) // p
        read = 0
        if self.cursor > target:
            return 0
        deadline = self.staged.first()[0] if self.staged else None
        for g in index.held_between(self.cursor, target + 1):  # empty granules are skipped, not visited
            if len(self.ready) >= READY_MAX or read >= STEP_READS or (deadline is not None and now_ms() >= deadline):
                return read
            for e in index.read(g):
                self._push((e.due, e.qoff, e.place, e.phys, e.size))
                read += 1
            self.cursor = g + 1
        self.cursor = target + 1
        return read

    def prepare(self, now: int) -> int:
        """Read the parked records of the earliest ready timers due soon (fewer per step while timers are due within
        ``SOON_MS``, and none once a staged timer falls due: their batches go out between the steps)."""
        done = 0
        horizon = now + PREPARE_MS
        deadline = self.staged.first()[0] if self.staged else horizon
        budget = BATCH_MAX if deadline <= now + SOON_MS else STEP_READS
        ready, stage = self.ready, self._stage
        while ready and ready[0][0] <= horizon and self._room() and done < budget:
            stage(heapq.heappop(ready), now)
            done += 1
            if not done & 255 and now_ms() >= deadline:
                break
        return done

    def _stage(self, r: Ready, now: int) -> None:
        due, qoff, place, phys, size = r  # resolved ones are skipped when the batch is cut (due_batch)
        raw = self.svc.local.read(phys, size)
        if raw is None:
            self._stale(qoff, place, phys)
            return
        self.staged.push((due, qoff, place, place < due // self.svc.s.precision_ms, raw))
        self.staged_bytes += len(raw)

    def _room(self) -> bool:
        return len(self.staged) < STAGED_MAX and self.staged_bytes < STAGED_BYTES

    def _stale(self, qoff: int, place: int, phys: int) -> None:
        """Not the parked message this entry was made for (the log was cut back under it): nothing to fire; the
        message now at that offset, if any, has its own entry."""
        self._forget(qoff, place)
        self.svc.log.info("timer_entry_stale", qoff=qoff, phys=phys)

    def next_wake(self, now: int) -> int:
        """When the next step has something to do (ms). With ``staged`` full, a ready timer waits for the firing to
        make room or for its own due time (``due_batch`` stages it then): its time to be prepared may have come, but
        a step could do nothing for it (no busy loop)."""
        at = (self.cursor * self.svc.s.precision_ms) - LOOKAHEAD_MS
        if self.staged:
            at = min(at, self.staged.first()[0])
        if self.ready:
            at = min(at, self.ready[0][0] - (PREPARE_MS if self._room() else 0))
        return at

    # ------------------------------------------------------------------ firing

    def due_batch(self, now: int) -> list[Staged]:
        """The staged timers due now (unresolved), at most a batch."""
        read = 0
        while self.ready and self.ready[0][0] <= now and read < BATCH_MAX:  # due now: staged even when full
            self._stage(heapq.heappop(self.ready), now)
            read += 1
        out: list[Staged] = []
        size = 0
        fired, staged, prepare = self.svc.progress.fired, self.staged, deliver.prepare
        while staged and staged.first()[0] <= now and len(out) < BATCH_MAX:
            due, qoff, place, roll, x = staged.first()
            # the record (or the body and the properties' growth: far less than 1 KiB) and the header
            need = 0 if x is None else (len(x) if isinstance(x, bytes) else len(x.body)) + 1024
            if out and size + need > MAX_BATCH_BYTES - 65536:
                break
            staged.pop()
            if isinstance(x, bytes):
                self.staged_bytes -= len(x)
            if fired.is_set(qoff):
                self._forget(qoff, place)
                continue
            msg = prepare(x, qoff, due, roll, now) if isinstance(x, bytes) else x
            if msg is deliver.STALE:
                self._stale(qoff, place, -1)
                continue
            out.append((due, qoff, place, roll, msg))
            size += need
        return out

    def fire(self, batch: list[Staged], now: int) -> bool:
        """Store one batch; False when nothing was stored (the store refused it; it is staged again)."""
        svc = self.svc
        deliveries = [(s, s[4]) for s in batch if s[4] is not None]
        drops = [s[1] for s in batch if s[4] is None]
        w_begin = self.floor_ms()  # the batch's timers are still counted in ``places``
        self._forget_all(batch)
        w_end = self.floor_ms()
        msgs = [d for _, d in deliveries]
        begin = pack(t=[s[1] for s, _ in deliveries], d=drops, w=w_begin, s=svc.progress.state_at)
        end = pack(w=w_end, s=svc.progress.state_at, n=-1)
        res = svc.marked.append_batch(begin, msgs, end)
        if not res.ok:
            return self._refused(batch, res)
        at = now_ms()
        svc.applied_locally(TAG_BEGIN, begin, res.queue_offset, res.end_offset)
        svc.applied_locally(TAG_END, end, res.queue_offset + 1, res.end_offset)
        stats = svc.stats
        observe = stats.lateness.observe
        rolled = 0
        for s, _ in deliveries:
            if s[3]:
                rolled += 1
            else:
                observe(max(0, at - s[0]))
        stats.rolled += rolled
        stats.fired += len(deliveries) - rolled
        stats.dropped += len(drops)
        self.batches += 1
        return True

    def _refused(self, batch: list[Staged], res: PutMessageResult) -> bool:
        """The store refused the batch: an illegal message is resolved without a delivery (RocketMQ gives up on
        it); anything else leaves the batch staged and, when records may have been written, a cut batch."""
        svc = self.svc
        if res.status in _ILLEGAL:
            cfg = svc.local.store.cfg
            limit, seg = cfg.max_message_size, cfg.mapped_file_size_commit_log
            fixed = [(s[0], s[1], s[2], s[3], None if s[4] is not None and not _legal(s[4], limit, seg) else s[4])
                     for s in batch]  # fmt: skip
            if fixed == batch:  # nothing found to blame: resolve them all rather than retry forever
                fixed = [(s[0], s[1], s[2], s[3], None) for s in batch]
            svc.log.warning("timer_messages_illegal", offsets=[s[1] for s, f in zip(batch, fixed, strict=True)
                                                               if f[4] is None and s[4] is not None])
            batch = fixed
        else:
            self.needs_recovery = True  # records may have been written: the service looks for a cut batch
            svc.log.warning("timer_batch_failed", status=res.status.name, size=len(batch))
        for s in batch:
            self.staged.push(s)
            self.queued.add(s[1])
            self.places[s[2]] += 1
        return False

    def behind(self, now: int) -> int:
        """How late the firing runs (ms): the oldest due timer not stored yet (0 when none is due)."""
        heads = [self.ready[0][0]] if self.ready else []
        if self.staged:
            heads.append(self.staged.first()[0])
        return max(0, now - min(heads)) if heads else 0

    def pending_ready(self) -> int:
        return len(self.queued)


class DueList:
    """The staged timers in due order: pushed in due order (prepare takes them from the ``ready`` heap; one that is not,
    a late timer or a refused batch, is inserted in place), taken from the front without a heap's cost."""

    __slots__ = ("items", "head")

    def __init__(self) -> None:
        self.items: list[Pending] = []
        self.head = 0

    def __len__(self) -> int:
        return len(self.items) - self.head

    def first(self) -> Pending:
        return self.items[self.head]

    def push(self, x: Pending) -> None:
        items = self.items
        if len(items) == self.head or (x[0], x[1]) >= (items[-1][0], items[-1][1]):
            items.append(x)
        else:
            bisect.insort(items, x, lo=self.head, key=_due_order)

    def pop(self) -> Pending:
        x = self.items[self.head]
        self.head += 1
        if self.head >= 4096 and self.head * 2 >= len(self.items):
            del self.items[: self.head]
            self.head = 0
        return x

    def clear(self) -> None:
        self.items.clear()
        self.head = 0


def _due_order(x: Pending) -> tuple[int, int]:
    return x[0], x[1]


def _legal(msg: MessageInner, max_body: int, segment: int) -> bool:
    props = encode_properties(msg.properties)
    return (len(msg.body) <= max_body and len(props) + 64 <= m.MAX_PROPERTIES_SIZE
            and record_size(msg.topic, len(msg.body), len(props)) + 256 < segment)  # fmt: skip
