"""How the endpoint reaches brokers and name servers: RocketMQ remoting commands, over one of two transports.

* A broker (or name server) of this container: the command is handed in-process to its ``Dispatcher`` through a
  ``LocalConnection`` (no socket), exactly as a request read from a socket: a send (10/310/320) is encoded as its
  frame and offered to the dispatcher's fast lane first (the broker's C send lane: stored and answered in C,
  the answer frame decoded here); what the lane leaves (and every other request) goes to the guard (ACL), then
  the handler, as a command (no encoding); what the handler answers, now or later (a long poll's
  ``write_frames``), and what the broker sends the client (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED,
  ...) land on that connection. An answer given at once (the lane's, a synchronous handler's) is returned
  without a future or a loop turn (``start``).
* Anything else (cluster mode): the same command over TCP with a ``RemotingClient``.

Each gRPC client gets its own channels (``ChannelSet``): a broker sees one client connection per gRPC client,
as it would for a 4.x client, so its registries, transaction check-backs and connection-close cleanup work on
them unchanged. RocketMQ's proxy has the same split (local mode: processors called in-process; cluster mode:
the remoting client).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codec import FrameDecoder, encode_parts
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, HeaderError, RemotingCommand
from brokerd.remoting.connection import Connection, ConnectionClosed, Dispatcher, RemotingTimeout, next_opaque

log = structlog.get_logger(component="grpc_proxy")

# a broker's request to the client behind a channel: (the broker's address, request) -> the answer (None for
# one-way requests)
BackHandler = Callable[[str, RemotingCommand], Awaitable[RemotingCommand | None]]
# requests a broker sends to clients
BACK_CODES = (RequestCode.CHECK_TRANSACTION_STATE, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 307, 309)
TARGET_RECHECK_S = 0.5  # how long a channel trusts that an address is (or is not) served in-process
# requests a dispatcher's fast lane may take (the send lane); others are never encoded
LANE_CODES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})


class LocalTargets(Protocol):
    """The brokers and name servers of this process, by the address clients use for them."""

    def local_dispatcher(self, addr: str) -> Dispatcher | None: ...


class TransportError(Exception):
    """A broker or name server could not be reached or did not answer in time (``timeout``)."""

    def __init__(self, addr: str, message: str, timeout: bool = False) -> None:
        super().__init__(message)
        self.addr = addr
        self.timeout = timeout


class LocalConnection(Connection):
    """A client connection to an in-process dispatcher: ``send`` dispatches a request as a socket read would;
    responses the handlers write complete the waiting request; requests they send go to ``back``."""

    def __init__(self, target: Dispatcher, addr: str, peer: tuple[str, int], back: BackHandler) -> None:
        super().__init__(None)
        self.target = target
        self.addr = addr
        self.remote_addr = peer
        self.local_addr = ("127.0.0.1", 0)
        self.back = back
        self.checked = 0.0  # when ChannelSet last confirmed that ``target`` serves ``addr``
        self._tasks: set[asyncio.Future[Any]] = set()

    @property
    def is_open(self) -> bool:
        return not self.closed.done()

    async def send(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        res = self.start(cmd)
        if isinstance(res, RemotingCommand):
            return res
        return await self.wait(cmd, res, timeout)

    def start(self, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        """Hand ``cmd`` to the dispatcher: its answer when given at once, else the future of it (``wait``)."""
        if not self.is_open:
            raise ConnectionClosed("local connection is closed")
        opaque = cmd.opaque = next_opaque()
        cmd.flag &= ~FLAG_ONEWAY
        fut: asyncio.Future[RemotingCommand] = self.closed.get_loop().create_future()
        self.pending[opaque] = fut
        self.arrived = time.monotonic()
        try:
            if cmd.code not in LANE_CODES or not self._lane(cmd):
                self._deliver(cmd)
        except BaseException:
            self.pending.pop(opaque, None)
            raise
        if fut.done():
            self.pending.pop(opaque, None)
            return fut.result()
        return fut

    async def wait(self, cmd: RemotingCommand, fut: asyncio.Future[RemotingCommand], timeout: float) -> RemotingCommand:
        timer = fut.get_loop().call_later(timeout, _expire, fut, cmd.code, timeout)
        try:
            return await fut
        finally:
            timer.cancel()
            self.pending.pop(cmd.opaque, None)

    def _lane(self, cmd: RemotingCommand) -> bool:
        """What Connection does with a read first: the dispatcher's fast lane takes the request's frame if it can
        (its answer now in ``out``, or later through ``write_soon``); False: the lane left it to the handler."""
        d = self.target
        lane = d.lane
        if lane is None or d.not_ready is not None:
            return False
        head, body = encode_parts(cmd)
        out: list[bytes | memoryview] = []
        if lane(self, head + body if body else head, 0, out) == 0:
            return False
        self.write_frames(out)
        d.read_done()
        return True

    def _deliver(self, cmd: RemotingCommand) -> None:
        """What Connection does with a request it read: the guard, then the handler."""
        d = self.target
        if d.guard is not None:
            try:
                refusal = d.guard(self, cmd)
            except Exception as e:  # noqa: BLE001 - a check that fails refuses
                refusal = f"access check failed: {type(e).__name__}"
            if refusal is not None:
                self.write(cmd.response(ResponseCode.NO_PERMISSION, refusal))
                return
        handler = d.lookup(cmd.code)
        if handler is None:
            self.write(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"))
            return
        try:
            res = handler(self, cmd)
        except HeaderError as e:
            self.write(cmd.response(e.code, str(e)))
            return
        except Exception as e:  # noqa: BLE001 - contained to this request
            log.warning("local_processor_error", code=cmd.code, error=repr(e))
            self.write(cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}"))
            return
        if isinstance(res, RemotingCommand):
            self.write(res)
        elif isinstance(res, asyncio.Future):
            self.inflight.add(res)
            res.add_done_callback(lambda f: self._done(cmd, f))
        elif res is not None:
            task = asyncio.ensure_future(res)
            self.inflight.add(task)
            task.add_done_callback(lambda f: self._done(cmd, f))
        d.read_done()

    def _done(self, cmd: RemotingCommand, fut: asyncio.Future[Any]) -> None:
        self.inflight.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            code = exc.code if isinstance(exc, HeaderError) else ResponseCode.SYSTEM_ERROR
            self.write(cmd.response(code, str(exc) if isinstance(exc, HeaderError) else f"{type(exc).__name__}: {exc}"))
        elif fut.result() is not None:
            self.write(fut.result())

    # -- what the broker's handlers call -------------------------------------------------------------------

    def write(self, cmd: RemotingCommand) -> None:
        if cmd.flag & FLAG_RESPONSE:
            fut = self.pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                if isinstance(cmd.body, memoryview):  # a view of the store's mapping: copied, as a socket would
                    cmd.body = bytes(cmd.body)
                fut.set_result(cmd)
        elif self.is_open:
            self._call_back(cmd)

    def write_frames(self, out: list[bytes | memoryview]) -> None:
        if out:
            for cmd in FrameDecoder().feed(b"".join(out)):
                self.write(cmd)

    def write_soon(self, frames: list[bytes | memoryview]) -> None:
        self.write_frames(frames)

    def flush_soon(self) -> None:
        return

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= FLAG_ONEWAY
        if self.is_open:
            self._call_back(cmd)

    async def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if not self.is_open:
            raise ConnectionClosed("local connection is closed")
        cmd.opaque = next_opaque()
        try:
            resp = await asyncio.wait_for(self.back(self.addr, cmd), timeout)
        except TimeoutError:
            raise RemotingTimeout(f"request code {cmd.code} to the gRPC client timed out after {timeout}s") from None
        if resp is None:
            raise ConnectionClosed("the gRPC client did not answer")
        resp.opaque, resp.flag = cmd.opaque, FLAG_RESPONSE
        return resp

    def _call_back(self, cmd: RemotingCommand) -> None:
        task = asyncio.ensure_future(self.back(self.addr, cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def hold_reading(self) -> None:
        return

    def release_reading(self) -> None:
        return

    async def drain(self) -> None:
        return

    def close(self) -> None:
        if self.is_open:
            self.connection_lost(None)


async def request_over(conn: Connection, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
    """``Connection.request`` without ``asyncio.wait_for`` (a task per request on Python 3.11): a timer fails the
    answer's future instead."""
    if not conn.is_open:
        raise ConnectionClosed(f"connection to {conn.remote_addr} is closed")
    opaque = cmd.opaque = next_opaque()
    cmd.flag &= ~FLAG_ONEWAY
    loop = conn.closed.get_loop()
    fut: asyncio.Future[RemotingCommand] = loop.create_future()
    conn.pending[opaque] = fut
    conn.write(cmd)
    timer = loop.call_later(timeout, _expire, fut, cmd.code, timeout)
    try:
        return await fut
    finally:
        timer.cancel()
        conn.pending.pop(opaque, None)


def _expire(fut: asyncio.Future[RemotingCommand], code: int, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(RemotingTimeout(f"request code {code} timed out after {timeout}s"))


class ChannelSet:
    """One gRPC client's channels to brokers and name servers, by address; ``sign`` (ACL) runs on every request."""

    def __init__(self, targets: LocalTargets, peer: tuple[str, int], back: BackHandler,
                 sign: Callable[[RemotingCommand], None] | None = None) -> None:
        self.targets = targets
        self.peer = peer
        self.back = back
        self.sign = sign
        self._local: dict[str, LocalConnection] = {}
        self._remote_checked: dict[str, float] = {}  # addresses last found not in-process, and when
        self._remote: RemotingClient | None = None

    def _back_dispatcher(self) -> Dispatcher:
        d = Dispatcher("grpc-client")

        def handle(conn: Connection, cmd: RemotingCommand) -> Awaitable[RemotingCommand | None]:
            return self.back(f"{conn.remote_addr[0]}:{conn.remote_addr[1]}", cmd)

        for code in BACK_CODES:
            d.register(code, handle)
        return d

    def _local_connection(self, addr: str) -> LocalConnection | None:
        """The open connection to the in-process dispatcher serving ``addr``, None for an address served elsewhere.
        Which is which is looked up again after ``TARGET_RECHECK_S`` (a broker added, removed or replaced at an
        address is seen within that time), not on every request."""
        now = time.monotonic()
        conn = self._local.get(addr)
        if conn is not None and conn.is_open and now - conn.checked < TARGET_RECHECK_S:
            return conn
        if conn is None and now - self._remote_checked.get(addr, -TARGET_RECHECK_S) < TARGET_RECHECK_S:
            return None
        target = self.targets.local_dispatcher(addr)
        if target is None:
            if conn is not None:
                conn.close()
                del self._local[addr]
            self._remote_checked[addr] = now
            return None
        self._remote_checked.pop(addr, None)
        if conn is None or not conn.is_open or conn.target is not target:
            if conn is not None:
                conn.close()
            conn = self._local[addr] = LocalConnection(target, addr, self.peer, self.back)
        conn.checked = now
        return conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if self.sign is not None:
            self.sign(cmd)
        try:
            conn = self._local_connection(addr)
            if conn is not None:
                res = conn.start(cmd)
                return res if isinstance(res, RemotingCommand) else await conn.wait(cmd, res, timeout)
            if self._remote is None:
                self._remote = RemotingClient(self._back_dispatcher())
            remote = await self._remote.connection(addr)
            if self._remote.before_request is not None:
                self._remote.before_request(cmd)
            return await request_over(remote, cmd, timeout)
        except RemotingTimeout as e:
            raise TransportError(addr, f"{addr} did not answer in time: {e}", timeout=True) from None
        except (ConnectionClosed, OSError) as e:
            raise TransportError(addr, f"{addr} is unreachable: {e}") from None

    def drop(self, addr: str) -> None:
        """Forget the channel to ``addr`` (its broker went away)."""
        conn = self._local.pop(addr, None)
        if conn is not None:
            conn.close()
        if self._remote is not None:
            self._remote.close_connection(addr)

    async def close(self) -> None:
        for conn in self._local.values():
            conn.close()
        self._local.clear()
        if self._remote is not None:
            await self._remote.close()
            self._remote = None
