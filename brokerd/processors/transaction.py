"""Transactional messages, RocketMQ 4.x design: half messages, END_TRANSACTION (37) and the check-back
CHECK_TRANSACTION_STATE (39) to the producer group.

* A send with ``TRAN_MSG=true`` and the prepared flag is stored as a *half message*: topic
  ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, the real topic and queue in ``REAL_TOPIC``/``REAL_QID``, the transaction
  bits cleared, so it is dispatched to the half queue and invisible to the real topic's consumers.
* END_TRANSACTION commit stores it again under its real topic with the commit flag (consumers see it from then
  on) and writes an *op message* (body = the half message's queue offset, tag ``d``) to
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC``; rollback writes only the op message.
* The check service scans the half queue from the ``CID_RMQ_SYS_TRANS`` group's offset: a half message with an
  op message is done; one older than ``transactionTimeOut`` is put back with ``TRANSACTION_CHECK_TIMES`` + 1
  and its producer group is asked (one-way CHECK_TRANSACTION_STATE; the producer answers with
  END_TRANSACTION); after ``transactionCheckMax`` checks it is moved to ``TRANS_CHECK_MAX_TIME_TOPIC``.
  Progress (half and op queue offsets) is kept as that group's consumer offsets, so it survives restarts and
  goes through the metadata hook like every other offset.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import structlog

from brokerd import message as m
from brokerd.message import MessageExt, MessageInner
from brokerd.metadata.names import (
    CID_SYS_RMQ_TRANS,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection
from brokerd.store.message_store import GetMessageStatus, PutMessageResult, PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

OP_TAG = "d"
PUT_OK = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)


def is_half_request(msg: MessageInner) -> bool:
    return (msg.properties.get(m.TRAN_MSG) == "true"
            and msg.sys_flag & m.TRANSACTION_TYPE_MASK == m.TRANSACTION_PREPARED_TYPE)  # fmt: skip


def to_half(msg: MessageInner) -> None:
    """Re-target a prepared message to the half queue (RocketMQ's parseHalfMessageInner)."""
    msg.properties[m.REAL_TOPIC] = msg.topic
    msg.properties[m.REAL_QID] = str(msg.queue_id)
    msg.sys_flag &= ~m.TRANSACTION_TYPE_MASK
    msg.topic = RMQ_SYS_TRANS_HALF_TOPIC
    msg.queue_id = 0
    msg.tags_code = m.tags_code_of(msg.properties.get(m.TAGS))


def real_message(half: MessageExt, outcome: int) -> MessageInner:
    """The half message under its real topic and queue, with the transaction outcome in its flag."""
    props = dict(half.properties)
    topic = props.pop(m.REAL_TOPIC, "")
    qid = props.pop(m.REAL_QID, "0")
    msg = half.to_inner(topic, int(qid) if qid.isdigit() else 0, props,
                        (half.sys_flag & ~m.TRANSACTION_TYPE_MASK) | outcome)  # fmt: skip
    msg.prepared_transaction_offset = half.commit_log_offset
    return msg


class TransactionProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.log = structlog.get_logger("transaction").bind(broker=broker.cfg.identity)
        self._done: set[int] = set()  # half queue offsets with an op message at or past the scan position
        self._ended: dict[str, None] = {}  # UNIQ_KEYs of transactions ended in this process (newest last, bounded)
        self._task: asyncio.Task[None] | None = None
        self.checks_sent = 0

    def handlers(self) -> dict[int, object]:
        return {37: self.end_transaction}

    # ------------------------------------------------------------------ END_TRANSACTION

    async def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.broker
        if not b.is_master():
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave: end transaction refused")
        outcome = cmd.int_field("commitOrRollback")
        if outcome not in (m.TRANSACTION_COMMIT_TYPE, m.TRANSACTION_ROLLBACK_TYPE):
            return cmd.response()  # unknown yet: the check service asks again later
        phys, queue_offset = cmd.int_field("commitLogOffset"), cmd.int_field("tranStateTableOffset")
        raw = b.store.look_message_by_offset(phys)
        half = m.decode_record(raw)[0] if raw else None
        if half is None or half.topic != RMQ_SYS_TRANS_HALF_TOPIC or half.queue_offset != queue_offset:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no prepared transaction message at offset {phys}")
        group = cmd.ext.get("producerGroup", "")
        if half.properties.get(m.PGROUP) != group:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group {group!r} of the message does not match")
        if (queue_offset in self._done or queue_offset < self._progress(RMQ_SYS_TRANS_HALF_TOPIC)
                or half.properties.get(m.UNIQ_KEY, "") in self._ended):  # fmt: skip
            # already ended (a duplicated END_TRANSACTION, or an answer for a put-back copy of an ended one), or
            # a late answer for a message the check service has put back since: the copy is asked about and
            # ended instead, so nothing is stored twice
            return cmd.response()
        self._done.add(queue_offset)  # taken now: a duplicate arriving while this one awaits the store is ignored
        if outcome == m.TRANSACTION_COMMIT_TYPE:
            committed = real_message(half, outcome)
            refused = b.timers.park(committed)  # a timer message starts waiting now (RocketMQ: at commit)
            if refused is not None:
                self._done.discard(queue_offset)
                return cmd.response(*refused)
            res = await b.store.put_message(committed)
            if res.status not in PUT_OK:
                self._done.discard(queue_offset)
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"storing the committed message failed: {res.status.name}")
            b.timers.parked(committed, res.queue_offset, res.wrote_offset, res.wrote_bytes)
        self._ended[half.properties.get(m.UNIQ_KEY, "")] = None
        if len(self._ended) > 100_000:
            del self._ended[next(iter(self._ended))]
        op = await self._write_op(half)
        if op.status not in PUT_OK:
            self.log.warning("transaction_op_write_failed", offset=queue_offset, status=op.status.name)
        self.log.debug("transaction_ended", commit=outcome == m.TRANSACTION_COMMIT_TYPE, offset=queue_offset,
                       from_check=cmd.bool_field("fromTransactionCheck"))  # fmt: skip
        return cmd.response()

    async def _write_op(self, half: MessageExt) -> PutMessageResult:
        b = self.broker
        b.meta.topics.create_topic_in_send_back_method(RMQ_SYS_TRANS_OP_HALF_TOPIC, 1, 6, 0)
        op = MessageInner(topic=RMQ_SYS_TRANS_OP_HALF_TOPIC, queue_id=half.queue_id, body=str(half.queue_offset).encode(),
                          flag=0, properties={m.TAGS: OP_TAG}, sys_flag=0, born_timestamp=_now_ms(),
                          born_host=half.store_host, store_host=half.store_host, tags_code=m.tags_code_of(OP_TAG))  # fmt: skip
        return await b.store.put_message(op)

    # ------------------------------------------------------------------ the check service

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.broker.cfg.transaction_check_interval / 1000)  # sleep-ok: the check period
            try:
                if self.broker.is_master():
                    await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep checking; the next period retries
                self.log.warning("transaction_check_failed", error=repr(e))

    def _read(self, topic: str, offset: int) -> list[MessageExt]:
        store = self.broker.store
        r = store.get_message(topic, 0, max(offset, store.min_offset_in_queue(topic, 0)), 32)
        if r.status != GetMessageStatus.FOUND:
            return []
        return [m.decode_record(buf)[0] for buf in r.buffers]

    def _progress(self, topic: str) -> int:
        off = self.broker.meta.offsets.query_offset(CID_SYS_RMQ_TRANS, topic, 0)
        return max(off, self.broker.store.min_offset_in_queue(topic, 0))

    def _commit(self, topic: str, offset: int) -> None:
        self.broker.meta.offsets.commit_offset("broker", CID_SYS_RMQ_TRANS, topic, 0, offset)

    def _read_ops(self, half_from: int) -> list[tuple[int, int]]:
        """The op messages from the op progress on as (op queue offset, half offset); learns the half offsets
        at or past ``half_from`` that are done."""
        off = self._progress(RMQ_SYS_TRANS_OP_HALF_TOPIC)
        ops: list[tuple[int, int]] = []
        while batch := self._read(RMQ_SYS_TRANS_OP_HALF_TOPIC, off):
            for op in batch:
                body = op.body.decode("ascii", "replace")
                half = int(body) if op.properties.get(m.TAGS) == OP_TAG and body.isdigit() else -1
                if half >= half_from:
                    self._done.add(half)
                ops.append((op.queue_offset, half))
                off = op.queue_offset + 1
        return ops

    async def check_once(self) -> None:
        """One pass over the half queue (what RocketMQ's TransactionalMessageCheckService does per period)."""
        cfg = self.broker.cfg
        off = self._progress(RMQ_SYS_TRANS_HALF_TOPIC)
        ops = self._read_ops(off)
        now = _now_ms()
        for half in self._halves(off, self.broker.store.max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)):
            if half.queue_offset not in self._done:
                if half.properties.get(m.UNIQ_KEY, "") in self._ended:
                    pass  # a put-back copy of a transaction ended since: nothing to ask
                elif now - half.born_timestamp < _immunity_ms(half, cfg.transaction_time_out):
                    break  # this one and every later one are too young
                elif not await self._check(half, cfg.transaction_check_max):
                    break  # storing failed: retry from here next period
            off = half.queue_offset + 1
        self._advance(off, ops)

    def _halves(self, off: int, end: int) -> Iterator[MessageExt]:
        """Half messages in [off, end): those put back during this pass wait for the next."""
        while off < end and (batch := self._read(RMQ_SYS_TRANS_HALF_TOPIC, off)):
            for half in batch:
                if half.queue_offset >= end:
                    return
                yield half
            off = batch[-1].queue_offset + 1

    def _advance(self, off: int, ops: list[tuple[int, int]]) -> None:
        """Store the progress: the half queue up to ``off``; the op queue over the op messages no longer needed
        (those of half messages below ``off``), so a restart still knows which later half messages are done."""
        self._commit(RMQ_SYS_TRANS_HALF_TOPIC, off)
        self._done = {o for o in self._done if o >= off}
        keep = next((op_off for op_off, half in ops if half >= off), None)
        if ops:
            self._commit(RMQ_SYS_TRANS_OP_HALF_TOPIC, keep if keep is not None else ops[-1][0] + 1)

    async def _check(self, half: MessageExt, check_max: int) -> bool:
        """Put the half message back and ask its producer group; False when storing failed (retry later)."""
        store = self.broker.store
        props = dict(half.properties)
        times = int(props.get(m.TRANSACTION_CHECK_TIMES, "0") or 0)
        if times >= check_max:
            self.log.warning("transaction_check_max_reached", offset=half.queue_offset, checks=times,
                             transaction_id=props.get(m.UNIQ_KEY))  # fmt: skip
            self.broker.meta.topics.create_topic_in_send_back_method(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 1, 6, 0)
            res = await store.put_message(half.to_inner(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 0, props, half.sys_flag))
            return res.status in PUT_OK
        props[m.TRANSACTION_CHECK_TIMES] = str(times + 1)
        res = await store.put_message(half.to_inner(RMQ_SYS_TRANS_HALF_TOPIC, 0, props, half.sys_flag))
        if res.status not in PUT_OK:
            return False
        self._ask_producer(half, props, res)
        return True

    def _ask_producer(self, half: MessageExt, props: dict[str, str], put: PutMessageResult) -> None:
        group = props.get(m.PGROUP, "")
        channels = [c for c in self.broker.producers.groups.get(group, {}) if c.is_open]
        if not channels:
            self.log.info("transaction_check_no_producer", group=group, offset=put.queue_offset)
            return
        real = real_message(half, 0)
        real.properties = props
        body = m.encode_record(real, queue_offset=put.queue_offset, phys_offset=put.wrote_offset,
                               store_timestamp=put.store_timestamp)  # fmt: skip
        uniq = props.get(m.UNIQ_KEY, "")
        cmd = request(39, {"topic": real.topic, "tranStateTableOffset": str(put.queue_offset),
                           "commitLogOffset": str(put.wrote_offset), "msgId": uniq,
                           "transactionId": props.get(m.TRANSACTION_ID, uniq), "offsetMsgId": put.msg_id}, body)  # fmt: skip
        channels[self.checks_sent % len(channels)].oneway(cmd)
        self.checks_sent += 1


def _immunity_ms(half: MessageExt, timeout_ms: int) -> int:
    raw = half.properties.get(m.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
    return max(int(raw) * 1000, timeout_ms) if raw.isdigit() else timeout_ms


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
