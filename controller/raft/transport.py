"""Peer transport for Raft traffic: msgpack frames over TCP, one connection per pair of members.

The member with the smaller id dials, the other accepts; both directions then share that connection.
The dialer reconnects with exponential backoff (50 ms doubling to 1 s, with jitter). A message for a
peer that is not connected, or whose socket buffer is over `max_buffer_bytes`, is dropped and counted:
Raft retransmits what matters, and queueing for a dead peer would grow without bound.

Call only from the event loop that started it.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Callable
from typing import Any, cast

import structlog

from controller.raft.codec import CodecError, FrameDecoder, decode_message, encode_hello, encode_message
from controller.raft.types import Message

BACKOFF_S_MIN = 0.05
BACKOFF_S_MAX = 1.0


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad address {addr!r}: expected host:port")
    return host.strip("[]"), int(port)


class _PeerConnection(asyncio.Protocol):
    def __init__(self, owner: PeerTransport, peer_id: str | None) -> None:
        self.owner = owner
        self.peer_id = peer_id  # known up front when dialing; learned from the hello when accepting
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.owner.connection_opened(self)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.peer_id is not None:
            self.transport.write(encode_hello(self.owner.group, self.owner.self_id))
            self.owner.register_peer(self.peer_id, self)

    def data_received(self, data: bytes) -> None:
        try:
            objs = self.decoder.feed(data)
            msgs: list[Message] = []
            for obj in objs:
                if self.peer_id is None:
                    self._accept_hello(obj)
                else:
                    msgs.append(decode_message(obj))
        except (CodecError, ValueError) as e:
            self.owner.log.warning("peer_protocol_error", peer=self.peer_id, error=str(e))
            self.close()
            return
        if msgs:
            self.owner.on_messages(msgs)

    def _accept_hello(self, obj: Any) -> None:
        if not (isinstance(obj, list) and len(obj) == 3 and obj[0] == "hello"):
            raise CodecError("expected hello frame")
        _, group, peer = obj
        if group != self.owner.group or peer not in self.owner.peers or not peer < self.owner.self_id:
            raise CodecError(f"unexpected hello from {peer!r} of group {group!r}")
        self.peer_id = peer
        self.owner.register_peer(peer, self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.connection_closed(self)
        if self.peer_id is not None:
            self.owner.unregister_peer(self.peer_id, self)
        if not self.closed.done():
            self.closed.set_result(None)

    def write(self, data: bytes) -> bool:
        t = self.transport
        if t is None or t.is_closing() or t.get_write_buffer_size() > self.owner.max_buffer_bytes:
            return False
        t.write(data)
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class PeerTransport:
    def __init__(
        self,
        self_id: str,
        group: str,
        peers: dict[str, str],
        on_messages: Callable[[list[Message]], None],
        *,
        sock: socket.socket | None = None,
        max_buffer_bytes: int = 64 * 1024 * 1024,
        rng: random.Random | None = None,
    ) -> None:
        self.self_id = self_id
        self.group = group
        self.peers = {p: a for p, a in peers.items() if p != self_id}
        self.listen_addr = peers[self_id]
        self.on_messages = on_messages
        self.max_buffer_bytes = max_buffer_bytes
        self._sock = sock
        self._rng = rng or random.Random()
        self._conns: dict[str, _PeerConnection] = {}
        self._all: set[_PeerConnection] = set()
        self._server: asyncio.Server | None = None
        self._dialers: list[asyncio.Task[None]] = []
        self._closing = False
        self.dropped = 0
        self.log = structlog.get_logger().bind(component="raft_transport", group=group, node=self_id)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            self._server = await loop.create_server(lambda: _PeerConnection(self, None), sock=self._sock)
        else:
            host, port = split_addr(self.listen_addr)
            self._server = await loop.create_server(lambda: _PeerConnection(self, None), host, port)
        bound = self._server.sockets[0].getsockname()
        self.log.info("listener_started", host=bound[0], port=bound[1])
        for peer in sorted(self.peers):
            if self.self_id < peer:
                self._dialers.append(asyncio.create_task(self._dial_loop(peer), name=f"raft-dial-{peer}"))

    async def _dial_loop(self, peer: str) -> None:
        loop = asyncio.get_running_loop()
        host, port = split_addr(self.peers[peer])
        backoff = BACKOFF_S_MIN
        while not self._closing:
            try:
                _, conn = await loop.create_connection(lambda: _PeerConnection(self, peer), host, port)
            except OSError:
                await asyncio.sleep(backoff * (0.5 + self._rng.random()))
                backoff = min(backoff * 2, BACKOFF_S_MAX)
                continue
            backoff = BACKOFF_S_MIN
            await conn.closed
            if not self._closing:
                await asyncio.sleep(backoff * self._rng.random())

    # -- called by the connections ------------------------------------------------------------------------

    def connection_opened(self, conn: _PeerConnection) -> None:
        """Track a connection (dialed or accepted, identified or not) so `stop()` can close it."""
        self._all.add(conn)

    def connection_closed(self, conn: _PeerConnection) -> None:
        self._all.discard(conn)

    def register_peer(self, peer: str, conn: _PeerConnection) -> None:
        """`conn` now carries `peer`'s traffic; a previous connection to that peer is closed."""
        old = self._conns.get(peer)
        self._conns[peer] = conn
        if old is not None and old is not conn:
            old.close()
        self.log.info("peer_connected", peer=peer)

    def unregister_peer(self, peer: str, conn: _PeerConnection) -> None:
        """`conn` closed: forget it unless a newer connection to `peer` already replaced it."""
        if self._conns.get(peer) is conn:
            del self._conns[peer]
            self.log.info("peer_disconnected", peer=peer)

    def connected(self, peer: str) -> bool:
        return peer in self._conns

    def send(self, msgs: list[Message]) -> None:
        if not msgs:
            return
        by_peer: dict[str, list[bytes]] = {}
        for m in msgs:
            by_peer.setdefault(m.to, []).append(encode_message(m))
        for peer, frames in by_peer.items():
            conn = self._conns.get(peer)
            if conn is None or not conn.write(b"".join(frames)):
                self.dropped += len(frames)

    async def stop(self) -> None:
        self._closing = True
        for t in self._dialers:
            t.cancel()
        for t in self._dialers:
            try:
                await t
            except asyncio.CancelledError:
                pass
        for conn in list(self._all):
            conn.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
