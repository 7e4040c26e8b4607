"""The in-process transport: a remoting command handed to a Dispatcher as a socket read would hand it (guard,
handler, sync / awaitable / future answers, answers written later as frames), the broker's own requests to the
client, and the connection's close reaching the broker's cleanup."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from brokerd.proxy.transport import ChannelSet, LocalConnection, TransportError
from brokerd.remoting.codec import encode
from brokerd.remoting.command import HeaderError, RemotingCommand, request
from brokerd.remoting.connection import Connection, Dispatcher, RemotingTimeout


def dispatcher() -> Dispatcher:
    d = Dispatcher("test")
    parked: list[tuple[Connection, RemotingCommand, asyncio.Future[None]]] = []

    def sync(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=memoryview(b"view-" + cmd.ext["x"].encode()))  # type: ignore[arg-type]

    async def later(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0)  # sleep-ok: a handler that awaits something before it answers
        return cmd.response(remark=f"from {conn.remote_addr[0]}")

    def long_poll(conn: Connection, cmd: RemotingCommand) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        parked.append((conn, cmd, fut))
        return fut

    def wake(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        for c, parked_cmd, fut in parked:
            c.write_frames([encode(parked_cmd.response(remark="woken"))])
            fut.set_result(None)
        parked.clear()
        return cmd.response()

    def bad(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise HeaderError("missing header field 'topic'")

    def boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("kaput")

    def ask_client(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        conn.oneway(request(39, {"msgId": "m1"}))
        return cmd.response()

    d.register_all({1: sync, 2: later, 3: long_poll, 4: wake, 5: bad, 6: boom, 7: ask_client})
    return d


async def test_answers_now_later_and_from_a_long_poll_reach_the_caller() -> None:
    back: list[tuple[str, int]] = []

    async def relay(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        back.append((addr, cmd.code))
        return None

    conn = LocalConnection(dispatcher(), "127.0.0.1:10911", ("10.9.9.9", 1234), relay)  # port-ok: data, nothing binds it
    resp = await conn.send(request(1, {"x": "y"}), 1)
    assert resp.body == b"view-y" and isinstance(resp.body, bytes)
    assert (await conn.send(request(2), 1)).remark == "from 10.9.9.9"
    parked = asyncio.ensure_future(conn.send(request(3), 2))
    await asyncio.sleep(0)  # sleep-ok: one loop turn, so the parked request reaches its handler
    assert not parked.done()
    await conn.send(request(4), 1)
    assert (await parked).remark == "woken"
    assert (await conn.send(request(5), 1)).code == 29
    boom = await conn.send(request(6), 1)
    assert boom.code == 1 and "kaput" in (boom.remark or "")
    assert (await conn.send(request(99), 1)).code == 3
    await conn.send(request(7), 1)
    deadline = asyncio.get_running_loop().time() + 5
    while not back and asyncio.get_running_loop().time() < deadline:  # the oneway goes out after the answer
        await asyncio.sleep(0)  # sleep-ok: a loop turn of a wait with a deadline
    assert back == [("127.0.0.1:10911", 39)]  # port-ok: data, nothing binds it


async def test_the_guard_refuses_before_any_handler_and_timeouts_are_reported() -> None:
    d = dispatcher()
    d.guard = lambda conn, cmd: "No accessKey" if cmd.code == 1 else None
    async def nothing(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        return None

    conn = LocalConnection(d, "a:1", ("1.2.3.4", 1), nothing)
    refused = await conn.send(request(1, {"x": "y"}), 1)
    assert refused.code == 16 and refused.remark == "No accessKey"
    with pytest.raises(RemotingTimeout):
        await conn.send(request(3), 0.05)


async def test_closing_the_channel_runs_the_brokers_close_callbacks() -> None:
    closed: list[object] = []
    d = Dispatcher("x")

    def track(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        conn.add_close_callback(closed.append)
        return cmd.response()

    d.register(34, track)

    class Targets:
        def local_dispatcher(self, addr: str) -> Dispatcher | None:
            return d if addr == "local:1" else None

    async def relay(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        return None

    chans = ChannelSet(Targets(), ("1.1.1.1", 1), relay)
    assert (await chans.invoke("local:1", request(34))).code == 0
    await chans.close()
    assert len(closed) == 1 and not closed[0].is_open  # type: ignore[attr-defined]
    with pytest.raises(TransportError):
        await chans.invoke("127.0.0.1:1", request(34), 1)  # nothing listens there
    await chans.close()


async def test_a_remote_broker_answers_over_tcp_and_a_silent_one_times_out() -> None:
    """Cluster mode: the same commands over a socket to a remoting server (answers matched by opaque; a request
    with no answer fails after its timeout, the channel keeps serving)."""
    from brokerd.remoting.server import RemotingServer

    d = Dispatcher("remote")
    d.register(1, lambda conn, cmd: cmd.response(remark=f"hello {cmd.ext['x']}"))
    d.register(3, lambda conn, cmd: asyncio.get_running_loop().create_future())  # never answered
    server = RemotingServer(d, host="127.0.0.1", port=0)
    await server.start()

    class NoLocal:
        def local_dispatcher(self, addr: str) -> Dispatcher | None:
            return None

    async def relay(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        return None

    chans = ChannelSet(NoLocal(), ("1.1.1.1", 1), relay)
    addr = f"127.0.0.1:{server.port}"
    try:
        answers = await asyncio.gather(*(chans.invoke(addr, request(1, {"x": str(i)}), 2) for i in range(20)))
        assert [a.remark for a in answers] == [f"hello {i}" for i in range(20)]
        with pytest.raises(TransportError) as e:
            await chans.invoke(addr, request(3), 0.05)
        assert e.value.timeout
        assert (await chans.invoke(addr, request(1, {"x": "again"}), 2)).remark == "hello again"
    finally:
        await chans.close()
        await server.stop(0)


async def test_a_send_goes_to_the_dispatchers_lane_as_its_frame_and_what_the_lane_leaves_to_the_handler() -> None:
    """As a socket read: the lane gets the send's encoded frame (its answer frame decoded for the caller, no loop
    turn); a frame it stops at, and every other request, reach the handler as a command."""
    from brokerd.remoting.codec import FrameDecoder

    d = dispatcher()
    seen: list[tuple[int, dict[str, str], bytes | None]] = []

    def lane(conn: Connection, buf: Any, pos: int, out: list[Any]) -> int:
        cmd = FrameDecoder().feed(bytes(buf[pos:]))[0]
        if cmd.ext.get("a") == "ToPython":
            return pos
        seen.append((cmd.code, cmd.ext, cmd.body))
        out.append(encode(cmd.response(ext={"queueOffset": "7", "remote": conn.remote_addr[0]})))
        return len(buf)

    d.lane = lane
    d.register(310, lambda conn, cmd: cmd.response(remark="python"))

    async def relay(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        return None

    conn = LocalConnection(d, "a:1", ("10.1.1.1", 5), relay)
    res = conn.start(request(310, {"a": "T", "i": "UNIQ_KEY\x01x\x02"}, b"body"))
    assert isinstance(res, RemotingCommand) and res.ext == {"queueOffset": "7", "remote": "10.1.1.1"}
    assert seen == [(310, {"a": "T", "i": "UNIQ_KEY\x01x\x02"}, b"body")]
    assert (await conn.send(request(310, {"a": "ToPython"}, b"b"), 1)).remark == "python"
    assert (await conn.send(request(1, {"x": "y"}), 1)).body == b"view-y"  # not a send: never offered to the lane
    assert len(seen) == 1 and not conn.pending
