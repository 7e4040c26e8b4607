"""CHANGE_MESSAGE_INVISIBLETIME (200053): a popped message stays invisible ``invisibleTime`` ms from now.

The answer (ChangeInvisibleTimeResponseHeader: popTime, invisibleTime, reviveQid) is the new handle's: a client
builds its next checkpoint string from it (``offset popTime invisibleTime reviveQid mark broker queueId
offset``). The old handle is dead from then on. Checks and codes as RocketMQ's ChangeInvisibleTimeProcessor
(TOPIC_NOT_EXIST, MESSAGE_ILLEGAL, NO_MESSAGE for an offset outside the queue), plus: an invisible time out of
range answers INVALID_PARAMETER, a stale handle (its message revived, renewed or acknowledged) NO_MESSAGE
(nothing changes either way); a handle whose invisible time passed still renews a message not revived yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from brokerd.pop.ack_processor import answer
from brokerd.pop.checks import invisible_error, malformed, queue_error, serving_error, topic_or_error
from brokerd.pop.extra_info import ExtraInfoError, parse_extra_info
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.pop.service import PopService


def zero_header() -> dict[str, str]:
    return {"popTime": "0", "invisibleTime": "0", "reviveQid": "0"}


class ChangeInvisibleTimeProcessor:
    def __init__(self, broker: BrokerContext, service: PopService) -> None:
        self.broker = broker
        self.service = service

    def handlers(self) -> dict[int, object]:
        return {RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.process}

    def process(self, conn: Connection, cmd: RemotingCommand) -> object:
        group, topic = cmd.str_field("consumerGroup"), cmd.str_field("topic")
        qid, offset, extra = cmd.int_field("queueId"), cmd.int_field("offset"), cmd.str_field("extraInfo")
        invisible = cmd.int_field("invisibleTime")
        b, z = self.broker, zero_header()
        tc = topic_or_error(b, cmd, topic, action="", ext=z)
        if isinstance(tc, RemotingCommand):
            return tc
        bad = queue_error(cmd, conn, tc, qid, ResponseCode.MESSAGE_ILLEGAL, negative_ok=False, ext=z)
        if bad is not None:
            return bad
        low, high = b.store.min_offset_in_queue(topic, qid), b.store.max_offset_in_queue(topic, qid)
        if not low <= offset < high:
            return cmd.response(ResponseCode.NO_MESSAGE, f"offset is illegal, key:{topic}@{qid}, offset:{offset}, "
                                                         f"store:{low}~{high}", z)
        try:
            ei = parse_extra_info(extra)
        except ExtraInfoError as e:
            return malformed(cmd, e, z)
        bad = invisible_error(b, cmd, invisible, z) or serving_error(b, self.service, cmd, z)
        if bad is not None:
            return bad
        out = self.service.renew((group, topic, qid), ei.ck_offset, ei.pop_time, ei.is_order, offset, invisible)
        ext = ({"popTime": str(out.pop_time), "invisibleTime": str(out.invisible), "reviveQid": str(out.revive_qid)}
               if out.code == ResponseCode.SUCCESS else z)
        return answer(self.service, cmd, out, ext)
