"""The C send lane (``brokerd._native.SendLane``) wired to one broker.

For the common case of SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310) — a known writable topic, a plain message
with a UNIQ_KEY and no DELAY, an ASYNC_FLUSH master store with no error flag set — the lane does in C what
``SendProcessor.process`` and ``MessageStore.put_message_deferred`` do in Python: stored record into the
active commit-log segment, queue offset, consume-queue and key-index puts (their Python methods), dispatch
listeners, and the response frame. Everything else stops the lane at that frame and goes through the Python
processor, so requests keep their arrival order.

This module keeps the two sides in step:
* gates, checked on every call: the lane runs only while the Python path would store without a flush wait;
* topics enter the lane after the Python processor stored a message for them (so every check of ``_check``
  has passed once), and leave it on any topic metadata change;
* after each run the store's and segment's positions, timestamps and the broker's counters are settled exactly
  as the Python append would have left them; a dispatch failure sets the store's error flag as the Python path
  does (``io_failed``), which closes the gate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from brokerd.message import ipv4_bytes
from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX
from brokerd.metadata.topic import PERM_WRITE, TopicConfig
from brokerd.native import native
from brokerd.remoting.connection import Connection
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR

if TYPE_CHECKING:
    from brokerd.broker import Broker

STOP_END, STOP_FRAME, STOP_ROLL, STOP_ERROR = 0, 1, 2, 3

log = structlog.get_logger(component="send_lane")


class SendLane:
    """Callable as a dispatcher lane: (conn, buf, pos, out) -> new pos."""

    def __init__(self, broker: Broker, not_allowed: frozenset[str]) -> None:
        self.broker = broker
        self.not_allowed = not_allowed
        self._lane: Any = None
        self._gen = -1
        self._topics: dict[str, tuple[bool, ...]] = {}  # topic -> per queue: its consume queue is bound
        self.broken = False  # the C lane raised: Python path only from then on
        self.handled = 0  # messages stored by the lane (observability, tests)
        self._notes: dict[tuple[str, int], tuple[int, int]] = {}

    # ------------------------------------------------------------------ gates and lifecycle

    def _open(self) -> bool:
        """The C lane for the store's current layout (its dicts and lists are rebuilt on restart/truncate)."""
        store = self.broker.store
        if native is None or store._services is None:
            return False
        cfg = self.broker.cfg
        index = store.index
        self._lane = native.SendLane(
            store._next_qoff, store._listeners, index.put_keys if index is not None else None,
            cfg.broker_cluster_name, store._id_prefix, cfg.region_id, cfg.trace_on, ipv4_bytes(store.store_host[0]),
            store.store_host[1], store.cfg.max_message_size, store.commit_log.segment_size)  # fmt: skip
        self._topics.clear()
        self._gen = store.layout_generation
        return True

    def forget(self, topic: str | None = None) -> None:
        """Drop one topic (None: all) from the lane; the Python processor re-admits it on its next send."""
        if self._lane is None or not self._topics:
            return
        if topic is None or topic in self._topics:
            self._lane.clear_topics()
            self._topics.clear()

    def _writes_allowed(self) -> bool:
        b = self.broker
        store = b.store
        return (b.is_master() and b.is_writeable() and store.is_writeable() and not store._sync_flush
                and not store._behind_confirm)  # fmt: skip

    # ------------------------------------------------------------------ topics

    def admit(self, topic: str, tc: TopicConfig, queue_id: int) -> None:
        """After the Python processor stored a plain message for ``topic``: let the lane take the next ones."""
        bound = self._topics.get(topic)
        if bound is not None and queue_id < len(bound) and bound[queue_id]:
            return
        if (self._lane is None or topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic in self.not_allowed
                or not tc.perm & PERM_WRITE or len(topic.encode()) > 255):  # fmt: skip
            return
        store = self.broker.store
        if store.layout_generation != self._gen:
            return
        prefix, magic = store.commit_log.encoder.topic_prefix(topic)
        n = max(tc.write_queue_nums, tc.read_queue_nums)
        cqs = [store.queue_store.get(topic, q) for q in range(n)]
        self._lane.add_topic(topic, (prefix, magic, tc.write_queue_nums, tc.read_queue_nums,
                                     tuple((topic, q) for q in range(n)),
                                     tuple(cq.put if cq is not None else None for cq in cqs)))  # fmt: skip
        self._topics[topic] = tuple(cq is not None for cq in cqs)

    # ------------------------------------------------------------------ the lane

    def __call__(self, conn: Connection, buf: bytearray, pos: int, out: list[bytes | memoryview]) -> int:
        store = self.broker.store
        if self._lane is None or store.layout_generation != self._gen:
            if self.broken or not self._open():
                return pos
        if not self._topics:
            return pos
        if not self._writes_allowed():
            self.forget()
            return pos
        files = store.commit_log.files
        if not files:
            return pos
        f = files[-1]
        lane = self._lane
        remote = conn.remote_addr
        try:
            pos, stop = lane.run(buf, pos, f.mm, f.base, f.wrote, f.size, ipv4_bytes(remote[0]), remote[1], out,
                                 conn._decoder.max_frame, self._notes)  # fmt: skip
        except Exception:  # noqa: BLE001 - a bug or MemoryError: keep what was stored, use the Python path
            log.exception("send_lane_failed")
            pos, stop = lane.pos, STOP_END
            self._lane, self._topics, self.broken = None, {}, True
        if lane.msgs:
            self._settle(f, lane)
        if stop == STOP_ERROR:
            store.io_failed("dispatch", lane.take_error(), bit=WRITE_LOGICS_QUEUE_ERROR)
        if self._notes:
            self._wake_listeners(store)
        return pos

    def _settle(self, f: Any, lane: Any) -> None:
        """Leave the store as the Python append path would after the same messages."""
        store = self.broker.store
        end = lane.wrote
        ts = lane.last_ts
        f.wrote = end
        f.last_store_ts = ts
        store.last_store_timestamp = ts
        store._valid_end = f.base + end
        if lane.dispatched_end >= 0:
            store._dispatched = lane.dispatched_end
        stats = self.broker.stats
        stats.msgs_in += lane.msgs
        stats.bytes_in += lane.bytes
        self.handled += lane.msgs
        log_ = store.commit_log
        if end > f.warm_trigger and log_.warmer is not None:
            log_.warmer.kick(end)
        if end > log_._alloc_pos:
            log_.prepare_next(f)

    def _wake_listeners(self, store: Any) -> None:
        """Dispatch listeners, once per queue with its last new offset (a listener is told "everything up to
        this offset landed"; long polling only compares offsets)."""
        notes, self._notes = self._notes, {}
        for (topic, qid), (qoff, tags) in notes.items():
            for cb in store._listeners:
                store._notify(cb, topic, qid, qoff, tags)
