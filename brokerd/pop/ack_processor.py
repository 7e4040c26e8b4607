"""ACK_MESSAGE (200051) and BATCH_ACK_MESSAGE (200151): acknowledgements of popped messages.

RocketMQ's checks come first (topic, queue id, offset within the queue: TOPIC_NOT_EXIST, MESSAGE_ILLEGAL,
NO_MESSAGE); a checkpoint string that does not split answers SYSTEM_ERROR. A handle whose invisible time passed
acknowledges its message while it was not revived yet (as RocketMQ's revive skips a message acknowledged by
then). Unlike RocketMQ — which writes any acknowledgement and answers SUCCESS even when it matches nothing, so the
message may still come back — a stale handle (its message revived or renewed, or never popped here) is answered
NO_MESSAGE and changes nothing: an ACK answered SUCCESS means the message is never delivered again.

The acks of one loop turn share one revive-log record; their answers go out once that record is durable as the
broker's puts are (``PopService.wait_durable``), in one write per connection. The processor is the ``pending.Sink``
that writes them (no future per ack).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson

from brokerd.pop.checks import malformed, queue_error, serving_error, topic_or_error
from brokerd.pop.extra_info import ExtraInfoError, parse_batch_ack, parse_extra_info, real_topic
from brokerd.pop.pending import Outbox, put_answer
from brokerd.pop.service import PENDING, Outcome, settled
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import FLAG_ONEWAY, RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.pop.service import PopService


def answer(svc: PopService, cmd: RemotingCommand, out: Outcome,
           ext: dict[str, str] | None = None) -> RemotingCommand | asyncio.Future[RemotingCommand]:  # fmt: skip
    """``out`` as a response once its records are durable (a future when that takes a while)."""
    def resp(o: Outcome) -> RemotingCommand:
        return cmd.response(o.code, o.remark, dict(ext) if ext is not None else None)

    fut: asyncio.Future[RemotingCommand] | None = None

    def later(o: Outcome) -> None:
        if fut is not None and not fut.done():
            fut.set_result(resp(o))

    now = svc.when_durable(out, later)
    if now is not None:
        return resp(now)
    fut = asyncio.get_running_loop().create_future()
    return fut


class AckMessageProcessor:
    def __init__(self, broker: BrokerContext, service: PopService) -> None:
        self.broker = broker
        self.service = service

    def handlers(self) -> dict[int, object]:
        return {RequestCode.ACK_MESSAGE: self.ack, RequestCode.BATCH_ACK_MESSAGE: self.batch_ack}

    def _answer(self, conn: Connection, cmd: RemotingCommand, out: Outcome) -> RemotingCommand | None:
        """The answer now, or None: written by ``release`` once the acks' record is durable."""
        if out.wait_end == PENDING:
            self.service.wait_durable(self, (conn, cmd, out))
            return None
        return cmd.response(out.code, out.remark)

    def release(self, items: list[Any], status: PutStatus, out: Outbox) -> None:
        """The record holding these acks is durable (or failed: ``status``); an item without an outcome is a
        common ACK's (SUCCESS)."""
        for conn, cmd, o in items:
            if not cmd.flag & FLAG_ONEWAY:
                if o is None and status is PutStatus.PUT_OK:
                    put_answer(out, conn, cmd.response())
                else:
                    put_answer(out, conn, cmd.response(*_code(o or Outcome(ResponseCode.SUCCESS), status)))

    def ack(self, conn: Connection, cmd: RemotingCommand) -> object:
        if self._common_ack(conn, cmd):
            return None  # answered by ``release`` once its record is durable
        group, topic = cmd.str_field("consumerGroup"), cmd.str_field("topic")
        qid, offset, extra = cmd.int_field("queueId"), cmd.int_field("offset"), cmd.str_field("extraInfo")
        b = self.broker
        tc = b.meta.topics.get(topic)
        if tc is None:
            return topic_or_error(b, cmd, topic, action="")
        if not 0 <= qid < tc.read_queue_nums:
            return queue_error(cmd, conn, tc, qid, ResponseCode.MESSAGE_ILLEGAL, negative_ok=False)
        try:
            ei = parse_extra_info(extra)
        except ExtraInfoError as e:
            return malformed(cmd, e)
        bad = serving_error(b, self.service, cmd)
        if bad is not None:
            return bad
        out = self.service.ack((group, topic, qid), ei.ck_offset, ei.pop_time, ei.is_order, [offset])
        if out.wait_end != PENDING:  # refused: an offset outside the queue gets RocketMQ's answer
            low, high = b.store.min_offset_in_queue(topic, qid), b.store.max_offset_in_queue(topic, qid)
            if not low <= offset <= high:
                return cmd.response(ResponseCode.NO_MESSAGE, f"offset is illegal, key:{topic}@{qid}, "
                                                             f"commit:{offset}, store:{low}~{high}")
        return self._answer(conn, cmd, out)

    def _common_ack(self, conn: Connection, cmd: RemotingCommand) -> bool:
        """The ACK every client sends (each field there and well formed, a normal checkpoint's handle, its offset in
        flight, the broker serving POP) applied without the general path's header conversions and outcome objects (an
        ACK a message: the Java POP consumer's shape; the handle read by the same ``parse_extra_info``); False, with
        nothing changed, for anything else: ``ack`` decides and answers."""
        ext = cmd.ext
        try:
            group, topic, qid, offset = ext["consumerGroup"], ext["topic"], int(ext["queueId"]), int(ext["offset"])
            ei = parse_extra_info(ext["extraInfo"])
        except (KeyError, ValueError):  # ExtraInfoError too: the general path answers it
            return False
        if not group or ei.is_order:
            return False
        b = self.broker
        tc = b.meta.topics.get(topic)
        if tc is None or not 0 <= qid < tc.read_queue_nums or serving_error(b, self.service, cmd) is not None:
            return False
        if not self.service.ack_one((group, topic, qid), ei.ck_offset, ei.pop_time, offset):
            return False
        self.service.wait_durable(self, (conn, cmd, None))
        return True

    def batch_ack(self, conn: Connection, cmd: RemotingCommand) -> object:
        try:
            doc = orjson.loads(cmd.body) if cmd.body else None
        except orjson.JSONDecodeError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"batch ack body is not JSON: {e}")
        acks = doc.get("acks") if isinstance(doc, dict) else None
        if not isinstance(acks, list) or not acks:
            return cmd.response(ResponseCode.NO_MESSAGE)
        try:
            entries = [parse_batch_ack(a) for a in acks]
        except ExtraInfoError as e:
            return malformed(cmd, e)
        bad = serving_error(self.broker, self.service, cmd)
        if bad is not None:
            return bad
        total = Outcome(ResponseCode.SUCCESS)
        topics = self.broker.meta.topics
        for a in entries:
            topic = real_topic(a.topic, a.group, a.mark)
            if topics.get(topic) is None:
                if total.code == ResponseCode.SUCCESS:
                    total.code, total.remark = ResponseCode.NO_MESSAGE, f"topic[{topic}] not exist"
                continue
            out = self.service.ack((a.group, topic, a.queue_id), a.start_offset, a.pop_time, a.revive_qid == 999,
                                   a.offsets)
            if out.wait_end == PENDING:
                total.wait_end = PENDING
            if out.code != ResponseCode.SUCCESS and total.code == ResponseCode.SUCCESS:
                total.code, total.remark = out.code, out.remark
        return self._answer(conn, cmd, total)


def _code(out: Outcome, status: PutStatus) -> tuple[int, str | None]:
    if status is not PutStatus.PUT_OK:
        out = settled(out, status)
    return out.code, out.remark
