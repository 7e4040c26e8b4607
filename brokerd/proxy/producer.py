"""SendMessage, EndTransaction and RecallMessage (SendMessageActivity, EndTransactionActivity,
RecallMessageActivity with ProducerProcessor / TransactionProcessor), over SEND_MESSAGE_V2 (310),
SEND_BATCH_MESSAGE (320), END_TRANSACTION (37) and RECALL_MESSAGE (370)."""

from __future__ import annotations

import time
from typing import Any

import structlog

from brokerd.message import constants as mc
from brokerd.message.batch import encode_batch_body
from brokerd.message.ids import decode_offset_msg_id
from brokerd.message.properties import encode_properties
from brokerd.proxy import pb
from brokerd.proxy.codes import Code, ProxyError, remoting_error
from brokerd.proxy.convert import OutgoingMessage, message_type, to_outgoing, validate_topic
from brokerd.proxy.core import ProxyCore
from brokerd.proxy.receipt import HandleError, build_recall_handle, decode_recall_handle
from brokerd.proxy.route import Queue
from brokerd.proxy.sessions import ClientSession
from brokerd.proxy.transactions import TransactionTable
from brokerd.proxy.wire import Encoded, SendEntry, send_response
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request

log = structlog.get_logger(component="grpc_proxy")

RECALL_MESSAGE = 370
TYPE_NAMES = {1: "NORMAL", 2: "FIFO", 3: "DELAY", 4: "TRANSACTION"}
# a send answer's code -> the entry's status (SendMessageActivity.convertToSendMessageResponse)
_STORED = {ResponseCode.SUCCESS: Code.OK, ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
           ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def overall_status(codes: list[int]) -> tuple[Code, str]:
    """The response's status of entries with these codes (SendMessageActivity.convertToSendMessageResponse)."""
    if len(codes) == 1 and codes[0] == Code.OK:
        return Code.OK, "OK"
    distinct = set(codes)
    if len(distinct) > 1:
        return Code.MULTIPLE_RESULTS, "MULTIPLE_RESULTS"
    if not distinct:
        return Code.INTERNAL_SERVER_ERROR, "send status is empty"
    code = Code(distinct.pop())
    return code, code.name


def check_message_type(topic_type: str, msgs: list[OutgoingMessage], topic: str) -> None:
    """DefaultTopicMessageTypeValidator: a topic typed NORMAL/FIFO/DELAY/TRANSACTION takes only that type."""
    if topic_type in ("MIXED", ""):
        return
    for m in msgs:
        actual = TYPE_NAMES[message_type(m.properties)]
        if actual != topic_type:
            raise ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                             f"TopicMessageType validate failed, the expected type is {topic_type}, but actual type "
                             f"is {actual} (topic {topic})")


class ProducerActivity:
    def __init__(self, core: ProxyCore, txns: TransactionTable) -> None:
        self.core = core
        self.txns = txns

    async def send_message(self, s: ClientSession, req: Any) -> Any:
        messages = req.messages
        if len(messages) == 0:
            raise ProxyError(Code.MESSAGE_CORRUPTED, "no message to send")
        topic = messages[0].topic.name
        validate_topic(topic)
        now = _now_ms()
        peer, limits = s.peer_text, self.core.cfg.limits
        msgs = []
        for m in messages:
            if m.topic.name != topic:
                raise ProxyError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
            msgs.append(to_outgoing(m, topic, peer, limits, now))
        route = self.core.fresh_route(topic) or await self.core.route(s, topic)
        if self.core.cfg.validate_message_type:
            check_message_type(route.message_type, msgs, topic)
        group = messages[0].system_properties.message_group if len(msgs) == 1 else ""
        queue = route.select_write(group or None)
        resp = await self.core.invoke(s, queue.addr, self._request(topic, queue, msgs))
        entries = self._entries(topic, queue, msgs, resp)
        codes = [e.code for e in entries]
        self.core.stats.messages_sent += codes.count(Code.OK)
        code, message = overall_status(codes)
        return Encoded(code, send_response(code, message, entries))

    @staticmethod
    def _request(topic: str, queue: Queue, msgs: list[OutgoingMessage]) -> RemotingCommand:
        first = msgs[0]
        born = first.properties.get(mc.BORN_TIMESTAMP) or str(_now_ms())
        ext = {"a": topic, "b": topic, "c": "TBW102", "d": "4", "e": str(queue.queue_id), "f": str(first.sys_flag),
               "g": born, "h": "0", "j": "0", "k": "false", "n": queue.broker_name}
        if len(msgs) == 1:
            ext["i"] = encode_properties(first.properties).decode()
            ext["m"] = "false"
            return request(RequestCode.SEND_MESSAGE_V2, ext, first.body)
        ext["i"] = ""
        ext["m"] = "true"
        body = encode_batch_body([(0, m.body, m.properties) for m in msgs])
        return request(RequestCode.SEND_BATCH_MESSAGE, ext, body)

    def _entries(self, topic: str, queue: Queue, msgs: list[OutgoingMessage],
                 resp: RemotingCommand) -> list[SendEntry]:
        code = _STORED.get(resp.code)
        if code is None:
            err = remoting_error(resp.code, resp.remark, "send message")
            return [SendEntry(err.code, err.message) for _ in msgs]
        if code != Code.OK:
            return [SendEntry(code, f"send message failed, {resp.remark}") for _ in msgs]
        base = int(resp.ext.get("queueOffset", "0") or 0)
        txid = resp.ext.get("transactionId", "")
        single = len(msgs) == 1
        out = []
        for i, m in enumerate(msgs):
            recall = ""
            if m.deliver_ms is not None and single:
                recall = resp.ext.get("recallHandle") or build_recall_handle(topic, queue.broker_name, m.deliver_ms,
                                                                           m.message_id)
            out.append(SendEntry(Code.OK, "OK", m.message_id, txid if single else "", base + i, recall))
        if msgs[0].sys_flag & mc.TRANSACTION_PREPARED_TYPE and txid:
            self._remember_transaction(topic, queue, resp, txid, base)
        return out

    def _remember_transaction(self, topic: str, queue: Queue, resp: RemotingCommand, txid: str, offset: int) -> None:
        try:
            commit_log_offset = decode_offset_msg_id(resp.ext.get("msgId", ""))[2]
        except (ValueError, IndexError):
            return
        self.txns.add(topic, txid, queue.broker_name, topic, offset, commit_log_offset)

    async def end_transaction(self, s: ClientSession, req: Any) -> Any:
        topic = req.topic.name
        validate_topic(topic)
        if not req.transaction_id.strip():
            raise ProxyError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        outcome = {1: mc.TRANSACTION_COMMIT_TYPE, 2: mc.TRANSACTION_ROLLBACK_TYPE}.get(int(req.resolution),
                                                                                       mc.TRANSACTION_NOT_TYPE)
        data = self.txns.poll(topic, req.transaction_id)
        log.info("grpc_end_transaction", topic=topic, transaction_id=req.transaction_id, resolution=int(req.resolution),
                 source=int(req.source), known=data is not None)
        if data is None:
            raise ProxyError(Code.INVALID_TRANSACTION_ID, "cannot found transaction data: the transaction id is "
                                                          "unknown or expired")
        route = await self.core.route(s, topic)
        addr = data.broker if ":" in data.broker else route.broker_addr(data.broker)
        ext = {"topic": topic, "producerGroup": topic, "tranStateTableOffset": str(data.tran_state_table_offset),
               "commitLogOffset": str(data.commit_log_offset), "commitOrRollback": str(outcome),
               "fromTransactionCheck": "true" if int(req.source) == 2 else "false", "msgId": req.message_id,
               "transactionId": req.transaction_id}
        resp = await self.core.invoke(s, addr, request(RequestCode.END_TRANSACTION, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark, "end transaction")
        return pb.response_class("EndTransaction")(status=pb.Status(code=Code.OK, message="OK"))

    async def recall_message(self, s: ClientSession, req: Any) -> Any:
        topic = req.topic.name
        validate_topic(topic)
        try:
            handle = decode_recall_handle(req.recall_handle)
        except HandleError as e:
            raise ProxyError(Code.BAD_REQUEST, str(e)) from None
        route = await self.core.route(s, topic)
        addr = route.broker_addr(handle.broker_name)
        ext = {"producerGroup": topic, "topic": topic, "recallHandle": req.recall_handle,
               "brokerName": handle.broker_name}
        resp = await self.core.invoke(s, addr, request(RECALL_MESSAGE, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise remoting_error(resp.code, resp.remark, "recall message")
        return pb.response_class("RecallMessage")(status=pb.Status(code=Code.OK, message="OK"),
                                                  message_id=resp.ext.get("msgId", handle.message_id))
