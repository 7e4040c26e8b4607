"""What every RPC of the endpoint shares (RocketMQ proxy's MessagingProcessor + ServiceManager): client
sessions and their channels, remoting calls to brokers and name servers with errors mapped to the proto's
codes, topic routes, group configs, broker heartbeats on the clients' behalf, and idle-client expiry."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from brokerd.acl.plain import Account
from brokerd.acl.sign import sign_request
from brokerd.acl.watch import AclFile
from brokerd.proxy.codes import Code, ProxyError
from brokerd.proxy.config import GrpcProxyConfig
from brokerd.proxy.route import RouteCache, TopicRoute
from brokerd.proxy.sessions import ClientSession, SessionRegistry
from brokerd.proxy.settings import GroupConfig, GroupConfigCache, group_config_from_body
from brokerd.proxy.stats import GrpcStats
from brokerd.proxy.transport import ChannelSet, LocalTargets, TransportError
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request

log = structlog.get_logger(component="grpc_proxy")

GET_SUBSCRIPTIONGROUP_CONFIG = 352
FILTER_TYPES = {0: "TAG", 1: "TAG", 2: "SQL92"}

# a broker's request to a client: (session, broker address, command) -> the answer
Relay = Callable[[ClientSession, str, RemotingCommand], Awaitable[RemotingCommand | None]]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the gRPC metadata of one request."""

    client_id: str
    language: str
    version: str
    peer: tuple[str, int]
    account: Account | None
    namespace: str = ""


class ProxyCore:
    def __init__(self, cfg: GrpcProxyConfig, targets: LocalTargets, namesrv_addrs: Callable[[], list[str]]) -> None:
        self.cfg = cfg
        self.targets = targets
        self.acl = AclFile(cfg.acl_file_path) if cfg.acl_file_path else None
        self.routes = RouteCache(namesrv_addrs, cfg.route_ttl_ms / 1000)
        self.groups = GroupConfigCache()
        self.sessions = SessionRegistry()
        self.stats = GrpcStats()
        self.relay: Relay | None = None
        self.on_close: list[Callable[[ClientSession], Awaitable[None]]] = []  # before a session's channels close
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- sessions ---------------------------------------------------------------------------------------

    def session(self, caller: Caller) -> ClientSession:
        s = self.sessions.get(caller.client_id)
        if s is None or s.closed:
            s = self._new_session(caller)
            self.sessions.add(s)
            log.info("grpc_client_connected", client_id=caller.client_id, language=caller.language,
                     version=caller.version, peer=f"{caller.peer[0]}:{caller.peer[1]}")
        elif caller.account is not None and s.account is not caller.account:
            s.account = caller.account
        s.touch()
        return s

    def _new_session(self, caller: Caller) -> ClientSession:
        holder: list[ClientSession] = []

        async def back(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
            if self.relay is None or not holder:
                return None
            return await self.relay(holder[0], addr, cmd)

        def sign(cmd: RemotingCommand) -> None:
            acct = holder[0].account if holder else None
            if acct is not None:
                sign_request(cmd, acct.access_key, acct.secret_key)

        channels = ChannelSet(self.targets, caller.peer, back, sign if self.acl is not None else None)
        s = ClientSession(caller.client_id, caller.language, caller.version, caller.peer, channels, caller.account)
        holder.append(s)
        return s

    async def close_session(self, client_id: str, unregister: bool = True) -> None:
        s = self.sessions.remove(client_id)
        if s is None:
            return
        for hook in self.on_close:
            try:
                await hook(s)
            except Exception as e:  # noqa: BLE001 - the session closes anyway
                log.warning("grpc_close_hook_failed", client_id=client_id, error=repr(e))
        if unregister:
            await self._unregister(s)
        await s.channels.close()
        log.info("grpc_client_disconnected", client_id=client_id)

    async def _unregister(self, s: ClientSession) -> None:
        ext = {"clientID": s.client_id}
        if s.is_consumer and s.group:
            ext["consumerGroup"] = s.group
        addrs: set[str] = set()
        for topic in s.topics():
            r = self.routes.cached(topic)
            if r is not None:
                addrs.update(a for b in r.brokers.values() for a in b.addrs.values())
        for topic in s.topics() if not s.is_consumer else []:
            await self._unregister_one(s, addrs, {**ext, "producerGroup": topic})
        if s.is_consumer:
            await self._unregister_one(s, addrs, ext)

    async def _unregister_one(self, s: ClientSession, addrs: set[str], ext: dict[str, str]) -> None:
        for addr in addrs:
            try:
                await s.channels.invoke(addr, request(RequestCode.UNREGISTER_CLIENT, dict(ext)), 1.0)
            except TransportError:
                continue

    def start(self) -> None:
        self._spawn(self._expire_loop())

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def background(self, coro: Awaitable[Any]) -> None:
        """Run ``coro`` detached (its failure is logged)."""
        async def guarded() -> None:
            try:
                await coro
            except Exception as e:  # noqa: BLE001
                log.warning("grpc_background_failed", error=repr(e))
        self._spawn(guarded())

    async def _expire_loop(self) -> None:
        period = min(5.0, self.cfg.client_idle_ms / 4000)
        while True:
            await asyncio.sleep(period)  # sleep-ok: the expiry scan's period
            for s in self.sessions.idle(self.cfg.client_idle_ms / 1000):
                log.info("grpc_client_expired", client_id=s.client_id)
                await self.close_session(s.client_id)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for client_id in list(self.sessions.sessions):
            await self.close_session(client_id, unregister=False)

    # -- remoting -----------------------------------------------------------------------------------------

    async def invoke(self, s: ClientSession, addr: str, cmd: RemotingCommand,
                     timeout_ms: int | None = None) -> RemotingCommand:
        timeout = (timeout_ms if timeout_ms is not None else self.cfg.broker_timeout_ms) / 1000
        try:
            return await s.channels.invoke(addr, cmd, timeout)
        except TransportError as e:
            self.routes.forget_broker(addr)
            s.channels.drop(addr)
            raise ProxyError(Code.PROXY_TIMEOUT if e.timeout else Code.INTERNAL_SERVER_ERROR, str(e)) from None

    def fresh_route(self, topic: str) -> TopicRoute | None:
        """The cached route of ``topic`` while it is fresh (no refresh due): no coroutine needed."""
        return self.routes.fresh(topic)

    async def route(self, s: ClientSession, topic: str) -> TopicRoute:
        async def call(addr: str, cmd: RemotingCommand) -> RemotingCommand:
            return await s.channels.invoke(addr, cmd, self.cfg.broker_timeout_ms / 1000)
        return await self.routes.get(topic, call)

    async def group_config(self, s: ClientSession, group: str, topic: str) -> GroupConfig | None:
        async def fetch(g: str) -> GroupConfig | None:
            route = await self.route(s, topic)
            for b in route.brokers.values():
                addr = b.master_prefer
                if addr is None:
                    continue
                resp = await self.invoke(s, addr, request(GET_SUBSCRIPTIONGROUP_CONFIG, {"group": g}))
                if resp.code == ResponseCode.SUCCESS:
                    return group_config_from_body(g, resp.body, all_groups=False)
                if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    resp = await self.invoke(s, addr, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
                    if resp.code == ResponseCode.SUCCESS:
                        return group_config_from_body(g, resp.body, all_groups=True)
            return None
        return await self.groups.get(group, fetch)

    # -- heartbeats on the client's behalf -----------------------------------------------------------------

    def heartbeat_body(self, s: ClientSession) -> bytes:
        data: dict[str, Any] = {"clientID": s.client_id, "producerDataSet": [], "consumerDataSet": []}
        if s.is_consumer and s.group:
            subs = [{"classFilterMode": False, "topic": t, "subString": expr,
                     "expressionType": FILTER_TYPES.get(ftype, "TAG"), "tagsSet": [], "codeSet": [],
                     "subVersion": 0} for t, ftype, expr in s.subscriptions()]
            data["consumerDataSet"].append({
                "groupName": s.group, "consumeType": "CONSUME_PASSIVELY" if s.client_type == 2 else "CONSUME_ACTIVELY",
                "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": subs, "unitMode": False})
        elif s.settings is not None:
            data["producerDataSet"] = [{"groupName": t} for t in s.topics()]
        return orjson.dumps(data)

    async def broker_heartbeat(self, s: ClientSession) -> None:
        """HEART_BEAT to the brokers of the client's topics (masters; consumers: every replica)."""
        addrs: set[str] = set()
        for topic in s.topics():
            try:
                r = await self.route(s, topic)
            except ProxyError:
                continue
            for b in r.brokers.values():
                addrs.update(b.addrs.values() if s.is_consumer else [a for a in [b.master] if a])
        body = self.heartbeat_body(s)
        for addr in addrs:
            try:
                resp = await s.channels.invoke(addr, request(RequestCode.HEART_BEAT, body=body),
                                               self.cfg.broker_timeout_ms / 1000)
            except TransportError as e:
                log.info("grpc_heartbeat_failed", client_id=s.client_id, broker=addr, error=str(e))
                continue
            if resp.code != ResponseCode.SUCCESS:
                log.info("grpc_heartbeat_refused", client_id=s.client_id, broker=addr, code=resp.code,
                         remark=resp.remark)
