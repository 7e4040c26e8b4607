"""PullMessage, UpdateOffset, GetOffset and QueryOffset (the 5.x lite / pull consumers), over PULL_MESSAGE (11),
UPDATE_CONSUMER_OFFSET (15), QUERY_CONSUMER_OFFSET (14), GET_MIN_OFFSET (31), GET_MAX_OFFSET (30) and
SEARCH_OFFSET_BY_TIMESTAMP (29)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from brokerd.message.record import CorruptRecordError, decode_records
from brokerd.proxy import pb
from brokerd.proxy.codes import Code, ProxyError, remoting_error
from brokerd.proxy.convert import to_proto, validate_group, validate_topic
from brokerd.proxy.core import ProxyCore
from brokerd.proxy.sessions import ClientSession
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request

FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class OffsetActivity:
    def __init__(self, core: ProxyCore) -> None:
        self.core = core

    async def _queue(self, s: ClientSession, mq: Any, group: str | None) -> tuple[str, str, int]:
        topic = mq.topic.name
        validate_topic(topic)
        if group is not None:
            validate_group(group)
        if mq.id < 0:
            raise ProxyError(Code.BAD_REQUEST, f"message queue id {mq.id} is not a queue")
        route = await self.core.route(s, topic)
        name = mq.broker.name
        if not name:
            raise ProxyError(Code.BAD_REQUEST, "the message queue names no broker")
        return topic, route.broker_addr(name), int(mq.id)

    async def _call(self, s: ClientSession, addr: str, code: int, ext: dict[str, str], what: str) -> RemotingCommand:
        resp = await self.core.invoke(s, addr, request(code, ext))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            raise ProxyError(Code.OFFSET_NOT_FOUND, f"{what}: {resp.remark or 'no offset'}")
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark, what)
        return resp

    async def update_offset(self, s: ClientSession, req: Any) -> Any:
        topic, addr, qid = await self._queue(s, req.message_queue, req.group.name)
        if req.offset < 0:
            raise ProxyError(Code.ILLEGAL_OFFSET, f"offset {req.offset} is negative")
        await self._call(s, addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                         {"consumerGroup": req.group.name, "topic": topic, "queueId": str(qid),
                          "commitOffset": str(req.offset)}, "update offset")
        return pb.response_class("UpdateOffset")(status=pb.Status(code=Code.OK, message="OK"))

    async def get_offset(self, s: ClientSession, req: Any) -> Any:
        topic, addr, qid = await self._queue(s, req.message_queue, req.group.name)
        resp = await self._call(s, addr, RequestCode.QUERY_CONSUMER_OFFSET,
                                {"consumerGroup": req.group.name, "topic": topic, "queueId": str(qid)}, "get offset")
        return pb.response_class("GetOffset")(status=pb.Status(code=Code.OK, message="OK"),
                                              offset=int(resp.ext.get("offset", "0")))

    async def query_offset(self, s: ClientSession, req: Any) -> Any:
        topic, addr, qid = await self._queue(s, req.message_queue, None)
        ext = {"topic": topic, "queueId": str(qid)}
        policy = int(req.query_offset_policy)
        if policy == 0:
            code = RequestCode.GET_MIN_OFFSET
        elif policy == 1:
            code = RequestCode.GET_MAX_OFFSET
        else:
            if not req.HasField("timestamp"):
                raise ProxyError(Code.BAD_REQUEST, "a TIMESTAMP query needs a timestamp")
            code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
            ext["timestamp"] = str(pb.timestamp_ms(req.timestamp))
        resp = await self._call(s, addr, code, ext, "query offset")
        return pb.response_class("QueryOffset")(status=pb.Status(code=Code.OK, message="OK"),
                                                offset=int(resp.ext.get("offset", "0")))

    async def pull_message(self, s: ClientSession, req: Any) -> AsyncIterator[Any]:
        cls = pb.response_class("PullMessage")
        try:
            msgs, status, next_offset = await self._pull(s, req)
        except ProxyError as e:
            yield cls(status=pb.Status(code=e.code, message=e.message))
            return
        yield cls(status=status)
        for m in msgs:
            yield cls(message=m)
        yield cls(next_offset=next_offset)

    async def _pull(self, s: ClientSession, req: Any) -> tuple[list[Any], Any, int]:
        topic, addr, qid = await self._queue(s, req.message_queue, req.group.name)
        if req.offset < 0:
            raise ProxyError(Code.ILLEGAL_OFFSET, f"offset {req.offset} is negative")
        suspend = pb.duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") else 0
        fe = req.filter_expression
        ext = {"consumerGroup": req.group.name, "topic": topic, "queueId": str(qid), "queueOffset": str(req.offset),
               "maxMsgNums": str(min(max(req.batch_size, 1), 1024)),
               "sysFlag": str(FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend > 0 else 0)), "commitOffset": "0",
               "suspendTimeoutMillis": str(suspend), "subscription": fe.expression or "*", "subVersion": "0",
               "expressionType": "SQL92" if int(fe.type) == 2 else "TAG"}
        resp = await self.core.invoke(s, addr, request(RequestCode.PULL_MESSAGE, ext),
                                      suspend + self.core.cfg.broker_timeout_ms)
        next_offset = int(resp.ext.get("nextBeginOffset", str(req.offset)) or req.offset)
        if resp.code == ResponseCode.SUCCESS:
            try:
                found = decode_records(resp.body or b"")
            except CorruptRecordError as e:
                raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the broker's PULL answer is malformed: {e}") from None
            now = _now_ms()
            msgs = [to_proto(m, topic, now) for m in found]
            self.core.stats.messages_received += len(msgs)
            return msgs, pb.Status(code=Code.OK, message="OK"), next_offset
        if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            return [], pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message"), next_offset
        if resp.code == ResponseCode.PULL_OFFSET_MOVED:
            return [], pb.Status(code=Code.ILLEGAL_OFFSET, message=f"offset {req.offset} is out of range, next "
                                                                   f"offset {next_offset}"), next_offset
        raise remoting_error(resp.code, resp.remark, "pull message")
