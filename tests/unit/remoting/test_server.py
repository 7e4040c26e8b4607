"""Remoting server/client over real loopback sockets: dispatch, errors, one-way, bidirectional requests, bad input."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import pathlib
import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerd.remoting import Connection, Dispatcher, RemotingClient, RemotingCommand, RemotingServer, encode, request
from brokerd.remoting.codec import FrameDecoder
from brokerd.remoting.connection import FULL_READ


def make_dispatcher(seen: list[RemotingCommand]) -> Dispatcher:
    d = Dispatcher("test")

    def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd)
        return cmd.response(ext={"echo": cmd.ext.get("v", "")}, body=cmd.body)

    async def slow(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.05)  # sleep-ok: simulates a slow processor
        return cmd.response(ext={"slow": "1"})

    def boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("kaput")

    def needs_int(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ext={"n": str(cmd.int_field("n"))})

    async def ask_back(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        resp = await conn.request(request(500, {"q": "ping"}), timeout=2)
        return cmd.response(ext={"client_said": resp.ext["a"]})

    d.register_all({1: echo, 2: slow, 3: boom, 4: needs_int, 5: ask_back})
    return d


@pytest.fixture
async def server():
    seen: list[RemotingCommand] = []
    srv = RemotingServer(make_dispatcher(seen), host="127.0.0.1", port=0)
    await srv.start()
    srv.seen = seen  # type: ignore[attr-defined]
    yield srv
    await srv.stop(grace=1)


async def raw_exchange(port: int, data: bytes, expect: int) -> list[RemotingCommand]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(data)
    dec, out = FrameDecoder(), []
    try:
        while len(out) < expect:
            chunk = await asyncio.wait_for(r.read(65536), 5)
            if not chunk:
                break
            out += dec.feed(chunk)
    finally:
        w.close()
    return out


async def test_a_client_that_does_not_read_its_answers_is_not_read_either(server: RemotingServer) -> None:
    """Memory stays bounded: once a connection's answers back up, the server stops reading its requests (they
    wait in the client's socket); it reads on when the client reads its answers."""
    n, body = 400, b"b" * 65536
    r, w = await asyncio.open_connection("127.0.0.1", server.port)
    data = b"".join(encode(dataclasses.replace(request(1, {"v": str(i)}, body), opaque=i)) for i in range(n))
    w.write(data)
    seen = server.seen  # type: ignore[attr-defined]
    deadline = asyncio.get_running_loop().time() + 10
    conn = None
    while conn is None or conn.transport is None or conn.transport.is_reading():
        assert asyncio.get_running_loop().time() < deadline, "the server never stopped reading"
        await asyncio.sleep(0.01)  # sleep-ok: polling a condition with a deadline
        conn = next(iter(server.connections), None)
    assert len(seen) < n // 2  # most requests are still in the sockets, not in the server's memory
    dec, out = FrameDecoder(), []
    while len(out) < n:
        chunk = await asyncio.wait_for(r.read(1 << 20), 10)
        assert chunk
        out += dec.feed(chunk)
    assert [c.opaque for c in out] == list(range(n)) and len(seen) == n
    w.close()


async def test_request_response_and_pipelining(server: RemotingServer) -> None:
    client = RemotingClient()
    try:
        addr = f"127.0.0.1:{server.port}"
        resps = await asyncio.gather(*[client.invoke(addr, request(1, {"v": str(i)}, body=b"b%d" % i))
                                       for i in range(200)])
        assert [r.ext["echo"] for r in resps] == [str(i) for i in range(200)]
        assert all(r.body == b"b%d" % i for i, r in enumerate(resps))
        slow, fast = await asyncio.gather(client.invoke(addr, request(2)), client.invoke(addr, request(1)))
        assert slow.ext == {"slow": "1"} and fast.code == 0
    finally:
        await client.close()


async def test_unknown_code_answers_3_and_exception_answers_1(server: RemotingServer) -> None:
    client = RemotingClient()
    addr = f"127.0.0.1:{server.port}"
    try:
        r = await client.invoke(addr, request(777))
        assert r.code == 3 and "777" in (r.remark or "")
        r = await client.invoke(addr, request(3))
        assert r.code == 1 and "kaput" in (r.remark or "")
        r = await client.invoke(addr, request(4, {"n": "x1"}))
        assert r.code == 29 and "'n'" in (r.remark or "")
        r = await client.invoke(addr, request(1, {"v": "still alive"}))
        assert r.ext["echo"] == "still alive"
    finally:
        await client.close()


async def test_oneway_is_never_answered(server: RemotingServer) -> None:
    oneway = encode(RemotingCommand(code=1, opaque=1, flag=2, ext={"v": "ow"}))
    unknown_oneway = encode(RemotingCommand(code=999, opaque=2, flag=2))
    twoway = encode(RemotingCommand(code=1, opaque=3, ext={"v": "tw"}))
    got = await raw_exchange(server.port, oneway + unknown_oneway + twoway, expect=1)
    assert [c.opaque for c in got] == [3]
    assert any(c.ext.get("v") == "ow" for c in server.seen)  # type: ignore[attr-defined]


async def test_server_can_send_requests_to_the_client(server: RemotingServer) -> None:
    d = Dispatcher("client")
    d.register(500, lambda conn, cmd: cmd.response(ext={"a": "pong"}))
    client = RemotingClient(dispatcher=d)
    try:
        r = await client.invoke(f"127.0.0.1:{server.port}", request(5))
        assert r.ext["client_said"] == "pong"
    finally:
        await client.close()


async def test_malformed_frame_closes_only_that_connection(server: RemotingServer) -> None:
    client = RemotingClient()
    addr = f"127.0.0.1:{server.port}"
    try:
        assert (await client.invoke(addr, request(1, {"v": "before"}))).code == 0
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(struct.pack(">ii", 12, 8) + b"not json")
        assert await asyncio.wait_for(r.read(), 5) == b""  # closed by the server
        w.close()
        assert (await client.invoke(addr, request(1, {"v": "after"}))).ext["echo"] == "after"
    finally:
        await client.close()


async def test_request_timeout_and_connect_failure() -> None:
    from brokerd.remoting import ConnectionClosed, RemotingTimeout

    d = Dispatcher("mute")

    async def never(conn: Connection, cmd: RemotingCommand) -> None:
        await asyncio.Event().wait()

    d.register(1, never)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    await srv.start()
    port = srv.port
    client = RemotingClient()
    try:
        with pytest.raises(RemotingTimeout):
            await client.invoke(f"127.0.0.1:{port}", request(1), timeout=0.2)
    finally:
        await client.close()
        await srv.stop(grace=0.1)
    with pytest.raises(ConnectionClosed):
        await RemotingClient().invoke(f"127.0.0.1:{port}", request(1), timeout=0.5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(min_size=1, max_size=300))
async def test_fuzzed_garbage_never_hurts_other_connections(server: RemotingServer, junk: bytes) -> None:
    client = RemotingClient()
    try:
        _, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(junk)
        await w.drain()
        w.close()
        r = await client.invoke(f"127.0.0.1:{server.port}", request(1, {"v": "ok"}))
        assert r.ext["echo"] == "ok"
    finally:
        await client.close()


async def test_a_frame_cut_between_reads_survives_other_connections_reads(server: RemotingServer) -> None:
    """Every connection's reads land in one buffer per loop: what a read leaves of a frame must be kept apart, as
    another connection's read in between overwrites that buffer."""
    body = bytes(range(256)) * 64
    frame = encode(request(1, {"v": "cut"}, body=body))
    r, w = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        w.write(frame[:9000])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not any(c.buffered == 9000 for c in server.connections):
            assert loop.time() < deadline, "the server did not read the frame's first part"
            await asyncio.sleep(0.005)  # sleep-ok: polling a condition with a deadline
        other = await raw_exchange(server.port, encode(request(1, {"v": "other"}, body=body[::-1])), 1)
        assert other[0].body == body[::-1]  # 16 KiB read into the buffer over the first part's 9,000 bytes
        w.write(frame[9000:])
        dec, got = FrameDecoder(), []
        while not got:
            chunk = await asyncio.wait_for(r.read(65536), 5)
            assert chunk, "the server closed the connection: the frame's first part was lost"
            got += dec.feed(chunk)
        assert got[0].ext["echo"] == "cut" and got[0].body == body
    finally:
        w.close()


async def test_tests_run_on_uvloop_like_the_daemons() -> None:
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


async def test_answers_queued_to_go_out_soon_are_sent_before_the_connection_closes() -> None:
    """``write_soon`` queues answers for one write per connection; a connection closed before that write (a broker
    being removed) sends them first."""
    d = Dispatcher("soon")

    def later(conn: Connection, cmd: RemotingCommand) -> None:
        def answer_then_close() -> None:  # outside any read: the queued frames would go out at the next loop turn
            conn.write_soon([encode(cmd.response(ext={"late": "1"}))])
            conn.close()

        asyncio.get_running_loop().call_soon(answer_then_close)

    d.register(7, later)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    await srv.start()
    try:
        got = await raw_exchange(srv.port, encode(dataclasses.replace(request(7, {}), opaque=42)), 1)
        assert [(c.opaque, c.ext.get("late")) for c in got] == [(42, "1")]
    finally:
        await srv.stop(grace=1)


FLOOD = """
import socket, sys, threading
frames = open(sys.argv[2], "rb").read() * 64
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)  # a deep backlog, always ready to be read
s.connect(("127.0.0.1", int(sys.argv[1])))
threading.Thread(target=lambda: [None for _ in iter(lambda: s.recv(1 << 20), b"")], daemon=True).start()
while True:
    s.sendall(frames)
"""


async def test_a_flooding_connection_is_read_in_turn_with_the_others(tmp_path: pathlib.Path) -> None:
    """A connection whose socket never empties is read a few times per loop turn, not until its backlog is gone:
    another connection's request is handled after a few of the flood's reads. (libuv reads a socket up to 32 times
    per wake-up, 8 MB with uvloop's buffer: a flooding client's backlog was handled while every other waited.)"""
    order: list[str] = []
    d = Dispatcher("turns")

    def note(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        order.append(cmd.ext["who"])
        hashlib.sha256((cmd.body or b"") * 4).digest()  # slower than the flood: its socket stays deep
        return cmd.response()

    d.register(7, note)
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    await srv.start()
    flood = tmp_path / "flood"
    flood.write_bytes(encode(request(7, {"who": "a"}, b"x" * 60_000)))
    per_read = FULL_READ // len(flood.read_bytes()) + 1
    client = RemotingClient()
    addr = f"127.0.0.1:{srv.port}"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", FLOOD, str(srv.port), str(flood))
    try:
        assert (await client.invoke(addr, request(7, {"who": "warm"}))).code == 0  # b's connection is open
        deadline = asyncio.get_running_loop().time() + 30
        while order.count("a") < 200:  # the flood is under way
            assert asyncio.get_running_loop().time() < deadline, "the flood never started"
            await asyncio.sleep(0.001)  # sleep-ok: polling a condition with a deadline
        ahead = []
        for i in range(10):
            before = len(order)
            assert (await client.invoke(addr, request(7, {"who": f"b{i}"}), timeout=10)).code == 0
            ahead.append(order.index(f"b{i}") - before)
        # b's request is read in the turn after the one it arrived in: behind READS_PER_TURN (4) of the flood's reads
        # at most, not libuv's 32 (measured: 17 requests, against 136 without the turns)
        assert max(ahead) <= 8 * per_read, f"flood requests handled before each of b's: {ahead}"
    finally:
        proc.kill()
        await proc.wait()
        await client.close()
        await srv.stop(grace=0.1)
