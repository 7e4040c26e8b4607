"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (the consumer
activities with ConsumerProcessor / ProducerProcessor), over POP_MESSAGE (200050), ACK_MESSAGE (200051),
CHANGE_MESSAGE_INVISIBLETIME (200053) and CONSUMER_SEND_MSG_BACK (36), with RocketMQ's request headers."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import structlog

from brokerd.message.record import CorruptRecordError, decode_records
from brokerd.proxy import pb
from brokerd.proxy.codes import POLLING_FULL, POLLING_TIMEOUT, Code, ProxyError, known_code, remoting_error
from brokerd.proxy.convert import message_fields, validate_group, validate_topic
from brokerd.proxy.core import ProxyCore
from brokerd.proxy.receipt import HandleError, PopAnswer, ReceiptHandle, assign_handles, decode_handle, topic_type
from brokerd.proxy.renew import Renewing, RenewTable
from brokerd.proxy.sessions import ClientSession
from brokerd.proxy.settings import DEFAULT_RETRY_NEXT_MS
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request

log = structlog.get_logger(component="grpc_proxy")

POP_MESSAGE = 200050
ACK_MESSAGE = 200051
BATCH_ACK_MESSAGE = 200151
CHANGE_MESSAGE_INVISIBLETIME = 200053
INIT_MODE_MAX = 1
NACK_INVISIBLE_MS = 1000
# the broker's answer to an ack / change whose handle is stale (its message revived, renewed or acknowledged):
# NO_MESSAGE (208), the code RocketMQ's AckMessageProcessor / ChangeInvisibleTimeProcessor answer for a bad offset
NO_MESSAGE = 208
_BAD_HANDLE_CODES = frozenset({NO_MESSAGE, ResponseCode.ILLEGAL_OPERATION})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def status(code: Code, message: str) -> Any:
    return pb.Status(code=code, message=message)


_OK = status(Code.OK, "OK")
_NO_NEW_MESSAGE = status(Code.MESSAGE_NOT_FOUND, "no new message")


def handle_of(text: str, now_ms: int) -> ReceiptHandle:
    """ReceiptHandle.decode + validateReceiptHandle."""
    try:
        h = decode_handle(text)
    except HandleError as e:
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle is malformed: {e}") from None
    if h.expired(now_ms):
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
    return h


def bitset(indexes: list[int]) -> str:
    """java.util.BitSet.toByteArray of ``indexes``, base64, as BatchAck's bitSet travels."""
    data = bytearray(max(indexes) // 8 + 1 if indexes else 0)
    for i in indexes:
        data[i // 8] |= 1 << (i % 8)
    return base64.b64encode(bytes(data)).decode()


def tag_filter(expr_type: int, expr: str) -> frozenset[str] | None:
    """FilterUtils.isTagMatched's side of a TAG subscription: the tags it selects; None when it selects every
    message (``*``, or SQL92: the broker filters those)."""
    if expr_type == 2:
        return None
    tags = frozenset(t.strip() for t in (expr or "*").split("||") if t.strip())
    return None if not tags or "*" in tags else tags


class ConsumerActivity:
    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        cfg = core.cfg
        self.renewals = RenewTable(cfg.renew_ahead_ms, cfg.renew_max_ms, cfg.max_renew_retries)

    def start(self) -> None:
        self.core.background(self.renewals.run(self.core.cfg.renew_period_ms, self._renew_change, self._retry_delay))

    # -- ReceiveMessage -----------------------------------------------------------------------------------

    def _polling_ms(self, s: ClientSession, req: Any, remaining_ms: int | None) -> int:
        cfg = self.core.cfg
        remaining = remaining_ms if remaining_ms is not None else cfg.max_long_polling_ms + 30_000
        if req.HasField("long_polling_timeout"):
            polling = pb.duration_ms(req.long_polling_timeout)
        else:
            settings = s.settings
            timeout = pb.duration_ms(settings.request_timeout) if settings is not None else 3000
            polling = remaining - timeout // 2
        polling = min(max(polling, cfg.min_long_polling_ms), cfg.max_long_polling_ms)
        if polling > remaining:
            if remaining < cfg.min_long_polling_ms:
                code = Code.BAD_REQUEST if s.version and s.version < "5.0.3" else Code.ILLEGAL_POLLING_TIME
                raise ProxyError(code, "The deadline time remaining is not enough for polling, please check network "
                                       "condition")
            polling = remaining
        return polling

    def _invisible_ms(self, req: Any) -> int:
        cfg = self.core.cfg
        if req.auto_renew:
            return cfg.default_invisible_ms
        ms = pb.duration_ms(req.invisible_duration)
        self.validate_invisible(ms, cfg.min_invisible_ms_for_recv)
        return ms

    def validate_invisible(self, ms: int, minimum: int) -> None:
        if ms < minimum:
            raise ProxyError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum}")
        if 0 < self.core.cfg.max_invisible_ms < ms:
            raise ProxyError(Code.ILLEGAL_INVISIBLE_TIME,
                             f"the invisibleTime is too large. max is {self.core.cfg.max_invisible_ms}")

    async def receive(self, s: ClientSession, req: Any, remaining_ms: int | None) -> tuple[list[Any], list[Any]]:
        """The response stream's items (a status, the messages when found, then the delivery timestamp) and the
        messages among them."""
        cls = pb.response_class("ReceiveMessage")
        try:
            msgs = await self._receive(s, req, remaining_ms)
        except ProxyError as e:
            items = [cls(status=status(e.code, e.message))]
            msgs = []
        else:
            head = cls(status=_OK) if msgs else cls(status=_NO_NEW_MESSAGE)
            items = [head, *(cls(message=m) for m in msgs)]
            msgs = [item.message for item in items[1:]]
        items.append(cls(delivery_timestamp=pb.timestamp(_now_ms())))
        return items, msgs

    @staticmethod
    def outcome(items: list[Any]) -> Code:
        """The code a response stream of ``receive`` answered (its first item's status)."""
        return known_code(int(items[0].status.code)) or Code.OK

    async def receive_message(self, s: ClientSession, req: Any, remaining_ms: int | None) -> AsyncIterator[Any]:
        """``receive`` as a stream; the messages a consumer of it did not take are made visible again soon."""
        items, msgs = await self.receive(s, req, remaining_ms)
        sent = 0
        try:
            for item in items:
                sent += 1  # handed out when the consumer takes it (closing the stream at this yield)
                yield item
        finally:
            if msgs and sent < len(msgs) + 1:
                self.nack(s, req.group.name, req.message_queue.topic.name, msgs[max(0, sent - 1):])

    def nack(self, s: ClientSession, group: str, topic: str, msgs: list[Any]) -> None:
        """ReceiveMessageResponseStreamWriter's NACK: messages popped for a client that cannot take them are made
        visible again after NACK_INVISIBLE_MS."""
        for m in msgs:
            handle = self.renewals.take(s.client_id, group, m.system_properties.message_id,
                                        m.system_properties.receipt_handle)
            self.core.background(self._nack_one(s, group, topic, handle))

    async def _nack_one(self, s: ClientSession, group: str, topic: str, handle: str) -> None:
        await self.change_invisible(s, group, topic, handle_of(handle, _now_ms()), NACK_INVISIBLE_MS)

    async def _receive(self, s: ClientSession, req: Any, remaining_ms: int | None) -> list[dict[str, Any]]:
        """POP_MESSAGE: the fields of each message to deliver (``message_fields``)."""
        polling = self._polling_ms(s, req, remaining_ms)
        topic, group = req.message_queue.topic.name, req.group.name
        validate_topic(topic)
        validate_group(group)
        invisible = self._invisible_ms(req)
        fe = req.filter_expression
        expr_type, expr = int(fe.type), fe.expression or "*"
        fifo = bool(s.effective is not None and s.effective.subscription.fifo)
        max_attempts = s.effective.backoff_policy.max_attempts if s.effective is not None else 17
        route = await self.core.route(s, topic)
        queue = route.select_read(req.message_queue.broker.name or None)
        ext = {"consumerGroup": group, "topic": topic, "queueId": "-1",
               "maxMsgNums": str(min(max(req.batch_size, 1), self.core.cfg.max_msg_nums_per_pop)),
               "invisibleTime": str(invisible), "pollTime": str(polling), "bornTime": str(_now_ms()),
               "initMode": str(INIT_MODE_MAX), "expType": "SQL92" if expr_type == 2 else "TAG", "exp": expr,
               "order": "true" if fifo else "false"}
        if req.HasField("attempt_id"):
            ext["attemptId"] = req.attempt_id
        timeout = polling + self.core.cfg.broker_timeout_ms
        call = asyncio.ensure_future(self.core.invoke(s, queue.addr, request(POP_MESSAGE, ext), timeout))
        try:
            resp = await asyncio.shield(call)
        except asyncio.CancelledError:  # the client gave up: what the broker pops for it later is nacked
            call.add_done_callback(lambda c: self._abandoned(s, req, queue.broker_name, fifo, c))
            raise
        if resp.code == POLLING_FULL:
            raise ProxyError(Code.TOO_MANY_REQUESTS, "polling full")
        if resp.code in (POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark, "receive message")
        return self._found(s, req, resp, queue.broker_name, fifo, (expr_type, expr), max_attempts)

    def _abandoned(self, s: ClientSession, req: Any, broker: str, fifo: bool, call: asyncio.Future[Any]) -> None:
        if call.cancelled() or call.exception() is not None or call.result().code != ResponseCode.SUCCESS:
            return
        try:
            msgs = self._found(s, req, call.result(), broker, fifo, (0, "*"), 1 << 30)
        except ProxyError:
            return
        self.nack(s, req.group.name, req.message_queue.topic.name, [pb.Message(**f) for f in msgs])

    def _found(self, s: ClientSession, req: Any, resp: RemotingCommand, broker: str, fifo: bool,
               sub: tuple[int, str], max_attempts: int) -> list[dict[str, Any]]:
        topic, group = req.message_queue.topic.name, req.group.name
        try:
            msgs = decode_records(resp.body or b"")
            answer = PopAnswer(int(resp.ext.get("popTime", "0")), int(resp.ext.get("invisibleTime", "0")),
                               int(resp.ext.get("reviveQid", "0")), resp.ext.get("startOffsetInfo"),
                               resp.ext.get("msgOffsetInfo"), resp.ext.get("orderCountInfo"))
            assign_handles(msgs, answer, broker, fifo)
        except (CorruptRecordError, HandleError, ValueError, KeyError) as e:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the broker's POP answer is malformed: {e}") from None
        now = _now_ms()
        tags = tag_filter(*sub)
        out = []
        for m in msgs:
            handle = m.properties["POP_CK"]
            msg_id = m.properties.get("UNIQ_KEY") or m.msg_id
            if tags is not None and m.properties.get("TAGS") not in tags:
                self.core.background(self._ack_one(s, group, topic, msg_id, handle))
                continue
            if m.reconsume_times >= max_attempts:
                self.core.background(self._to_dlq(s, group, topic, msg_id, handle))
                continue
            if req.auto_renew:
                self.renewals.add(Renewing(s.client_id, group, topic, msg_id, handle, m.reconsume_times, now))
            out.append(message_fields(m, topic, now))
        self.core.stats.messages_received += len(out)
        return out

    # -- AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue ------------------------------

    async def _ack_one(self, s: ClientSession, group: str, topic: str, msg_id: str, handle_text: str) -> None:
        h = handle_of(handle_text, _now_ms())
        route = await self.core.route(s, topic)
        ext = {"consumerGroup": group, "topic": h.real_topic(topic, group), "queueId": str(h.queue_id),
               "extraInfo": h.text, "offset": str(h.offset)}
        resp = await self.core.invoke(s, route.broker_addr(h.broker_name), request(ACK_MESSAGE, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise self._handle_error(resp, "ack message")

    @staticmethod
    def _handle_error(resp: RemotingCommand, what: str) -> ProxyError:
        if resp.code in _BAD_HANDLE_CODES:
            return ProxyError(Code.INVALID_RECEIPT_HANDLE, f"{what} failed: {resp.remark or resp.code}")
        if resp.code == ResponseCode.INVALID_PARAMETER and "invisibleTime" in (resp.remark or ""):
            return ProxyError(Code.ILLEGAL_INVISIBLE_TIME, f"{what} failed: {resp.remark}")
        return remoting_error(resp.code, resp.remark, what)

    async def _batch_ack(self, s: ClientSession, group: str, topic: str, entries: list[Any]) -> list[Any]:
        """ackMessageInBatch: the entries' handles grouped by checkpoint, one BATCH_ACK_MESSAGE per broker; the
        entries' statuses in order."""
        out: list[Any] = [None] * len(entries)
        per_broker: dict[str, dict[tuple[Any, ...], list[tuple[int, ReceiptHandle]]]] = {}
        now = _now_ms()
        for i, e in enumerate(entries):
            try:
                h = handle_of(self.renewals.take(s.client_id, group, e.message_id, e.receipt_handle), now)
            except ProxyError as bad:
                out[i] = status(bad.code, bad.message)
                continue
            key = (h.topic_type, h.queue_id, h.start_offset, h.retrieve_time, h.invisible_time, h.revive_queue_id)
            per_broker.setdefault(h.broker_name, {}).setdefault(key, []).append((i, h))
        for broker, checkpoints in per_broker.items():
            acks = [{"c": group, "t": topic, "r": k[0], "q": k[1], "so": k[2], "pt": k[3], "it": k[4], "rq": k[5],
                     "b": bitset([h.offset - k[2] for _, h in items])} for k, items in checkpoints.items()]
            try:
                route = await self.core.route(s, topic)
                resp = await self.core.invoke(s, route.broker_addr(broker),
                                              request(BATCH_ACK_MESSAGE, body=orjson.dumps({"acks": acks})))
                err = None if resp.code == ResponseCode.SUCCESS else self._handle_error(resp, "ack message")
            except ProxyError as e:
                err = e
            st = status(Code.OK, "OK") if err is None else status(err.code, err.message)
            for items in checkpoints.values():
                for i, _ in items:
                    out[i] = st
        return out

    async def ack_message(self, s: ClientSession, req: Any) -> Any:
        topic, group = req.topic.name, req.group.name
        validate_topic(topic)
        validate_group(group)
        if self.core.cfg.enable_batch_ack and len(req.entries) > 1:
            statuses = await self._batch_ack(s, group, topic, list(req.entries))
            self.core.stats.messages_acked += sum(1 for st in statuses if st.code == Code.OK)
            return self._ack_response([pb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                                status=st) for e, st in zip(req.entries, statuses, strict=True)])

        async def one(entry: Any) -> Any:
            handle = self.renewals.take(s.client_id, group, entry.message_id, entry.receipt_handle)
            try:
                await self._ack_one(s, group, topic, entry.message_id, handle)
            except ProxyError as e:
                st = status(e.code, e.message)
            else:
                st = status(Code.OK, "OK")
                self.core.stats.messages_acked += 1
            return pb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)

        return self._ack_response(list(await asyncio.gather(*(one(e) for e in req.entries))))

    @staticmethod
    def _ack_response(entries: list[Any]) -> Any:
        codes = {int(e.status.code) for e in entries}
        if len(codes) > 1:
            st = status(Code.MULTIPLE_RESULTS, "MULTIPLE_RESULTS")
        elif codes:
            c = Code(codes.pop())
            st = status(c, c.name if c == Code.OK else entries[0].status.message)
        else:
            st = status(Code.INTERNAL_SERVER_ERROR, "ack message result is empty")
        return pb.response_class("AckMessage")(status=st, entries=entries)

    async def change_invisible(self, s: ClientSession, group: str, topic: str, h: ReceiptHandle,
                               invisible_ms: int) -> str:
        """CHANGE_MESSAGE_INVISIBLETIME; the new receipt handle."""
        route = await self.core.route(s, topic)
        real = h.real_topic(topic, group)
        # the proto allows 0 (visible now; e.g. a push consumer's nack without a backoff), a broker takes >= 1 ms
        ext = {"consumerGroup": group, "topic": real, "queueId": str(h.queue_id), "extraInfo": h.text,
               "offset": str(h.offset), "invisibleTime": str(max(invisible_ms, 1))}
        resp = await self.core.invoke(s, route.broker_addr(h.broker_name), request(CHANGE_MESSAGE_INVISIBLETIME, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise self._handle_error(resp, "change invisible duration")
        pop_time, inv, revive = (int(resp.ext.get(k, "0")) for k in ("popTime", "invisibleTime", "reviveQid"))
        return " ".join((str(h.offset), str(pop_time), str(inv), str(revive), topic_type(real), h.broker_name,
                         str(h.queue_id), str(h.offset), str(h.commit_log_offset)))

    async def change_invisible_duration(self, s: ClientSession, req: Any) -> Any:
        topic, group = req.topic.name, req.group.name
        validate_topic(topic)
        validate_group(group)
        ms = pb.duration_ms(req.invisible_duration)
        self.validate_invisible(ms, 0)
        text = self.renewals.take(s.client_id, group, req.message_id, req.receipt_handle)
        h = handle_of(text, _now_ms())
        new = await self.change_invisible(s, group, topic, h, ms)
        return pb.response_class("ChangeInvisibleDuration")(status=status(Code.OK, "OK"), receipt_handle=new)

    async def _to_dlq(self, s: ClientSession, group: str, topic: str, msg_id: str, handle_text: str) -> None:
        h = handle_of(handle_text, _now_ms())
        if h.commit_log_offset < 0:
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "commit log offset is empty")
        route = await self.core.route(s, topic)
        ext = {"offset": str(h.commit_log_offset), "group": group, "delayLevel": "-1", "originMsgId": msg_id,
               "originTopic": h.real_topic(topic, group), "maxReconsumeTimes": "0", "unitMode": "false"}
        resp = await self.core.invoke(s, route.broker_addr(h.broker_name),
                                      request(RequestCode.CONSUMER_SEND_MSG_BACK, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark, "forward message to dead letter queue")
        await self._ack_one(s, group, topic, msg_id, handle_text)

    async def forward_to_dlq(self, s: ClientSession, req: Any) -> Any:
        topic, group = req.topic.name, req.group.name
        validate_topic(topic)
        validate_group(group)
        handle = self.renewals.take(s.client_id, group, req.message_id, req.receipt_handle)
        await self._to_dlq(s, group, topic, req.message_id, handle)
        return pb.response_class("ForwardMessageToDeadLetterQueue")(status=status(Code.OK, "OK"))

    # -- renewals -------------------------------------------------------------------------------------------

    async def _renew_change(self, e: Renewing, invisible_ms: int) -> str:
        s = self.core.sessions.get(e.client_id)
        if s is None:
            raise ProxyError(Code.BAD_REQUEST, "the client is gone")
        return await self.change_invisible(s, e.group, e.topic, handle_of(e.handle, _now_ms()), invisible_ms)

    @staticmethod
    def _retry_delay(reconsume_times: int) -> int:
        return DEFAULT_RETRY_NEXT_MS[min(reconsume_times, len(DEFAULT_RETRY_NEXT_MS) - 1)]

    async def release(self, s: ClientSession) -> None:
        """The client went away: its auto-renewed messages become visible again soon."""
        for e in self.renewals.of_client(s.client_id):
            try:
                await self.change_invisible(s, e.group, e.topic, handle_of(e.handle, _now_ms()),
                                            self.core.cfg.invisible_ms_when_clear)
            except ProxyError as err:
                log.info("grpc_release_failed", msg_id=e.msg_id, error=err.message)
