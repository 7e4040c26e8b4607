"""Peer transport over real loopback sockets: one connection per pair, reconnect, drop-when-down."""

from __future__ import annotations

import asyncio

from controller.raft.transport import PeerTransport
from controller.raft.types import Entry, Message, MsgType
from tests.integration.raft.conftest import bind_port0, rebind, wait_until


def msg(frm: str, to: str, n: int) -> Message:
    return Message(MsgType.APP, frm, to, 1, index=n, entries=[Entry(n + 1, 1, 0, b"x" * 100)])


async def test_messages_to_a_down_peer_are_dropped_and_flow_after_it_comes_up() -> None:
    s1, s2 = bind_port0(), bind_port0()
    p2 = s2.getsockname()[1]
    peers = {"a": f"127.0.0.1:{s1.getsockname()[1]}", "b": f"127.0.0.1:{p2}"}
    got: list[Message] = []
    a = PeerTransport("a", "g", peers, lambda ms: None, sock=s1)
    await a.start()
    a.send([msg("a", "b", i) for i in range(5)])
    assert a.dropped == 5, "nothing is queued for a peer that is not connected"
    s2.close()
    b = PeerTransport("b", "g", peers, got.extend, sock=rebind(p2))
    await b.start()
    await wait_until(lambda: a.connected("b") and b.connected("a"), what="connection a<->b")
    a.send([msg("a", "b", i) for i in range(100)])
    await wait_until(lambda: len(got) == 100, what="100 messages delivered")
    assert [m.index for m in got] == list(range(100)) and got[0].entries[0].index == 1
    await b.stop()
    await wait_until(lambda: not a.connected("b"), what="a notices b is gone")
    b2 = PeerTransport("b", "g", peers, got.extend, sock=rebind(p2))
    await b2.start()
    await wait_until(lambda: a.connected("b"), what="a reconnects with backoff")
    a.send([msg("a", "b", 7)])
    await wait_until(lambda: len(got) == 101, what="delivery after reconnect")
    await a.stop()
    await b2.stop()


async def test_a_stranger_or_wrong_group_is_refused() -> None:
    s1, s2 = bind_port0(), bind_port0()
    peers = {"a": f"127.0.0.1:{s1.getsockname()[1]}", "b": f"127.0.0.1:{s2.getsockname()[1]}"}
    got: list[Message] = []
    b = PeerTransport("b", "g", peers, got.extend, sock=s2)
    await b.start()
    a = PeerTransport("a", "other-group", peers, lambda ms: None, sock=s1)
    await a.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", s2.getsockname()[1])
    writer.write(b"\x00\x00\x00\x05garbage")
    assert await asyncio.wait_for(reader.read(10), 5) == b"", "garbage from an unknown client is cut off"
    writer.close()
    assert not b.connected("a"), "a member of another group is never registered"
    await a.stop()
    await b.stop()
