"""PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361) with long polling woken by arrivals, and the answer's
suggestWhichBrokerId (spec §2.3): slaveReadEnable on a master; a slave sending the client back to its live master."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brokerd.clients import SubscriptionData
from brokerd.filter import FilterError, compile_filter, is_tag_type, not_supported_remark, record_matcher
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import PERM_READ
from brokerd.processors.tier_reads import answer_read
from brokerd.remoting.codec import encode_parts
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.message_store import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

S = GetMessageStatus
# statuses answered 21 for a non-zero request offset, else 19
_NOT_FOUND = (S.NO_MESSAGE_IN_QUEUE, S.NO_MATCHED_LOGIC_QUEUE)
# a stored record's PHYSICALOFFSET field (spec §3.1: after totalSize, magic, bodyCRC, queueId, flag, queueOffset)
PHYS_OFFSET_AT = 28
_PHYS_OFFSET = struct.Struct(">q")


def pull_code(st: GetMessageStatus, queue_offset: int) -> int:
    """The response code of a store status (spec §2.3, PullMessageProcessor.composeResponseHeader)."""
    if st == S.FOUND:
        return ResponseCode.SUCCESS
    if st in (S.NO_MATCHED_MESSAGE, S.MESSAGE_WAS_REMOVING):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if st in _NOT_FOUND:
        return ResponseCode.PULL_OFFSET_MOVED if queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if st in (S.OFFSET_OVERFLOW_ONE, S.OFFSET_FOUND_NULL):
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY


def suggestion(sg: SubscriptionGroupConfig, consumes_slowly: bool) -> int:
    """suggestWhichBrokerId with slaveReadEnable: the group's whichBrokerWhenConsumeSlowly when the consumer lags,
    else the group's brokerId."""
    return sg.which_broker_when_consume_slowly if consumes_slowly else sg.broker_id


def _total_physical_memory() -> int:
    """The machine's RAM in bytes (RocketMQ's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE); 24 GiB when unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 24 << 30


TOTAL_PHYSICAL_MEMORY = _total_physical_memory()


@dataclass(slots=True)
class PullHeader:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_ms: int
    subscription: str | None
    sub_version: int
    expression_type: str
    max_msg_bytes: int


def parse_pull_header(cmd: RemotingCommand) -> PullHeader:
    return PullHeader(
        group=cmd.str_field("consumerGroup"), topic=cmd.str_field("topic"), queue_id=cmd.int_field("queueId"),
        queue_offset=cmd.int_field("queueOffset"), max_msg_nums=max(1, cmd.int_field("maxMsgNums", 32)),
        sys_flag=cmd.int_field("sysFlag", 0), commit_offset=cmd.int_field("commitOffset", -1),
        suspend_timeout_ms=cmd.int_field("suspendTimeoutMillis", 15000), subscription=cmd.opt_str("subscription"),
        sub_version=cmd.int_field("subVersion", 0), expression_type=cmd.ext.get("expressionType") or "TAG",
        max_msg_bytes=cmd.int_field("maxMsgBytes", 262144),
    )


@dataclass(slots=True)
class _Parked:
    conn: Connection
    cmd: RemotingCommand
    header: PullHeader
    fut: asyncio.Future[RemotingCommand | None]
    timer: asyncio.TimerHandle | None = None


class PullHoldService:
    """Parked long-poll requests per (topic, queue); woken by store dispatch or by their deadline."""

    def __init__(self, processor: PullProcessor) -> None:
        self.processor = processor
        self.parked: dict[tuple[str, int], list[_Parked]] = {}
        self._woken: list[_Parked] = []  # woken by a dispatch, run at the loop's next turn (_run_woken)

    def park(self, conn: Connection, cmd: RemotingCommand, h: PullHeader, hold_ms: int) -> asyncio.Future[RemotingCommand | None]:
        loop = conn.closed.get_loop()  # not get_running_loop(): on 3.11 each call is a getpid() syscall
        p = _Parked(conn, cmd, h, loop.create_future())
        key = (h.topic, h.queue_id)
        self.parked.setdefault(key, []).append(p)
        p.timer = loop.call_later(hold_ms / 1000.0, self._expire, key, p)
        return p.fut

    def _expire(self, key: tuple[str, int], p: _Parked) -> None:
        lst = self.parked.get(key)
        if lst and p in lst:
            lst.remove(p)
            if not lst:
                del self.parked[key]
        self._rerun(p)

    def _rerun(self, p: _Parked) -> None:
        if p.timer is not None:
            p.timer.cancel()
        res = self._execute(p)
        if res is not None:
            p.fut.set_result(res)

    def _execute(self, p: _Parked) -> RemotingCommand | None:
        """``p`` run again, without parking: its answer, or None when ``p`` is settled already (answered, its
        connection closed, or failed: the connection answers the error)."""
        if p.fut.done():
            return None
        if not p.conn.is_open:
            p.fut.set_result(None)
            return None
        try:
            return self.processor.execute(p.conn, p.cmd, p.header, allow_suspend=False)
        except Exception as e:  # noqa: BLE001 - answered as an error by the connection
            p.fut.set_exception(e)
            return None

    def notify(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """Store dispatch listener: a message landed at `queue_offset`."""
        lst = self.parked.get((topic, queue_id))
        if not lst:
            return
        keep = []
        for p in lst:
            if queue_offset >= p.header.queue_offset:
                self._wake(p)
            else:
                keep.append(p)
        if keep:
            self.parked[(topic, queue_id)] = keep
        else:
            del self.parked[(topic, queue_id)]

    def _wake(self, p: _Parked) -> None:
        """A message for ``p`` landed: ``p`` runs at the loop's next turn with the others woken by then, so it
        answers what landed meanwhile (at a high rate: several messages per pull, not one per store dispatch), and
        the answers are written at once, one write per connection (a future's callback would write them a turn
        later)."""
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        if not self._woken:
            p.conn.closed.get_loop().call_soon(self._run_woken)
        self._woken.append(p)

    def _run_woken(self) -> None:
        woken, self._woken = self._woken, []
        out: dict[Connection, list[bytes | memoryview]] = {}
        for p in woken:
            res = self._execute(p)
            if res is None:
                continue
            if not p.cmd.is_oneway:
                head, body = encode_parts(res)
                frames = out.setdefault(p.conn, [])
                frames.append(head)
                if body:
                    frames.append(body)
            p.fut.set_result(None)  # answered here
        for conn, frames in out.items():
            conn.write_frames(frames)

    def wake_all(self) -> None:
        for lst in list(self.parked.values()):
            for p in lst:
                self._rerun(p)
        self.parked.clear()


class PullProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.hold = PullHoldService(self)
        broker.store.add_dispatch_listener(self.hold.notify)

    def handlers(self) -> dict[int, object]:
        return {11: self.process, 361: self.process}

    def process(self, conn: Connection, cmd: RemotingCommand) -> object:
        h = parse_pull_header(cmd)
        # old data in the tier: answered once its chunk is fetched (off the loop)
        return answer_read(self.broker.store, lambda: self._answer(conn, cmd, h))

    def _answer(self, conn: Connection, cmd: RemotingCommand, h: PullHeader) -> object:
        res = self.execute(conn, cmd, h, allow_suspend=True)
        if res is None:  # parked
            cfg = self.broker.cfg
            hold = h.suspend_timeout_ms if cfg.long_polling_enable else cfg.short_polling_time_mills
            return self.hold.park(conn, cmd, h, max(0, min(hold, 60_000)))
        return res

    def _subscription(self, cmd: RemotingCommand, h: PullHeader) -> SubscriptionData | RemotingCommand:
        if h.sys_flag & FLAG_SUBSCRIPTION:  # the pull carries its subscription (pull / lite-pull consumers)
            return SubscriptionData.build(h.topic, h.subscription, h.sub_version, h.expression_type)
        sub = self.broker.consumers.find_subscription(h.group, h.topic)
        if sub is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                f"the consumer's subscription not exist, group: {h.group}, topic: {h.topic}")
        if sub.sub_version < h.sub_version:  # the heartbeat with the consumer's new subscription is not in yet
            return cmd.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        return sub

    def _record_filter(self, cmd: RemotingCommand, h: PullHeader,
                       sub: SubscriptionData) -> Callable[[bytes], bool] | None | RemotingCommand:  # fmt: skip
        """SQL92: a filter on each record's properties (None for tag subscriptions), or the error answer. As in
        RocketMQ: an expression that does not compile, then enablePropertyFilter=false; unlike RocketMQ, a bad
        expression carried by the pull itself is answered SUBSCRIPTION_PARSE_FAILED instead of matching every
        message."""
        if is_tag_type(sub.expression_type):
            return None
        try:
            expr = compile_filter(sub.expression_type, sub.sub_string)
        except FilterError as exc:
            if h.sys_flag & FLAG_SUBSCRIPTION:
                return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                    f"parse the consumer's subscription failed: {exc}")
            return cmd.response(ResponseCode.FILTER_DATA_NOT_EXIST,
                                f"The broker's consumer filter data is not exist!Your expression may be wrong! ({exc})")
        if not self.broker.cfg.enable_property_filter:
            return cmd.response(ResponseCode.SYSTEM_ERROR, not_supported_remark(sub.expression_type))
        return record_matcher(expr)

    def _consumes_slowly(self, r: GetMessageResult) -> bool:
        """RocketMQ's suggestPullingFromSlave: the last record pulled lies further behind the log's end than
        accessMessageInMemoryMaxRatio % of the machine's RAM (it is probably no longer in the page cache)."""
        if r.status != S.FOUND or not r.buffers:
            return False
        phys: int = _PHYS_OFFSET.unpack_from(r.buffers[-1], PHYS_OFFSET_AT)[0]
        ratio = self.broker.cfg.access_message_in_memory_max_ratio
        return self.broker.store.max_phy_offset - phys > TOTAL_PHYSICAL_MEMORY * ratio // 100

    def _answer_on_slave(self, sg: SubscriptionGroupConfig, r: GetMessageResult, code: int, ext: dict[str, str]) -> int:
        """A slave's answer (RocketMQ 5 composeResponseHeader): with slaveReadEnable the suggestion is computed as on
        a master. Unless the consumer lags that far, while the master is alive the slave suggests the master (0),
        and a non-FOUND result becomes PULL_RETRY_IMMEDIATELY (20) so the client asks the master at once."""
        slow = False
        if self.broker.cfg.slave_read_enable:
            slow = self._consumes_slowly(r)
            ext["suggestWhichBrokerId"] = str(suggestion(sg, slow))
        if slow or self.broker.master_broker_addr() is None:
            return code
        ext["suggestWhichBrokerId"] = "0"
        return code if r.status == S.FOUND else ResponseCode.PULL_RETRY_IMMEDIATELY

    def _commit_offset(self, conn: Connection, h: PullHeader) -> None:
        """FLAG_COMMIT_OFFSET: a master stores the offset; a slave stores it and forwards it to its master."""
        b = self.broker
        if b.is_master():
            b.meta.offsets.commit_offset(conn.remote_addr[0], h.group, h.topic, h.queue_id, h.commit_offset)
        else:
            b.slave_sync.commit_offset(conn.remote_addr[0], h.group, h.topic, h.queue_id, h.commit_offset)

    def execute(self, conn: Connection, cmd: RemotingCommand, h: PullHeader,
                allow_suspend: bool) -> RemotingCommand | None:
        """Run a pull; returns None when the request should be parked for long polling."""
        b = self.broker
        if not b.is_readable():
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.cfg.broker_ip1}] pulling message is forbidden")
        sg = b.meta.subscriptions.find_or_create(h.group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{h.group}] does not exist")
        if not sg.consume_enable:
            return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.group}")
        tc = b.meta.topics.get(h.topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not tc.perm & PERM_READ:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if h.queue_id < 0 or h.queue_id >= tc.read_queue_nums:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}] consumer:[{conn.remote_addr[0]}]")
        sub = self._subscription(cmd, h)
        if isinstance(sub, RemotingCommand):
            return sub
        record_filter = self._record_filter(cmd, h, sub)
        if isinstance(record_filter, RemotingCommand):
            return record_filter
        t0 = time.monotonic()
        r = b.store.get_message(h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, h.max_msg_bytes,
                                sub.tag_filter(), record_filter)
        b.stats_manager.on_get(h.group, h.topic, r.message_count, r.buffer_total_size, time.monotonic() - t0)
        ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(r.next_begin_offset),
               "minOffset": str(r.min_offset), "maxOffset": str(r.max_offset)}
        st = r.status
        code = pull_code(st, h.queue_offset)
        if not b.is_master():
            code = self._answer_on_slave(sg, r, code, ext)
        elif b.cfg.slave_read_enable:
            ext["suggestWhichBrokerId"] = str(suggestion(sg, self._consumes_slowly(r)))
        if allow_suspend and h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
            self._commit_offset(conn, h)
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & FLAG_SUSPEND:
            return None
        if code == ResponseCode.SUCCESS:
            body = b"".join(r.buffers)
            b.stats.msgs_out += r.message_count
            b.stats.bytes_out += len(body)
            return cmd.response(code, st.name, ext, body)
        return cmd.response(code, st.name, ext)
