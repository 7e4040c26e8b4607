"""Asyncio remoting client: pooled connections by address, opaque-matched responses with timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, ConnectionClosed, Dispatcher


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad address {addr!r}, expected host:port")
    return host, int(port)


class RemotingClient:
    # the hook new clients start with (a tool's process-wide setting, e.g. mqadmin's --accessKey signing)
    default_before_request: Callable[[RemotingCommand], None] | None = None

    def __init__(self, dispatcher: Dispatcher | None = None, connect_timeout: float = 3.0) -> None:
        self.dispatcher = dispatcher
        self.connect_timeout = connect_timeout
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        # run on every outgoing request before it is sent (RocketMQ's RPCHook: e.g. ACL signing)
        self.before_request: Callable[[RemotingCommand], None] | None = RemotingClient.default_before_request

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            host, port = split_addr(addr)
            loop = asyncio.get_running_loop()

            def factory() -> Connection:
                return Connection(self.dispatcher, on_close=lambda c: self._forget(addr, c))

            _, proto = await asyncio.wait_for(loop.create_connection(factory, host, port), self.connect_timeout)
            self._conns[addr] = proto
            fut.set_result(proto)
            return proto
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as e:
            fut.set_exception(ConnectionClosed(f"cannot connect to {addr}: {e}"))
            fut.exception()  # mark retrieved
            raise ConnectionClosed(f"cannot connect to {addr}: {e}") from e
        finally:
            self._connecting.pop(addr, None)

    def _forget(self, addr: str, conn: Connection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(addr)
        if self.before_request is not None:
            self.before_request(cmd)
        return await conn.request(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        if self.before_request is not None:
            self.before_request(cmd)
        conn.oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        if conns:
            await asyncio.wait([c.closed for c in conns], timeout=2)
