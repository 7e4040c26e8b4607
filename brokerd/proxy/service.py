"""The gRPC endpoint: ``apache.rocketmq.v2.MessagingService`` served with grpc.aio on the running event loop
(GrpcMessagingApplication). Every RPC: its metadata read (client id required; with ACL off a known client's session
is found from its id alone), ACL when on, the activity run, errors answered as the proto's Status (never a gRPC
error, except a Telemetry stream without settings), the answer counted. A request whose protobuf does not parse is
answered BAD_REQUEST. An activity may answer bytes already serialised (``wire.Encoded``); ReceiveMessage writes its
stream with the writer API. With ``workers`` the port is shared (SO_REUSEPORT) with that many worker processes
(``workers.py``), whose counters and clients ``stats`` and ``snapshot`` include."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import structlog
from google.protobuf.message import DecodeError

from brokerd.proxy import pb
from brokerd.proxy.auth import authenticate, authorize
from brokerd.proxy.client_activity import ClientActivity
from brokerd.proxy.codes import Code, ProxyError, known_code
from brokerd.proxy.config import GrpcProxyConfig
from brokerd.proxy.consumer import ConsumerActivity
from brokerd.proxy.core import Caller, ProxyCore
from brokerd.proxy.offsets import OffsetActivity
from brokerd.proxy.producer import ProducerActivity
from brokerd.proxy.route_activity import RouteActivity
from brokerd.proxy.sessions import TYPE_NAMES, ClientSession
from brokerd.proxy.stats import GrpcStats
from brokerd.proxy.transactions import TransactionTable
from brokerd.proxy.transport import LocalTargets
from brokerd.proxy.wire import Encoded
from brokerd.proxy.workers import WorkerPool

log = structlog.get_logger(component="grpc_proxy")

Unary = Callable[[ClientSession, Any], Awaitable[Any]]


class Malformed:
    """A request that did not parse (the deserializer never raises: grpc would answer INTERNAL)."""

    def __init__(self, error: str) -> None:
        self.error = error


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as e:
            return Malformed(str(e) or type(e).__name__)
    return parse


def _serialize(msg: Any) -> bytes:
    return msg if type(msg) is bytes else bytes(msg.SerializeToString())


def parse_peer(peer: str) -> tuple[str, int]:
    """grpc's ``context.peer()`` ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000") as (host, port)."""
    _, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        return host or "0.0.0.0", int(port)
    except ValueError:
        return host or "0.0.0.0", 0


class GrpcEndpoint:
    def __init__(self, cfg: GrpcProxyConfig, targets: LocalTargets, namesrv_addrs: Callable[[], list[str]]) -> None:
        self.cfg = cfg
        self.core = ProxyCore(cfg, targets, namesrv_addrs)
        txns = TransactionTable(cfg.transaction_data_expire_ms, cfg.transaction_data_max_num)
        self.routes = RouteActivity(self.core)
        self.clients = ClientActivity(self.core, txns)
        self.producer = ProducerActivity(self.core, txns)
        self.consumer = ConsumerActivity(self.core)
        self.offsets = OffsetActivity(self.core)
        self.core.on_close.append(self.consumer.release)
        self.workers = WorkerPool(cfg, namesrv_addrs, cfg.workers) if cfg.workers else None
        self._server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def stats(self) -> GrpcStats:
        """The counters of this endpoint and of its worker processes."""
        if self.workers is None:
            return self.core.stats
        return GrpcStats.total([self.core.stats, *self.workers.stats()])

    def _clients(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        own = [{"clientId": s.client_id, "type": TYPE_NAMES.get(s.client_type, "unspecified"),
                "language": s.language, "version": s.version, "peer": f"{s.peer[0]}:{s.peer[1]}",
                "group": s.group, "topics": s.topics(), "telemetry": s.telemetry is not None,
                "idleSeconds": round(now - s.last_seen, 1)} for s in self.core.sessions.sessions.values()]
        if self.workers is not None:
            own += self.workers.clients()
        return sorted(own, key=lambda c: str(c["clientId"]))

    def client_counts(self) -> dict[str, int]:
        """Connected clients by type, worker processes included (``/metrics``)."""
        out: dict[str, int] = {}
        for c in self._clients():
            out[c["type"]] = out.get(c["type"], 0) + 1
        return out

    def snapshot(self) -> dict[str, Any]:
        """The endpoint as the dashboard shows it: its clients, its requests by RPC and status, its messages (worker
        processes included: a worker's client carries ``worker``, its number)."""
        clients = self._clients()
        st = self.stats
        return {"enabled": True, "port": self.port, "clients": clients,
                "workers": self.workers.count if self.workers is not None else 0,
                "requests": [{"rpc": rpc, "code": code, "count": n} for (rpc, code), n in sorted(st.requests.items())],
                "messages": {"sent": st.messages_sent, "received": st.messages_received, "acked": st.messages_acked,
                             "authRefused": st.auth_refused}}

    def _unary_table(self) -> dict[str, Unary]:
        return {
            "QueryRoute": self.routes.query_route, "QueryAssignment": self.routes.query_assignment,
            "Heartbeat": self.clients.heartbeat, "NotifyClientTermination": self.clients.notify_client_termination,
            "SendMessage": self.producer.send_message, "EndTransaction": self.producer.end_transaction,
            "RecallMessage": self.producer.recall_message, "AckMessage": self.consumer.ack_message,
            "ChangeInvisibleDuration": self.consumer.change_invisible_duration,
            "ForwardMessageToDeadLetterQueue": self.consumer.forward_to_dlq,
            "UpdateOffset": self.offsets.update_offset, "GetOffset": self.offsets.get_offset,
            "QueryOffset": self.offsets.query_offset, "SyncLiteSubscription": self._lite,
        }

    async def _lite(self, s: ClientSession, req: Any) -> Any:
        raise ProxyError(Code.NOT_IMPLEMENTED, "lite topics are not supported by this endpoint")

    # -- request context --------------------------------------------------------------------------------------

    def _caller(self, method: str, req: Any, context: grpc.aio.ServicerContext) -> Caller:
        md = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        client_id = md.get("x-mq-client-id", "")
        if not client_id.strip():
            raise ProxyError(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
        peer = parse_peer(context.peer() or "")
        account = None
        acl = self.core.acl
        if acl is not None:
            try:
                account, white = authenticate(acl.current(), md.get("authorization"), md.get("x-mq-date-time"), peer[0])
                if not isinstance(req, Malformed):
                    authorize(account, white, method, req)
            except ProxyError:
                self.core.stats.auth_refused += 1
                raise
        return Caller(client_id, md.get("x-mq-language", ""), md.get("x-mq-client-version", ""), peer, account,
                      md.get("x-mq-namespace", ""))

    def _enter(self, method: str, req: Any, context: grpc.aio.ServicerContext) -> ClientSession:
        if self.core.acl is None and not isinstance(req, Malformed):
            s = self._known(context)
            if s is not None:
                return s
        caller = self._caller(method, req, context)
        if isinstance(req, Malformed):
            raise ProxyError(Code.BAD_REQUEST, f"the {method} request is not a valid protobuf message: {req.error}")
        return self.core.session(caller)

    def _known(self, context: grpc.aio.ServicerContext) -> ClientSession | None:
        """ACL off: the open session of the request's client id (what ``_caller`` would find), without the rest of
        its metadata; None: a new client (``_caller`` and ``session`` build it)."""
        for key, value in context.invocation_metadata() or ():
            if key == "x-mq-client-id":
                s = self.core.sessions.get(value) if isinstance(value, str) else None
                if s is None or s.closed:
                    return None
                s.last_seen = time.monotonic()
                return s
        return None

    @staticmethod
    def _remaining_ms(context: grpc.aio.ServicerContext) -> int | None:
        left = context.time_remaining()
        return int(left * 1000) if left is not None else None

    # -- handlers ---------------------------------------------------------------------------------------------

    def _unary(self, method: str, fn: Unary) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        resp_cls = pb.response_class(method)

        async def handle(req: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                resp = await fn(self._enter(method, req, context), req)
                if type(resp) is Encoded:  # already serialised (wire.py)
                    self.core.stats.answered(method, resp.code.name)
                    return resp.data
            except ProxyError as e:
                resp = resp_cls(status=pb.Status(code=e.code, message=e.message))
            except Exception as e:  # noqa: BLE001 - one request's failure is answered, the endpoint serves on
                log.warning("grpc_request_failed", rpc=method, error=repr(e))
                resp = resp_cls(status=pb.Status(code=Code.INTERNAL_SERVER_ERROR, message=f"{type(e).__name__}: {e}"))
            self.core.stats.answered(method, pb.enum_name("Code", int(resp.status.code)))
            return resp
        return handle

    async def _receive(self, req: Any, context: grpc.aio.ServicerContext) -> None:
        """ReceiveMessage with the writer API (a coroutine, not a generator: no generator step per message): the
        answers, written in order; the messages a failed write did not deliver are made visible again soon."""
        cls = pb.response_class("ReceiveMessage")
        try:
            s = self._enter("ReceiveMessage", req, context)
            items, msgs = await self.consumer.receive(s, req, self._remaining_ms(context))
        except ProxyError as e:
            await context.write(cls(status=pb.Status(code=e.code, message=e.message)))
            await context.write(cls(delivery_timestamp=pb.timestamp(0)))
            self.core.stats.answered("ReceiveMessage", e.code.name)
            return
        sent = 0
        try:
            for item in items:
                await context.write(item)
                sent += 1
        finally:
            if msgs and sent < len(msgs) + 1:  # the client went away: what it did not get is visible again soon
                self.consumer.nack(s, req.group.name, req.message_queue.topic.name, msgs[max(0, sent - 1):])
        self.core.stats.answered("ReceiveMessage", self.consumer.outcome(items).name)

    async def _pull(self, req: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        cls = pb.response_class("PullMessage")
        code = Code.OK
        try:
            s = self._enter("PullMessage", req, context)
            async for item in self.offsets.pull_message(s, req):
                if item.WhichOneof("content") == "status":
                    code = known_code(int(item.status.code)) or code
                yield item
        except ProxyError as e:
            code = e.code
            yield cls(status=pb.Status(code=e.code, message=e.message))
        self.core.stats.answered("PullMessage", code.name)

    async def _telemetry(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            s = self._enter("Telemetry", pb.TelemetryCommand(), context)
        except ProxyError as e:
            self.core.stats.answered("Telemetry", e.code.name)
            yield pb.TelemetryCommand(status=pb.Status(code=e.code, message=e.message))
            return

        def check(cmd: Any) -> None:
            if self.core.acl is not None:
                self._caller("Telemetry", cmd, context)

        async def parsed() -> AsyncIterator[Any]:
            async for cmd in requests:
                yield ProxyError(Code.BAD_REQUEST, f"malformed TelemetryCommand: {cmd.error}") \
                    if isinstance(cmd, Malformed) else cmd

        self.core.stats.answered("Telemetry", "OK")
        async for item in self.clients.telemetry(s, parsed(), check):
            yield item

    def _handler(self) -> grpc.GenericRpcHandler:
        table: dict[str, grpc.RpcMethodHandler] = {}
        unary = self._unary_table()
        for name, client_streaming, server_streaming in pb.METHODS:
            des, ser = _deserializer(pb.request_class(name)), _serialize
            if name == "Telemetry":
                table[name] = grpc.stream_stream_rpc_method_handler(self._telemetry, des, ser)
            elif name == "ReceiveMessage":
                table[name] = grpc.unary_stream_rpc_method_handler(self._receive, des, ser)
            elif name == "PullMessage":
                table[name] = grpc.unary_stream_rpc_method_handler(self._pull, des, ser)
            elif not client_streaming and not server_streaming and name in unary:
                table[name] = grpc.unary_unary_rpc_method_handler(self._unary(name, unary[name]), des, ser)
        return grpc.method_handlers_generic_handler(pb.SERVICE, table)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        max_msg = max(16 << 20, 4 * self.cfg.limits.max_message_size)
        self._server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", max_msg), ("grpc.max_send_message_length", max_msg),
            ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
            ("grpc.http2.max_ping_strikes", 0),
            ("grpc.so_reuseport", 1 if self.cfg.reuse_port or self.workers is not None else 0)])
        self._server.add_generic_rpc_handlers((self._handler(),))
        host = self.cfg.listen_host
        addr = f"[{host}]:{self.cfg.listen_port}" if ":" in host else f"{host}:{self.cfg.listen_port}"
        self.port = self._server.add_insecure_port(addr)
        if self.port == 0:
            raise OSError(f"cannot listen on gRPC port {self.cfg.listen_port} ({host}): port in use")
        await self._server.start()
        self.core.start()
        self.consumer.start()
        if self.workers is not None:
            try:
                await self.workers.start(self.port)
            except RuntimeError:
                await self.stop(0)
                raise
        log.info("grpc_endpoint_listening", port=self.port, host=host, acl=self.core.acl is not None,
                 workers=self.cfg.workers)

    async def stop(self, grace: float = 2.0) -> None:
        if self.workers is not None:
            await self.workers.stop()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        await self.core.stop()
