"""The HA port's sockets: thin asyncio code around the sans-I/O cores (``master.py``, ``slave.py``).

``HAConnection`` is one TCP connection (either side); it hands bytes, its birth and its death to a
``ConnSink`` and sends what the core asks. ``HAServer`` listens on ``haListenPort``; ``connect`` opens a slave's
connection to its master. Nothing here knows the protocol.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Iterable
from typing import Protocol, cast

from brokerd.ha.wire import Body

_ids = itertools.count(1)


class ConnSink(Protocol):
    def conn_made(self, conn: HAConnection) -> None: ...

    def conn_data(self, conn: HAConnection, data: bytes) -> None: ...

    def conn_lost(self, conn: HAConnection) -> None: ...


class HAConnection(asyncio.Protocol):
    def __init__(self, sink: ConnSink) -> None:
        self.sink = sink
        self.id = next(_ids)
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports don't subclass asyncio's
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.sink.conn_made(self)

    def data_received(self, data: bytes) -> None:
        if not self.closed:
            self.sink.conn_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.sink.conn_lost(self)

    def send(self, parts: Iterable[Body]) -> None:
        if self.transport is not None and not self.closed:
            self.transport.writelines(parts)

    def close(self) -> None:
        """Close now; ``conn_lost`` is not called for a connection closed by our side."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    @property
    def write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0


class HAServer:
    """Listens on the HA port; every accepted connection goes to ``sink``."""

    def __init__(self, sink: ConnSink, host: str, port: int) -> None:
        self.sink = sink
        self.host = host
        self.port = port
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: HAConnection(self.sink), self.host, self.port,
                                               reuse_address=True, backlog=128)  # fmt: skip
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None


async def connect(sink: ConnSink, addr: str, timeout_s: float) -> HAConnection:
    """Open a connection to ``host:port`` (raises OSError / TimeoutError)."""
    host, _, port = addr.rpartition(":")
    loop = asyncio.get_running_loop()
    _, proto = await asyncio.wait_for(loop.create_connection(lambda: HAConnection(sink), host, int(port)), timeout_s)
    return proto
