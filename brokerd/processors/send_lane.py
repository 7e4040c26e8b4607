"""The C send lane (``brokerd._native.SendLane``) wired to one broker.

For the common case of SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320, or batch=true)
with a JSON or ROCKETMQ binary header — a known writable topic; a plain, batch, delay-level or transactional half
message (without a UNIQ_KEY it gets a new one, as in Python; a delayed one is stored in the schedule topic as
``ScheduleService.apply_delay`` re-targets it, a half message in the half topic as ``transaction.to_half``
does); a master store with no error flag set — the
lane does in C what ``SendProcessor.process`` and ``MessageStore.put_message_deferred`` do in Python: stored
record into the active commit-log segment (the records of one read written with one pwrite, as
``CommitLog.append`` writes one), queue offset, consume-queue and key-index puts (their Python methods), and
the response frame. Everything else stops the lane at that frame and goes through the Python processor, so
requests keep their arrival order. With SYNC_FLUSH the responses of one read wait for one flush (group
commit) and are written from its callback, as the Python path does per message; a flush timeout answers
FLUSH_DISK_TIMEOUT.

This module keeps the two sides in step:
* gates, checked on every call: the lane runs only while the Python path would store at once (a writable
  master, no store error flag, no confirm-offset hold);
* topics enter the lane after the Python processor stored a message for them (so every check of ``_check``
  has passed once), the schedule topic's level queues / the half topic after it stored a delayed / half message
  there; they leave it on any topic metadata change;
* every send the Python processor takes while the lane exists is counted under the reason the lane left it
  (``fallbacks``, on /metrics; names in ``FALLBACK_REASONS``);
* after each run the store's and segment's positions, timestamps and the broker's counters are settled exactly
  as the Python append would have left them; a dispatch failure sets the store's error flag as the Python path
  does (``io_failed``), which closes the gate.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog

from brokerd.acl import PUB
from brokerd.acl.sign import hmac_pads
from brokerd.acl.validator import check_perms
from brokerd.message import ipv4_bytes, native_uniq_prefix
from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX, RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC
from brokerd.metadata.topic import PERM_WRITE, TopicConfig
from brokerd.native import native
from brokerd.processors.admission import SendAdmission
from brokerd.processors.put_codes import PUT_STATUS_CODES, STORED_CODES
from brokerd.remoting.codec import FrameDecoder
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.store.mapped_file import MappedFile
    from brokerd.store.message_store import MessageStore

STOP_END, STOP_FRAME, STOP_ROLL, STOP_ERROR = 0, 1, 2, 3  # 4: a failed write (see take_write_error)
# why a send is left to the Python processor: the C lane's WHY_* values (lane.h, same order), then the gates here
FALLBACK_REASONS = ("none", "header", "not_send", "oneway", "batch", "header_fields", "transaction",
                    "topic_not_admitted", "queue_not_ready", "properties", "delay", "sync_wait_false", "too_large",
                    "acl")  # acl: not checkable in C (reasons in acl_misses), Python checks it
GATE_REASONS = ("native_off", "not_master_or_writable", "segment_full", "store_error", "retry_topic", "new_topic")
STOP_REASONS = {STOP_ROLL: "segment_full", STOP_ERROR: "store_error", 4: "store_error"}

log = structlog.get_logger(component="send_lane")


class SendLane:
    """Callable as a dispatcher lane: (conn, buf, pos, out) -> new pos."""

    def __init__(self, broker: BrokerContext, not_allowed: frozenset[str], admission: SendAdmission) -> None:
        self.broker = broker
        self.not_allowed = not_allowed
        self.admission = admission  # overload shedding: while it refuses, the lane declines and Python answers
        self._lane: Any = None
        self._gen = -1
        self._cfg: object = None  # the broker config the lane was built with (cluster, region, trace flag)
        self._topics: dict[str, tuple[bool, ...]] = {}  # topic -> per queue: its consume queue is bound
        self.broken = False  # the C lane raised: Python path only from then on
        self.handled = 0  # messages stored by the lane (observability, tests)
        self._notes: dict[tuple[str, int], tuple[int, int]] = {}
        # ACL on: {access key: (secret, its HMAC pads, topics it may PUB to)} the C lane checks signatures against,
        # emptied when the accounts file is reloaded; `_acl_of` is the accounts it was built from
        self._acl_table: dict[str, tuple[bytes, Any, Any, set[str]]] = {}
        self._acl_of: object = None
        self.fallbacks: dict[str, int] = dict.fromkeys(FALLBACK_REASONS[1:] + GATE_REASONS, 0)
        self._why: str | None = None  # why the lane left the frame at its stop position to Python

    # ------------------------------------------------------------------ gates and lifecycle

    def _open(self) -> bool:
        """The C lane for the store's current layout (its dicts and lists are rebuilt on restart/truncate)."""
        store = self.broker.store
        if native is None or store.services is None:
            return False
        cfg = self.broker.cfg
        bind = store.lane_binding()
        self._lane = native.SendLane(
            bind.next_queue_offsets, bind.listeners, bind.index_put, cfg.broker_cluster_name, bind.id_prefix,
            cfg.region_id, cfg.trace_on, ipv4_bytes(store.store_host[0]), store.store_host[1],
            store.cfg.max_message_size, store.commit_log.segment_size, native_uniq_prefix())  # fmt: skip
        self._lane.sync = bind.sync_flush
        if self.broker.acl is not None:
            self._acl_table.clear()
            self._lane.set_acl(self._acl_table)
        self._topics.clear()
        self._gen = store.layout_generation
        self._cfg = cfg
        return True

    def forget(self, topic: str | None = None) -> None:
        """``topic`` changed (None: anything may have): the lane forgets its topics (all of them: rare, and the
        Python processor re-admits each on its next send), the schedule topic of delayed sends too."""
        if self._lane is None or not self._topics:
            return
        if topic is None or topic in self._topics:
            self._lane.clear_topics()
            self._topics.clear()

    def _writes_allowed(self) -> bool:
        b = self.broker
        store = b.store
        return b.is_master() and b.is_writeable() and store.lane_open

    def count_fallback(self, topic: str, known: bool) -> None:
        """The Python processor takes a send the lane stopped at (``known``: its topic exists): count why."""
        why, self._why = self._why, None
        if why is None:
            return
        if why == "topic_not_admitted":
            why = "retry_topic" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else why if known else "new_topic"
        self.fallbacks[why] = self.fallbacks.get(why, 0) + 1

    # ------------------------------------------------------------------ topics

    def admit(self, topic: str, tc: TopicConfig, queue_id: int, access_key: str | None = None) -> None:
        """After the Python processor stored a plain message for ``topic``: let the lane take the next ones
        (with ACL on: the next ones signed by ``access_key``, when that account may PUB to the topic)."""
        if self.broker.acl is not None and access_key:
            self._admit_account(access_key, topic)
        bound = self._topics.get(topic)
        if bound is not None and queue_id < len(bound) and bound[queue_id]:
            return
        if (self._lane is None or topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic in self.not_allowed
                or not tc.perm & PERM_WRITE or len(topic.encode()) > 255):  # fmt: skip
            return
        if self.broker.store.layout_generation == self._gen:
            self._lane.add_topic(topic, self._entry(topic, tc))

    def admit_retargeted(self, topic: str, queue_id: int) -> None:
        """After the Python processor stored a delayed message in queue ``queue_id`` of the schedule topic, or a
        half message in the half topic (``topic``): let the lane store the next such sends (to admitted topics)
        there."""
        bound = self._topics.get(topic)
        if bound is not None and queue_id < len(bound) and bound[queue_id]:
            return
        tc = self.broker.meta.topics.get(topic)
        if self._lane is None or tc is None or self.broker.store.layout_generation != self._gen:
            return
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            self._lane.set_delay(topic, self._entry(topic, tc), tuple(self.broker.cfg.delay_levels_ms))
        elif topic == RMQ_SYS_TRANS_HALF_TOPIC and not self.broker.cfg.reject_transaction_message:
            self._lane.set_half(topic, self._entry(topic, tc))

    def _entry(self, topic: str, tc: TopicConfig) -> tuple[object, ...]:
        """The lane's entry of ``topic``: its record prefix, queue counts, queue keys and consume-queue puts."""
        store = self.broker.store
        prefix, magic = store.commit_log.encoder.topic_prefix(topic)
        n = max(tc.write_queue_nums, tc.read_queue_nums)
        cqs = [store.queue_store.get(topic, q) for q in range(n)]
        self._topics[topic] = tuple(cq is not None for cq in cqs)
        return (prefix, magic, tc.write_queue_nums, tc.read_queue_nums, tuple((topic, q) for q in range(n)),
                tuple(cq.put if cq is not None else None for cq in cqs))

    def _admit_account(self, access_key: str, topic: str) -> None:
        guard = self.broker.acl
        assert guard is not None
        acl = guard.file.current()
        acct = acl.accounts.get(access_key)
        if acct is None or check_perms(acct, 310, {topic: PUB}, guard.validator.admin_codes) is not None:
            return  # e.g. allowed only by a white address: the Python path checks each of its sends
        if self._acl_of is not acl:
            self._acl_table.clear()
            self._acl_of = acl
        entry = self._acl_table.get(access_key)
        if entry is None:
            secret = acct.secret_key.encode()
            entry = self._acl_table[access_key] = (secret, *hmac_pads(acct.secret_key), set())
        entry[3].add(topic)

    def acl_misses(self) -> dict[str, int]:
        """ACL sends the C lane left to the Python path, by reason (observability, the benchmark)."""
        return self._lane.acl_misses() if self._lane is not None else {}

    # ------------------------------------------------------------------ the lane

    def __call__(self, conn: Connection, buf: bytearray, pos: int, out: list[bytes | memoryview]) -> int:
        store = self.broker.store
        if self._lane is None or store.layout_generation != self._gen or self._cfg is not self.broker.cfg:
            if self.broken or not self._open():
                self._why = "native_off"
                return pos
        now = time.monotonic()
        busy = self.admission.refusal(now)
        if busy is not None:
            return self._refuse(conn, buf, pos, out, busy)
        if not self._topics:
            self._why = "topic_not_admitted"
            return pos
        if self.broker.acl is not None and self._acl_table and self.broker.acl.file.current() is not self._acl_of:
            self._acl_table.clear()  # the accounts changed: every account is checked by Python once again
        if not self._writes_allowed():
            self._why = "not_master_or_writable"
            self.forget()
            return pos
        files = store.commit_log.files
        if not files:
            self._why = "segment_full"
            return pos
        f = files[-1]
        lane = self._lane
        remote = conn.remote_addr
        waits = self.broker.acks.may_wait  # SYNC_FLUSH and/or replica acks: answers wait for them
        lane.sync = waits
        answers: list[bytes | memoryview] = out if not waits else []
        try:
            pos, stop = lane.run(buf, pos, f.fd, f.base, f.wrote, f.size, ipv4_bytes(remote[0]), remote[1], answers,
                                 conn.max_frame, self._notes)  # fmt: skip
        except Exception:  # noqa: BLE001 - a bug or MemoryError: keep what was stored, use the Python path
            log.exception("send_lane_failed")
            pos, stop = lane.pos, STOP_END
            self._lane, self._topics, self.broken = None, {}, True
        self._why = FALLBACK_REASONS[lane.why] if stop == STOP_FRAME else STOP_REASONS.get(stop)
        end = time.monotonic()
        self.admission.put_took(end - now, end)
        if lane.msgs:
            self._settle(f, lane)
        if stop == STOP_ERROR:
            store.io_failed("dispatch", lane.take_error(), bit=WRITE_LOGICS_QUEUE_ERROR)
        write_error = lane.take_write_error()
        if write_error is not None:  # writes stop as after a failed Python append; the sends whose records were
            store.io_failed("append", write_error)  # not written get no answer (their clients time out and retry)
        if self._notes:
            self._wake_listeners(store)
        if answers is not out and answers:
            self._answer_when_acked(conn, answers, f.base + lane.wrote, now)
        return pos

    def _refuse(self, conn: Connection, buf: bytearray, pos: int, out: list[bytes | memoryview], busy: str) -> int:
        """Overload: the sends from ``pos`` on are answered SYSTEM_BUSY with the remark ``busy`` and not stored
        (in C, as cheap as a refusal must be when clients resend at once), up to the first other frame."""
        lane = self._lane
        try:
            pos, _stop = lane.run(buf, pos, 0, 0, 0, 0, b"\0\0\0\0", 0, out, conn.max_frame, self._notes, busy)
        except Exception:  # noqa: BLE001 - a bug or MemoryError: the Python path refuses
            log.exception("send_lane_failed")
            pos = lane.pos
            self._lane, self._topics, self.broken = None, {}, True
        self._why = None
        if lane.refused:
            self.admission.refuse(busy, lane.refused)
        return pos

    def _answer_when_acked(self, conn: Connection, answers: list[bytes | memoryview], end: int,
                           read_at: float) -> None:
        """The answers of one read go out once the broker's put acknowledgement (flush and/or replicas, the same
        ``PutAcks`` the Python path uses) covers their last record; with its failure status otherwise."""
        waiting = self.admission.waiting(len(answers), read_at, end)
        pending: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(status: PutStatus) -> None:
            self.admission.answered(waiting)
            conn.inflight.discard(pending)
            pending.set_result(None)
            self._write_answers(conn, answers, status)

        conn.inflight.add(pending)  # a broker being removed finishes these requests first
        now = self.broker.acks.when_acked(end, done)
        if now is not None:
            done(now)

    def _write_answers(self, conn: Connection, answers: list[bytes | memoryview], status: PutStatus) -> None:
        if status is PutStatus.PUT_OK:
            conn.write_frames(answers)
            return
        code = PUT_STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        stored = code in STORED_CODES
        for cmd in FrameDecoder().feed(b"".join(answers)):  # as the Python path answers the same status
            if stored:
                cmd.code, cmd.remark = code, status.name
            else:
                cmd = RemotingCommand(code=code, opaque=cmd.opaque, flag=cmd.flag,
                                      remark=f"put message failed: {status.name}")
                self.broker.stats.errors += 1
            conn.write(cmd)

    def _settle(self, f: MappedFile, lane: Any) -> None:
        """Leave the store and the counters as the Python path would after the same messages."""
        self.broker.store.lane_appended(f, lane.wrote, lane.last_ts, lane.dispatched_end)
        stats = self.broker.stats
        stats.msgs_in += lane.msgs
        stats.bytes_in += lane.bytes
        self.handled += lane.msgs

    def _wake_listeners(self, store: MessageStore) -> None:
        """Dispatch listeners, once per queue with its last new offset (a listener is told "everything up to
        this offset landed"; long polling only compares offsets)."""
        notes, self._notes = self._notes, {}
        for (topic, qid), (qoff, tags) in notes.items():
            store.notify_dispatched(topic, qid, qoff, tags)
