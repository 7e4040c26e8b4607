"""Heartbeat, NotifyClientTermination and Telemetry (ClientActivity), and what brokers ask of gRPC clients
(a transaction check-back, a thread stack, a message to verify) relayed over the client's Telemetry stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import structlog

from brokerd.message.record import CorruptRecordError, decode_record
from brokerd.proxy import pb
from brokerd.proxy.codes import Code, ProxyError, known_code
from brokerd.proxy.convert import to_proto, validate_group, validate_topic
from brokerd.proxy.core import ProxyCore
from brokerd.proxy.sessions import CONSUMER_TYPES, PRODUCER, ClientSession
from brokerd.proxy.settings import merged
from brokerd.proxy.transactions import TransactionTable
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand

log = structlog.get_logger(component="grpc_proxy")

GET_CONSUMER_RUNNING_INFO = 307
CONSUME_MESSAGE_DIRECTLY = 309


def ok_status() -> Any:
    return pb.Status(code=Code.OK, message="OK")


class ClientActivity:
    def __init__(self, core: ProxyCore, txns: TransactionTable) -> None:
        self.core = core
        self.txns = txns
        core.relay = self.relay

    async def heartbeat(self, s: ClientSession, req: Any) -> Any:
        if s.settings is None:
            raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
        if s.client_type in CONSUMER_TYPES:
            validate_group(req.group.name)
        elif s.client_type != PRODUCER:
            raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, pb.enum_name("ClientType", s.client_type))
        await self.core.broker_heartbeat(s)
        return pb.response_class("Heartbeat")(status=ok_status())

    async def notify_client_termination(self, s: ClientSession, req: Any) -> Any:
        if s.settings is None:
            raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
        if s.is_consumer:
            validate_group(req.group.name)
        await self.core.close_session(s.client_id)
        return pb.response_class("NotifyClientTermination")(status=ok_status())

    # -- Telemetry ------------------------------------------------------------------------------------------

    async def settings(self, s: ClientSession, cmd: Any) -> Any:
        """A client's Settings: register it, answer the merged settings."""
        raw = cmd.settings
        which = raw.WhichOneof("pub_sub")
        if which is None:
            raise ProxyError(Code.BAD_REQUEST, "there is no publishing or subscription data in settings")
        if which == "publishing":
            for t in raw.publishing.topics:
                validate_topic(t.name)
        else:
            validate_group(raw.subscription.group.name)
        s.apply_settings(raw)
        group = None
        topics = s.topics()
        if which == "subscription" and topics and s.group:
            group = await self.core.group_config(s, s.group, topics[0])
        self.core.background(self.core.broker_heartbeat(s))
        s.effective = merged(raw, group, self.core.cfg)
        return pb.TelemetryCommand(status=ok_status(), settings=s.effective)

    def report(self, s: ClientSession, cmd: Any) -> None:
        which = cmd.WhichOneof("command")
        if which == "thread_stack_trace":
            t = cmd.thread_stack_trace
            s.answer(t.nonce, cmd.status, t.thread_stack_trace if t.HasField("thread_stack_trace") else "")
        elif which == "verify_message_result":
            s.answer(cmd.verify_message_result.nonce, cmd.status, None)

    async def telemetry(self, s: ClientSession, requests: AsyncIterator[Any], check: Any) -> AsyncIterator[Any]:
        """The bidirectional stream: commands in (``check`` authorizes each), the endpoint's commands out."""
        out: asyncio.Queue[Any] = asyncio.Queue()
        previous, s.telemetry = s.telemetry, out
        if previous is not None:
            previous.put_nowait(None)  # a newer stream of the same client replaces the old one
        reader = asyncio.ensure_future(self._read(s, requests, out, check))
        try:
            while True:
                item = await out.get()
                if item is None:
                    break
                self.core.stats.telemetry_commands += 1
                yield item
        finally:
            reader.cancel()
            if s.telemetry is out:
                s.telemetry = None
            s.touch()

    async def _read(self, s: ClientSession, requests: AsyncIterator[Any], out: asyncio.Queue[Any], check: Any) -> None:
        try:
            async for cmd in requests:
                s.touch()
                try:
                    if isinstance(cmd, ProxyError):
                        raise cmd
                    check(cmd)
                    if cmd.WhichOneof("command") == "settings":
                        out.put_nowait(await self.settings(s, cmd))
                    else:
                        self.report(s, cmd)
                except ProxyError as e:
                    out.put_nowait(pb.TelemetryCommand(status=pb.Status(code=e.code, message=e.message)))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the stream broke: the writer side ends too
            log.info("grpc_telemetry_closed", client_id=s.client_id, error=repr(e))
        out.put_nowait(None)

    # -- brokers' requests to the client ------------------------------------------------------------------

    async def relay(self, s: ClientSession, addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction(s, addr, cmd)
            return None
        if cmd.code == GET_CONSUMER_RUNNING_INFO:
            return await self._running_info(s, cmd)
        if cmd.code == CONSUME_MESSAGE_DIRECTLY:
            return await self._verify(s, cmd)
        if cmd.is_oneway:  # NOTIFY_CONSUMER_IDS_CHANGED: the broker balances POP consumers itself
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"request code {cmd.code} is not supported by gRPC (RocketMQ 5.x SDK) clients")

    def _check_transaction(self, s: ClientSession, addr: str, cmd: RemotingCommand) -> None:
        try:
            msg = decode_record(cmd.body or b"")[0]
        except CorruptRecordError as e:
            log.warning("grpc_check_transaction_bad_message", broker=addr, error=str(e))
            return
        group = msg.properties.get("PGROUP", msg.topic)
        tid = cmd.ext.get("transactionId") or msg.properties.get("__transactionId__", "")
        broker = self.txns.broker_of(self.core.routes.cached(msg.topic), addr)
        self.txns.add(group, tid, broker, msg.topic, int(cmd.ext.get("tranStateTableOffset", "0")),
                      int(cmd.ext.get("commitLogOffset", "0")))
        command = pb.TelemetryCommand(recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
            message=to_proto(msg, msg.topic, _now_ms()), transaction_id=tid))
        targets = [s] if s.telemetry is not None else self.core.sessions.producers_of(group)
        if not targets or not targets[0].push(command):
            log.info("grpc_check_transaction_no_client", group=group, transaction_id=tid)

    async def _running_info(self, s: ClientSession, cmd: RemotingCommand) -> RemotingCommand:
        info: dict[str, Any] = {"properties": {"PROP_CLIENT_VERSION": s.version, "PROP_CONSUME_TYPE":
                                               "CONSUME_POP"}, "subscriptionSet": [], "mqTable": {}, "statusTable": {}}
        if cmd.bool_field("jstackEnable"):
            fut = s.ask(lambda n: pb.TelemetryCommand(
                print_thread_stack_trace_command=pb.PrintThreadStackTraceCommand(nonce=n)))
            if fut is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"the gRPC client {s.client_id} has no Telemetry stream")
            status, stack = await asyncio.wait_for(fut, self.core.cfg.broker_timeout_ms / 1000)
            info["jstack"] = stack
        return cmd.response(body=orjson.dumps(info))

    async def _verify(self, s: ClientSession, cmd: RemotingCommand) -> RemotingCommand:
        try:
            msg = decode_record(cmd.body or b"")[0]
        except CorruptRecordError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad message: {e}")
        proto = to_proto(msg, msg.topic, _now_ms())
        fut = s.ask(lambda n: pb.TelemetryCommand(verify_message_command=pb.VerifyMessageCommand(nonce=n, message=proto)))
        if fut is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the gRPC client {s.client_id} has no Telemetry stream")
        status, _ = await asyncio.wait_for(fut, self.core.cfg.broker_timeout_ms / 1000)
        code = int(status.code)
        if code == Code.VERIFY_FIFO_MESSAGE_UNSUPPORTED:
            return cmd.response(ResponseCode.NO_PERMISSION, "forbidden to verify message")
        result = {Code.OK: "CR_SUCCESS", Code.FAILED_TO_CONSUME_MESSAGE: "CR_LATER",
                  Code.MESSAGE_CORRUPTED: "CR_RETURN_NULL"}.get(known_code(code) or Code.OK, "CR_THROW_EXCEPTION")
        return cmd.response(body=orjson.dumps({"order": False, "autoCommit": True, "consumeResult": result,
                                               "remark": "from gRPC client", "spentTimeMills": 0}))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
