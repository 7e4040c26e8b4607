"""Topic routes as the endpoint sees them: the name server's TopicRouteData, parsed (pure), the queues a send
or a receive picks from (MessageQueueSelector: sorted queues, round robin, a message group hashed onto the
write queues with Guava's consistentHash as RocketMQ's proxy does), and a cache that refreshes in the
background (stale entries are served while a refresh runs; an unreachable broker drops its topics' entries).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from brokerd.message.javahash import java_string_hash
from brokerd.namesrv.lenient_json import LenientJSONError, loads
from brokerd.proxy.codes import Code, ProxyError
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0
AUTO_CREATE_TOPIC = "TBW102"
DEFAULT_QUEUE_NUMS = 4


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    name: str
    addrs: dict[int, str]

    @property
    def master(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    @property
    def master_prefer(self) -> str | None:
        """The master, else the lowest-id slave (reads may go to a slave while no master is known)."""
        if MASTER_ID in self.addrs:
            return self.addrs[MASTER_ID]
        return self.addrs[min(self.addrs)] if self.addrs else None


@dataclass(frozen=True, slots=True)
class Queue:
    broker_name: str
    queue_id: int
    addr: str


@dataclass
class TopicRoute:
    topic: str
    queues: list[QueueData]
    brokers: dict[str, BrokerData]
    message_type: str = "MIXED"  # the topic's message.type attribute; no attribute: every type is accepted
    fetched: float = field(default_factory=time.monotonic)
    _rr: itertools.count[int] = field(default_factory=itertools.count)
    _writable: list[Queue] | None = None  # write_queues, computed once (a route is replaced, never changed)

    def write_queues(self) -> list[Queue]:
        if self._writable is None:
            self._writable = self._write_queues()
        return self._writable

    def _write_queues(self) -> list[Queue]:
        out: list[Queue] = []
        for qd in self.queues:
            b = self.brokers.get(qd.broker_name)
            if qd.perm & PERM_WRITE and b is not None and b.master is not None:
                out.extend(Queue(qd.broker_name, i, b.master) for i in range(qd.write_queue_nums))
        return sorted(out, key=lambda q: (q.broker_name, q.queue_id))

    def read_brokers(self) -> list[Queue]:
        """One acting queue (-1) per readable broker: POP takes from all its queues."""
        out = []
        for qd in self.queues:
            b = self.brokers.get(qd.broker_name)
            addr = b.master_prefer if b is not None else None
            if qd.perm & PERM_READ and qd.read_queue_nums > 0 and addr is not None:
                out.append(Queue(qd.broker_name, -1, addr))
        return sorted(out, key=lambda q: q.broker_name)

    def select_write(self, message_group: str | None, avoid: frozenset[str] = frozenset()) -> Queue:
        queues = self.write_queues()
        if not queues:
            raise ProxyError(Code.FORBIDDEN, f"no writable queue for topic {self.topic}")
        if message_group:
            return queues[consistent_hash(java_string_hash(message_group), len(queues))]
        n = next(self._rr)
        for i in range(len(queues)):
            q = queues[(n + i) % len(queues)]
            if q.broker_name not in avoid:
                return q
        return queues[n % len(queues)]

    def select_read(self, broker_name: str | None) -> Queue:
        brokers = self.read_brokers()
        if not brokers:
            raise ProxyError(Code.FORBIDDEN, f"no readable queue for topic {self.topic}")
        if broker_name:
            for q in brokers:
                if q.broker_name == broker_name:
                    return q
        return brokers[next(self._rr) % len(brokers)]

    def broker_addr(self, broker_name: str, master_only: bool = True) -> str:
        b = self.brokers.get(broker_name)
        addr = (b.master if master_only else b.master_prefer) if b is not None else None
        if addr is None:
            raise ProxyError(Code.BAD_REQUEST, f"broker {broker_name} of topic {self.topic} has no master now")
        return addr


def consistent_hash(h: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash(long, int) (a 64-bit LCG), for a Java int hash code."""
    state = h & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        shifted = (state >> 33) & 0x7FFFFFFF  # (int) (state >>> 33): 31 bits, never negative
        nxt = int((candidate + 1) / ((shifted + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def parse_route(topic: str, body: bytes | None) -> TopicRoute:
    """A GET_ROUTEINFO_BY_TOPIC body (fastjson: integer map keys)."""
    try:
        obj = loads(body or b"{}")
    except LenientJSONError as e:
        raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"the name server's route of {topic} is not JSON: {e}") from None
    queues = [QueueData(str(q.get("brokerName", "")), int(q.get("readQueueNums", 0)), int(q.get("writeQueueNums", 0)),
                        int(q.get("perm", 6))) for q in obj.get("queueDatas") or [] if isinstance(q, dict)]
    brokers = {}
    for b in obj.get("brokerDatas") or []:
        if isinstance(b, dict) and b.get("brokerName"):
            addrs = {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()}
            brokers[str(b["brokerName"])] = BrokerData(str(b.get("cluster", "")), str(b["brokerName"]), addrs)
    return TopicRoute(topic, queues, brokers)


def topic_message_type(body: bytes | None) -> str:
    """The ``message.type`` attribute of a GET_TOPIC_CONFIG answer ({"topicConfig": {...}})."""
    try:
        tc = orjson.loads(body or b"{}").get("topicConfig") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return "MIXED"
    attrs = tc.get("attributes") or {}
    value = attrs.get("message.type") or attrs.get("+message.type")
    return str(value).upper() if value else "MIXED"


Invoke = Callable[[str, RemotingCommand], Awaitable[RemotingCommand]]


class RouteCache:
    """Topic routes from the name servers, cached ``ttl_s``; a stale entry is served while it refreshes."""

    def __init__(self, namesrv_addrs: Callable[[], list[str]], ttl_s: float = 3.0) -> None:
        self.namesrv_addrs = namesrv_addrs
        self.ttl_s = ttl_s
        self._routes: dict[str, TopicRoute] = {}
        self._fetching: dict[str, asyncio.Future[TopicRoute]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def cached(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    def fresh(self, topic: str) -> TopicRoute | None:
        """The cached route while no refresh is due (``get`` serves and refreshes the others)."""
        r = self._routes.get(topic)
        return r if r is not None and time.monotonic() - r.fetched <= self.ttl_s else None

    async def get(self, topic: str, invoke: Invoke) -> TopicRoute:
        r = self._routes.get(topic)
        if r is not None:
            if time.monotonic() - r.fetched > self.ttl_s and topic not in self._fetching:
                task = asyncio.ensure_future(self._refresh(topic, invoke))
                self._tasks.add(task)
                task.add_done_callback(self._background_done)
            return r
        return await self._refresh(topic, invoke)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # a failed background refresh keeps the stale entry

    async def _refresh(self, topic: str, invoke: Invoke) -> TopicRoute:
        pending = self._fetching.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[TopicRoute] = asyncio.get_running_loop().create_future()
        self._fetching[topic] = fut
        try:
            route = await self._fetch(topic, invoke)
            self._routes[topic] = route
            fut.set_result(route)
            return route
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()
            if isinstance(e, ProxyError) and e.code == Code.TOPIC_NOT_FOUND:
                self._routes.pop(topic, None)
            raise
        finally:
            self._fetching.pop(topic, None)

    async def _fetch(self, topic: str, invoke: Invoke) -> TopicRoute:
        addrs = self.namesrv_addrs()
        if not addrs:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, "no name server address is configured")
        last: Exception | None = None
        for addr in addrs:
            try:
                resp = await invoke(addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
            except Exception as e:  # noqa: BLE001 - the next name server is tried
                last = e
                continue
            if resp.code == ResponseCode.TOPIC_NOT_EXIST and topic != AUTO_CREATE_TOPIC:
                return await self._auto_create_route(topic, invoke, addr)
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
            if resp.code != ResponseCode.SUCCESS:
                last = ProxyError(Code.INTERNAL_SERVER_ERROR, f"route of {topic}: {resp.remark} ({resp.code})")
                continue
            route = parse_route(topic, resp.body)
            route.message_type = await self._message_type(route, invoke)
            return route
        raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"no name server answered the route of {topic}: {last}")

    @staticmethod
    async def _auto_create_route(topic: str, invoke: Invoke, addr: str) -> TopicRoute:
        """A topic no broker has yet: where brokers create topics on first send (autoCreateTopicEnable, their
        TBW102 route), the route a 4.x producer would use (TBW102's brokers, at most 4 queues each); else
        TOPIC_NOT_FOUND."""
        resp = await invoke(addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": AUTO_CREATE_TOPIC}))
        if resp.code != ResponseCode.SUCCESS:
            raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found (and brokers do not create topics)")
        base = parse_route(AUTO_CREATE_TOPIC, resp.body)
        queues = [QueueData(q.broker_name, min(q.read_queue_nums, DEFAULT_QUEUE_NUMS),
                            min(q.write_queue_nums, DEFAULT_QUEUE_NUMS), PERM_READ | PERM_WRITE)
                  for q in base.queues if q.perm & PERM_WRITE]
        if not queues:
            raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found (and brokers do not create topics)")
        return TopicRoute(topic, queues, base.brokers)

    @staticmethod
    async def _message_type(route: TopicRoute, invoke: Invoke) -> str:
        for b in route.brokers.values():
            if b.master_prefer is None:
                continue
            try:
                resp = await invoke(b.master_prefer, request(RequestCode.GET_TOPIC_CONFIG, {"topic": route.topic}))
            except Exception:  # noqa: BLE001 - another broker may answer
                continue
            if resp.code == ResponseCode.SUCCESS:
                return topic_message_type(resp.body)
        return "MIXED"

    def forget_broker(self, addr: str) -> None:
        """``addr`` did not answer: the routes through it are fetched again before their next use."""
        for topic, r in list(self._routes.items()):
            if any(addr in b.addrs.values() for b in r.brokers.values()):
                del self._routes[topic]

    def invalidate(self, topic: str) -> None:
        self._routes.pop(topic, None)
