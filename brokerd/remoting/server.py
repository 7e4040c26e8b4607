"""Asyncio remoting server: one listening socket, a Dispatcher, connection tracking and graceful stop."""

from __future__ import annotations

import asyncio

import structlog

from brokerd.remoting.arrival import stamp_listener
from brokerd.remoting.connection import Connection, Dispatcher

log = structlog.get_logger("remoting")


class RemotingServer:
    def __init__(self, dispatcher: Dispatcher, host: str = "0.0.0.0", port: int = 0, name: str = "") -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.requested_port = port
        self.name = name
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None

    def _make_protocol(self) -> Connection:
        conn = Connection(self.dispatcher, on_close=self.connections.discard, read_backpressure=True,
                          stamp_arrival=True)  # a request's time counts from when it was readable (arrival.py)
        self.connections.add(conn)
        return conn

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._make_protocol, self.host, self.requested_port, reuse_address=True, backlog=1024
        )
        for sock in self._server.sockets:  # stamping on before the first connection arrives (arrival.py)
            stamp_listener(sock.fileno())
        log.info("remoting_server_listening", server=self.name, port=self.port)

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (up to `grace` s), then close connections."""
        if self._server is None:
            return
        self._server.close()
        tasks = [t for c in self.connections for t in c.inflight]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for c in list(self.connections):
            c.close()
        closing = [c.closed for c in self.connections if c.transport is not None]
        if closing:
            await asyncio.wait(closing, timeout=grace)
        await self._server.wait_closed()
        self._server = None
