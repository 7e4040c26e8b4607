"""The C send lane (``brokerd._native.SendLane``) wired to one broker.

For the common case of SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320, or batch=true)
with a JSON or ROCKETMQ binary header — a writable topic, known or new (auto-created from the default topic); a
plain, batch, delay-level or transactional half message, compressed or not (without a UNIQ_KEY it gets a new one,
as in Python; a delayed one is stored in the schedule topic as ``ScheduleService.apply_delay`` re-targets it, a
half message in the half topic as ``transaction.to_half`` does); a send to a ``%RETRY%`` topic that stays there
(reconsumeTimes not over the max; the DLQ ones are Python's); a master store with no error flag set — the lane
does in C what ``SendProcessor.process`` and ``MessageStore.put_message_deferred`` do in Python: stored record
into the active commit-log segment (the records of one read written with one pwrite, as ``CommitLog.append``
writes one), queue offset, consume-queue and key-index puts (their Python methods), and the response frame.
Everything else stops the lane at that frame and goes through the Python processor, so requests keep their
arrival order. With SYNC_FLUSH the responses of one read wait for one flush (group commit) and are written from
its callback, as the Python path does per message; a flush timeout answers FLUSH_DISK_TIMEOUT.

This module keeps the two sides in step:
* gates, checked on every call: the lane runs only while the Python path would store at once (a writable
  master, no store error flag, no confirm-offset hold);
* topics: a send whose topic is not in the C lane's table gets the Python processor's decision for it, once
  for that request (``_resolve`` -> ``SendProcessor.lane_decision``: validation, auto-creation, perms, the queue
  id; a retry topic's subscription group, its retryMaxTimes and orderly locks) and, when the message is stored
  under it, the topic's entry, with which C stores the send itself; a declined one goes to Python. With ACL on,
  a topic enters the lane for an account after the Python processor stored a message for it signed by that
  account (``admit``). A queue without a consume queue yet gets one from its first put (``_first_put``, as the
  store's dispatch creates it). The schedule and half topics are set whenever they exist. Topics leave the
  lane on any topic metadata change, a retry topic also when its group changes or takes orderly locks
  (``forget``, which may run inside ``_resolve`` while C is in a run: C keeps what the send in progress uses);
* every send the Python processor takes while the lane exists is counted under the reason the lane left it
  (``fallbacks``, on /metrics; names in ``FALLBACK_REASONS`` and ``GATE_REASONS``);
* after each run the store's and segment's positions, timestamps and the broker's counters are settled exactly
  as the Python append would have left them; a dispatch failure sets the store's error flag as the Python path
  does (``io_failed``), which closes the gate.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import structlog

from brokerd.acl import PUB
from brokerd.acl.sign import hmac_pads
from brokerd.acl.validator import check_perms
from brokerd.message import ipv4_bytes, native_uniq_prefix
from brokerd.metadata.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
)
from brokerd.metadata.topic import PERM_WRITE, TopicConfig
from brokerd.native import native
from brokerd.processors.admission import SendAdmission
from brokerd.processors.flow_control import FlowControl
from brokerd.processors.put_codes import PUT_STATUS_CODES, STORED_CODES
from brokerd.remoting.codec import FrameDecoder, Received
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.consume_queue import ConsumeQueue
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.store.mapped_file import MappedFile
    from brokerd.store.message_store import MessageStore

STOP_END, STOP_FRAME, STOP_ROLL, STOP_ERROR = 0, 1, 2, 3  # 4: a failed write (see take_write_error)
# why a send is left to the Python processor: the C lane's WHY_* values (lane.h, same order), then the gates here.
# topic_not_admitted: the Python decision declined an existing topic (not writable, not allowed, a bad queue id),
# or ACL on, where the lane takes a topic only after Python stored a send to it (``admit``); counted as new_topic
# when the topic does not exist (a bad name, not creatable) and as retry_topic for a %RETRY% topic (the DLQ:
# reconsumeTimes over the max, orderly locks; no group). queue_not_ready: a queue id the topic does not have.
# delay: a DELAY value the lane does not read as Python does, more levels than the schedule topic has queues, or
# no schedule topic. segment_full: also an empty store's first send (Python creates the first segment).
FALLBACK_REASONS = ("none", "header", "not_send", "oneway", "batch", "header_fields", "transaction",
                    "topic_not_admitted", "queue_not_ready", "properties", "delay", "sync_wait_false", "too_large",
                    "acl", "timer")  # acl: not checkable in C (reasons in acl_misses), Python checks it; timer:
# a single send with a timer property (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS / __STARTDELIVERTIME),
# which brokerd/timer parks or refuses
GATE_REASONS = ("native_off", "not_master_or_writable", "segment_full", "store_error", "retry_topic", "new_topic")
STOP_REASONS = {STOP_ROLL: "segment_full", STOP_ERROR: "store_error", 4: "store_error"}

log = structlog.get_logger(component="send_lane")

# the consume queues' put as defined: their puts bound to this function are written in C (brokerd/csrc/lane_cq.c);
# a put replaced later (a test injecting a fault) is called
CQ_PUT = ConsumeQueue.put

# SendProcessor.lane_decision: (topic, default topic, default queue nums, queue id, batch) -> (config, retry max)
Decision = Callable[[str, str, int, int, bool], "tuple[TopicConfig, int | None] | None"]



_SEND_CODES: Final = frozenset({10, 310, 320})
_JSON_CODE: Final = re.compile(rb'\{"code": ?([0-9]{1,6})[,} ]')  # a JSON header that starts with a plain code


def may_be_send(buf: Received, pos: int) -> bool:
    """False only for a frame at ``pos`` whose request code is certainly not a send (10/310/320): a ROCKETMQ
    binary header's first two bytes, or a JSON header that starts with its code (as every client's does);
    anything else (other layouts, a frame cut short) goes to the lane, which decides as before."""
    if len(buf) - pos < 20:
        return True
    if buf[pos + 4] == 1:
        return int.from_bytes(buf[pos + 8 : pos + 10], "big", signed=True) in _SEND_CODES
    m = _JSON_CODE.match(buf, pos + 8, pos + 32)  # matches in place, any bytes-like buffer
    return m is None or int(m.group(1)) in _SEND_CODES


class SendLane:
    """Callable as a dispatcher lane: (conn, buf, pos, out) -> new pos."""

    def __init__(self, broker: BrokerContext, not_allowed: frozenset[str], admission: SendAdmission,
                 flow: FlowControl, decide: Decision) -> None:  # fmt: skip
        self.broker = broker
        self.not_allowed = not_allowed
        self.admission = admission  # overload shedding: while it refuses, the lane refuses in C
        self.flow = flow  # a connection whose sends were refused is not read for a while
        self.decide = decide  # the Python processor's decision for a topic the C lane meets first (_resolve)
        self._lane: Any = None
        self._gen = -1
        self._cfg: object = None  # the broker config the lane was built with (cluster, region, trace flag)
        self._topics: dict[str, tuple[bool, ...]] = {}  # topic -> per queue: its consume queue is bound
        self._targets = False  # the schedule and half topics (delayed / half messages) are set in the C lane
        self._stale: set[str] = set()  # topics whose entry created a consume queue: renewed after the run
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
        self._lane.index_current = bind.index_file
        self._lane.cq_put = CQ_PUT
        self._lane.resolver = self._resolve
        if self.broker.acl is not None:
            self._acl_table.clear()
            self._lane.set_acl(self._acl_table)
        self._topics.clear()
        self._targets = False
        self._stale.clear()
        self._gen = store.layout_generation
        self._cfg = cfg
        return True

    def forget(self, topic: str | None = None) -> None:
        """``topic`` changed (None: anything may have; for a retry topic: its subscription group changed or took
        orderly locks): the lane forgets its topics (all of them: rare, and each is resolved again on its next
        send), the schedule and half topics too (set again on the next call). May be called while the C lane runs
        (a metadata hook inside ``_resolve``): the C side keeps what the send in progress uses."""
        if self._lane is None or not self._topics:
            return
        if topic is None or topic in self._topics:
            self._lane.clear_topics()
            self._topics.clear()
            self._targets = False

    def forget_retry(self, group: str) -> None:
        """``group``'s subscription config changed or it took orderly locks: the lane forgets its retry topic."""
        self.forget(RETRY_GROUP_TOPIC_PREFIX + group)

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
        if (self._lane is None or topic in self.not_allowed or not tc.perm & PERM_WRITE
                or len(topic.encode()) > 255):  # fmt: skip
            return
        if self.broker.store.layout_generation == self._gen:
            self._add(topic, tc)

    def admit_retargeted(self, topic: str, queue_id: int) -> None:
        """After the Python processor stored a delayed message in queue ``queue_id`` of the schedule topic, or a
        half message in the half topic (``topic``; e.g. it created the half topic): let the lane store the next
        such sends there."""
        bound = self._topics.get(topic)
        if bound is not None and queue_id < len(bound) and bound[queue_id]:
            return
        if self._lane is not None and self.broker.store.layout_generation == self._gen:
            self._set_target(topic)

    def _resolve(self, topic: str, default_topic: str | None, default_queue_nums: int, queue_id: int,
                 batch: bool) -> tuple[object, ...] | None:  # fmt: skip
        """The C lane's resolve callback: a send to ``topic``, which the lane does not know, gets the Python
        processor's decision (``decide``: validation, auto-creation from the default topic, perms, a retry
        topic's group) and, when the message is stored under that topic, the lane's entry for it, which the
        lane adds to its table and stores the send with. None: the send goes to the Python processor (counted by
        reason), also when this fails. It may trigger metadata hooks that call ``forget``."""
        try:
            if topic in self.not_allowed or self.broker.store.layout_generation != self._gen:
                return None
            decided = self.decide(topic, default_topic or AUTO_CREATE_TOPIC_KEY_TOPIC, default_queue_nums,
                                  queue_id, batch)  # fmt: skip
            if decided is None or len(topic.encode()) > 255:
                return None
            return self._entry(topic, *decided)
        except Exception:  # noqa: BLE001 - a bug: the Python path takes the send and decides again
            log.exception("send_lane_resolve_failed", topic=topic)
            return None

    def _add(self, topic: str, tc: TopicConfig) -> None:
        """``topic``'s entry into the C lane (a retry topic's with its group's retry limit, unless there is none)."""
        retry_max = None
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            retry_max = self._retry_max(topic)
            if retry_max is None:
                return
        self._lane.add_topic(topic, self._entry(topic, tc, retry_max))

    def _retry_max(self, topic: str) -> int | None:
        """The retryMaxTimes of a retry topic's group, as the Python processor's ``_retry_or_dlq`` reads it; None
        while the lane must leave its sends to Python: no such group, or orderly locks (the DLQ for all)."""
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        sg = self.broker.meta.subscriptions.all().get(group)
        if sg is None or self.broker.locks.has_live_locks(group):
            return None
        return sg.retry_max_times

    def _set_targets(self) -> None:
        """Delayed and half messages are stored in the schedule / half topic: their entries into the C lane."""
        self._targets = True
        self._set_target(RMQ_SYS_SCHEDULE_TOPIC)
        self._set_target(RMQ_SYS_TRANS_HALF_TOPIC)

    def _set_target(self, topic: str) -> None:
        tc = self.broker.meta.topics.get(topic)
        if tc is None:  # the Python path creates the half topic (and stores delayed messages without a config)
            return
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            self._lane.set_delay(topic, self._entry(topic, tc), tuple(self.broker.cfg.delay_levels_ms))
        elif topic == RMQ_SYS_TRANS_HALF_TOPIC and not self.broker.cfg.reject_transaction_message:
            self._lane.set_half(topic, self._entry(topic, tc))

    def _entry(self, topic: str, tc: TopicConfig, retry_max: int | None = None) -> tuple[object, ...]:
        """The lane's entry of ``topic``: its record prefix, queue counts, queue keys, consume-queue puts (a queue
        without a consume queue yet gets ``_first_put``) and retry limit (lane.h)."""
        store = self.broker.store
        prefix, magic = store.commit_log.encoder.topic_prefix(topic)
        n = max(tc.write_queue_nums, tc.read_queue_nums)
        cqs = [store.queue_store.get(topic, q) for q in range(n)]
        self._topics[topic] = tuple(cq is not None for cq in cqs)
        puts = tuple(cq.put if cq is not None else partial(self._first_put, topic, q) for q, cq in enumerate(cqs))
        return (prefix, magic, tc.write_queue_nums, tc.read_queue_nums, tuple((topic, q) for q in range(n)), puts,
                retry_max)  # fmt: skip

    def _first_put(self, topic: str, queue_id: int, qoff: int, phys: int, size: int, tags: int) -> None:
        """The consume-queue put of a queue that had none when its topic's entry was made: created as the store's
        dispatch creates one, with its first entry; the entry is renewed after the run (``_renew``)."""
        self.broker.store.queue_store.get_or_create(topic, queue_id).put(qoff, phys, size, tags)
        self._stale.add(topic)

    def _renew(self) -> None:
        """The entries whose ``_first_put`` ran get the new consume queues' puts."""
        stale, self._stale = self._stale, set()
        if self._lane is None or self.broker.store.layout_generation != self._gen:
            return
        for topic in stale:
            tc = self.broker.meta.topics.get(topic)
            if topic not in self._topics or tc is None:
                continue  # forgotten meanwhile
            if topic in (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC):
                self._set_target(topic)
            else:
                self._add(topic, tc)

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

    def header_cache(self) -> tuple[int, int]:
        """JSON send headers the C lane parsed by their differences from a client's previous one (hits), and in full."""
        return self._lane.header_cache if self._lane is not None else (0, 0)

    # ------------------------------------------------------------------ the lane

    def __call__(self, conn: Connection, buf: Received, pos: int, out: list[bytes | memoryview]) -> int:
        if not may_be_send(buf, pos):  # pops, acks, pulls ...: straight to their processors
            return pos
        store = self.broker.store
        if self._lane is None or store.layout_generation != self._gen or self._cfg is not self.broker.cfg:
            if self.broken or not self._open():
                self._why = "native_off"
                return pos
        now = time.monotonic()
        busy = self.admission.refusal(now, conn.arrived)
        if busy is not None:
            return self._refuse(conn, buf, pos, out, busy)
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
        if not self._targets:
            self._set_targets()
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
        if self._stale:
            self._renew()
        if stop == STOP_ERROR:
            store.io_failed("dispatch", lane.take_error(), bit=WRITE_LOGICS_QUEUE_ERROR)
        write_error = lane.take_write_error()
        if write_error is not None:  # writes stop as after a failed Python append; the sends whose records were
            store.io_failed("append", write_error)  # not written get no answer (their clients time out and retry)
        if self._notes:
            self._wake_listeners(store)
        if answers is not out and answers:
            self._answer_when_acked(conn, answers, f.base + lane.wrote, conn.arrived)
        return pos

    def _refuse(self, conn: Connection, buf: Received, pos: int, out: list[bytes | memoryview], busy: str) -> int:
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
            self.admission.refuse(lane.refused)
            self.flow.refused(conn)
        return pos

    def _answer_when_acked(self, conn: Connection, answers: list[bytes | memoryview], end: int,
                           arrived: float) -> None:
        """The answers of one read go out once the broker's put acknowledgement (flush and/or replicas, the same
        ``PutAcks`` the Python path uses) covers their last record; with its failure status otherwise."""
        waiting = self.admission.waiting(len(answers), arrived, end)
        pending: asyncio.Future[None] = conn.closed.get_loop().create_future()  # get_running_loop: a getpid()

        def done(status: PutStatus) -> None:
            self.admission.answered(waiting)
            self.flow.poke()
            self._write_answers(conn, answers, status)  # queued before a broker being removed learns they are done
            conn.inflight.discard(pending)
            pending.set_result(None)

        conn.inflight.add(pending)  # a broker being removed finishes these requests first
        now = self.broker.acks.when_acked(end, done)
        if now is not None:
            done(now)

    def _write_answers(self, conn: Connection, answers: list[bytes | memoryview], status: PutStatus) -> None:
        if status is PutStatus.PUT_OK:
            conn.write_soon(answers)  # with the other answers the same flush released on this connection
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
