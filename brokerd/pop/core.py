"""What the POP parts share: the in-flight state, the revive log, the broker as a ``BrokerContext``, counters.

``PopCore`` is the one place that turns a state change into its consequences: the revive-log records, the
consumer offsets of the queues whose commit point moved (RIP-81-replicated like every offset), a STATE snapshot
every ``popReviveSnapshotRecords`` operations (more with many checkpoints in flight: ``_snapshot_due``), and
wake-ups of parked requests when a FIFO queue unblocks.

Records: acks and checkpoints are applied at once and written at the end of the loop turn (``flush``), all the
operations of a turn in one record (``pending.PendingOps``: in the order they were applied); an operation that
must be written before it takes effect (a renew, a reset) goes into that record at once (``append``), and so do
the pending ones before a revive batch or a snapshot. So the log's order is always the order of application, and
a turn's acks and pops share one record and one put-acknowledgement wait. A POP's answer goes out once its
checkpoint is written (``wait_written``), an ACK's once its record is durable (``wait_durable``). A record the
store refuses leaves the state ahead of the log: its waiters get the failure (no message of a refused checkpoint
goes out, no refused ack is answered OK) and the state is rebuilt from the log (``on_lost``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brokerd.locallog import LocalLog
from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX, REVIVE_TOPIC_PREFIX
from brokerd.pop.pending import PendingOps, Sink
from brokerd.pop.records import CkKey, Op, QKey
from brokerd.pop.revive_log import ReviveLog
from brokerd.pop.state import PopState
from brokerd.store.results import PutMessageResult, PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

INIT_MODE_MIN = 0
INIT_MODE_MAX = 1
OFFSET_COMMITTER = "pop"
MAX_PENDING_OPS = 4096  # deferred operations written at once when a turn brings this many
COMMIT_DELAY_S = 0.05  # a moved commit point is stored as the group's consumer offset this much later


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class PopCounters:
    pops: int = 0  # POP requests answered with messages
    popped: int = 0  # messages handed out
    acks: int = 0  # offsets acknowledged
    refused_acks: int = 0  # ACK / CHANGE_MESSAGE_INVISIBLETIME with a stale, expired or unknown handle
    renews: int = 0  # changed invisible times
    revived: int = 0  # messages put into a POP retry topic
    dead_lettered: int = 0  # messages put into a DLQ
    dropped: int = 0  # in-flight messages whose record was gone when their time came
    ck_failures: int = 0  # checkpoints the store refused (their messages were not handed out)
    rebuilds: int = 0
    snapshots: int = 0


class PopCore:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        cfg = broker.cfg
        self.revive_topic = REVIVE_TOPIC_PREFIX + cfg.broker_cluster_name
        self.host = (cfg.broker_ip1, cfg.listen_port)
        self.state = PopState()
        self.log = ReviveLog(LocalLog(broker.store), self.revive_topic, self.host)
        self.counters = PopCounters()
        self.active = False  # a master whose state is rebuilt: POP requests are served
        self.on_unblock: Callable[[str, str], None] | None = None  # (topic, group): a FIFO queue may be popped again
        self.now: Callable[[], int] = now_ms
        self.on_lost: Callable[[], None] | None = None  # a record with applied operations was refused: rebuild
        self.pending = PendingOps(self.log, lambda: broker.acks)  # applied, not written yet
        self._flush_soon: asyncio.Handle | None = None
        self._commit_soon = False

    @property
    def logger(self):  # type: ignore[no-untyped-def]
        return self.broker.log.bind(component="pop")

    def start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        """Where a queue this group never popped starts (PopMessageProcessor.getPopOffset / getInitOffset): its
        consumer offset, else the queue's first message for initMode MIN and retry topics, else (MAX) the last
        message — or the first while the queue still starts at 0 (initPopOffsetByCheckMsgInMem)."""
        store = self.broker.store
        off = self.broker.meta.offsets.query_offset(group, topic, queue_id)
        if off >= 0:
            return off
        low = store.min_offset_in_queue(topic, queue_id)
        if init_mode == INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or low <= 0:
            return low
        return max(store.max_offset_in_queue(topic, queue_id) - 1, 0)

    # ------------------------------------------------------------------ records

    def defer_ack(self, key: CkKey, offsets: Sequence[int]) -> None:
        """Offsets of checkpoint ``key`` were acknowledged (applied): written at the end of the turn."""
        self.pending.ack(key, offsets)
        self._soon()

    def defer(self, op: Op) -> None:
        """A checkpoint was applied: written at the end of the turn, before its messages go out."""
        self.pending.add(op)
        self._soon()

    def wait_written(self, sink: Sink, item: Any) -> None:
        """``sink.release([.., item, ..], status)`` once the operations applied so far are written."""
        self.pending.wait(self.pending.written, sink, item)
        self._soon()

    def wait_durable(self, sink: Sink, item: Any) -> None:
        """``sink.release([.., item, ..], status)`` once the operations applied so far are durable."""
        self.pending.wait(self.pending.durable, sink, item)
        self._soon()

    def _soon(self) -> None:
        if self.pending.count >= MAX_PENDING_OPS:
            self.flush()
        elif self._flush_soon is None:
            self._flush_soon = asyncio.get_running_loop().call_soon(self.flush)

    def append(self, op: Op) -> PutMessageResult:
        """Write ``op`` after the pending operations, in one record (``op`` is applied by the caller once this
        succeeds, then ``changed()``)."""
        return self._write(op)

    def flush(self) -> None:
        """Write the pending operations now (and release their waiters)."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if not self.pending.idle:
            self._write(None)
            if self._snapshot_due():
                self.snapshot()  # everything written is applied

    def _write(self, op: Op | None) -> PutMessageResult:
        res, lost = self.pending.write(op)
        if lost:
            self.counters.ck_failures += 1
            self.logger.error("pop_ops_refused", status=res.status.name)
            if self.on_lost is not None:
                asyncio.get_running_loop().call_soon(self.on_lost)
        return res

    def drop_pending(self, status: PutStatus) -> None:
        """The state is being thrown away (a role change): the waiters get ``status``."""
        self.pending.drop(status)

    # ------------------------------------------------------------------ consequences

    def changed(self) -> None:
        """After records were applied: the moved commit points are stored ``COMMIT_DELAY_S`` later (one metadata
        change per queue however many acks came meanwhile), a snapshot is written when due."""
        if self.state.moved and not self._commit_soon:
            self._commit_soon = True
            asyncio.get_running_loop().call_later(COMMIT_DELAY_S, self.commit_offsets)
        if self._snapshot_due():
            self.snapshot()

    def _snapshot_due(self) -> bool:
        """``popReviveSnapshotRecords`` operations since the last snapshot, and ``popReviveSnapshotOpsPerCheckpoint``
        (8) per checkpoint in flight: a snapshot costs ~3 µs per checkpoint, an operation 10-60 µs, so a large
        state is written less often and its snapshots stay a few per cent of the loop's POP work (a rebuild
        replays as many more operations)."""
        cfg, since = self.broker.cfg, self.log.since_snapshot
        return (since >= cfg.pop_revive_snapshot_records
                and since >= cfg.pop_revive_snapshot_ops_per_checkpoint * len(self.state.cks))

    def commit_offsets(self) -> None:
        """Store the moved commit points as the groups' consumer offsets now (after the operations that moved
        them are written)."""
        self._commit_soon = False
        if not self.active:
            self.state.moved.clear()
            return
        if not self.pending.idle:
            self.flush()
        offsets = self.broker.meta.offsets
        for (group, topic, qid), commit in self.state.take_moved():
            try:
                offsets.commit_offset(OFFSET_COMMITTER, group, topic, qid, commit)
            except ValueError:  # a name RocketMQ's offset table cannot hold: the POP state still has it
                continue

    def snapshot(self) -> None:
        self.flush()
        res = self.log.append_snapshot(self.state)
        if res.ok:
            self.counters.snapshots += 1
        else:
            self.logger.warning("pop_snapshot_failed", status=res.status.name)

    def unblocked(self, q: QKey) -> None:
        if self.on_unblock is not None:
            self.on_unblock(q[1], q[0])

