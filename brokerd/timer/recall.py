"""RECALL_MESSAGE (370): withdraw a timer message not delivered yet, by the recall handle its send answered
(RocketMQ 5.3's ``RecallMessageProcessor``: the same checks in the same order, the same codes and remarks).

Header ``producerGroup`` (may be empty), ``topic``, ``recallHandle``; the answer's ``msgId`` is the handle's message id.
The timer is resolved by a RECALL marker in the commit log (durable and replicated like any message; answered once
the put is acknowledged, as a send); a handle whose time has passed (delivered, or about to be) is refused
ILLEGAL_OPERATION "recall failed, timestamp invalid". A well-formed handle of a timer this broker does not hold
(never sent here, recalled already) is answered SUCCESS with nothing stored, as RocketMQ answers it (it stores a
delete marker that matches nothing).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from brokerd.metadata.topic import PERM_WRITE
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection, Handler
from brokerd.store.results import PutMessageResult, PutStatus
from brokerd.timer.firing import now_ms
from brokerd.timer.handle import decode_handle
from brokerd.timer.service import TimerService, put_ok

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

RECALL_MESSAGE = RequestCode.RECALL_MESSAGE
UNAVAILABLE = "recall failed, broker service not available"
FAILED = "recall failed, execute error"


class RecallProcessor:
    def __init__(self, broker: BrokerContext, timers: TimerService) -> None:
        self.broker = broker
        self.timers = timers

    def handlers(self) -> dict[int, Handler]:
        return {RECALL_MESSAGE: self.process}

    def _answer(self, cmd: RemotingCommand, code: int, remark: str | None, msg_id: str = "") -> RemotingCommand:
        ext = {"MSG_REGION": self.broker.cfg.region_id}
        if code == ResponseCode.SUCCESS:
            ext["msgId"] = msg_id
        return cmd.response(code, remark, ext)

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        b = self.broker
        topic, raw = cmd.ext.get("topic"), cmd.ext.get("recallHandle")
        if not topic:
            raise HeaderError("missing header field 'topic'")
        if raw is None:
            raise HeaderError("missing header field 'recallHandle'")
        if not self.timers.s.recall_enable:
            return self._answer(cmd, ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if not b.is_master():
            return self._answer(cmd, ResponseCode.SLAVE_NOT_AVAILABLE, UNAVAILABLE)
        if not b.cfg.broker_permission & PERM_WRITE and not self.timers.s.allow_recall_when_not_writeable:
            return self._answer(cmd, ResponseCode.SERVICE_NOT_AVAILABLE, UNAVAILABLE)
        if b.meta.topics.get(topic) is None:
            return self._answer(cmd, ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        try:
            handle = decode_handle(raw)
        except ValueError as e:
            return self._answer(cmd, ResponseCode.ILLEGAL_OPERATION, str(e))
        if handle.topic != topic:
            return self._answer(cmd, ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != b.cfg.broker_name:
            return self._answer(cmd, ResponseCode.ILLEGAL_OPERATION, UNAVAILABLE)
        left = handle.timestamp_ms - now_ms()
        if left <= 0 or left >= self.timers.s.max_delay_ms:
            return self._answer(cmd, ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
        if not b.store.is_writeable():
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, FAILED)
        targets = self.timers.find(topic, handle.message_id, handle.timestamp_ms - 1)
        if not targets:
            return self._answer(cmd, ResponseCode.SUCCESS, None, handle.message_id)
        res = self.timers.recall(targets, handle.message_id)
        return self._when_acked(cmd, res, handle.message_id)

    def _when_acked(self, cmd: RemotingCommand, res: PutMessageResult,
                    msg_id: str) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        if not res.ok:
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, FAILED)
        acks = self.broker.acks
        if not acks.may_wait:
            return self._answer(cmd, ResponseCode.SUCCESS, None, msg_id)
        out: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()

        def done(status: PutStatus) -> None:
            if not out.done():
                ok = put_ok(PutMessageResult(status))
                out.set_result(self._answer(cmd, ResponseCode.SUCCESS if ok else ResponseCode.SYSTEM_ERROR,
                                            None if ok else FAILED, msg_id))  # fmt: skip

        now = acks.when_acked(res.end_offset, done)
        if now is not None:
            done(now)
        return out
