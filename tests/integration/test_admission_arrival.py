"""A send's time in the broker counts from when its bytes became readable: a send that waited
waitTimeMillsInSendQueue since then (a paused connection, a busy loop, a flush that does not come back) is answered
SYSTEM_BUSY and never stored, by the C lane and the Python path alike. In-process brokers on real sockets; the
waits are made long (the config's 1 s) and exceeded on purpose, so no outcome depends on the machine's speed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from brokerd.broker import Broker
from brokerd.broker_config import BrokerConfig
from brokerd.message import encode_properties
from brokerd.metadata.topic import TopicConfig
from brokerd.native import native
from brokerd.remoting import RemotingClient, RemotingCommand, RemotingServer, encode, encode_binary, request
from brokerd.remoting.codec import FrameDecoder
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.connection import Connection
from tests.support import DiskFault, kernel_stamps_live

WAIT_MS = 1000
LANES = [pytest.param(True, id="lane", marks=pytest.mark.skipif(native is None, reason="no C lane")),
         pytest.param(False, id="python")]


def send_frame(opaque: int, body: bytes = b"x" * 100, binary: bool = False) -> bytes:
    ext = dict(zip("abcdefghijklm", ("pg", "Arrival", "TBW102", "4", str(opaque % 4), "0", "1700000000123", "0",
                                       encode_properties({"UNIQ_KEY": f"A{opaque:031d}"}).decode(), "0", "false", "16",
                                       "false"), strict=True))  # fmt: skip
    cmd = request(310, ext, body)
    cmd.opaque = opaque
    return encode_binary(cmd) if binary else encode(cmd)


@asynccontextmanager
async def broker(root: Path, lane: bool, **cfg: Any) -> AsyncIterator[tuple[Broker, RemotingServer]]:
    conf = BrokerConfig(store_path_root_dir=str(root), listen_port=30911, broker_name="arrival",  # port-ok: not bound
                        wait_time_mills_in_send_queue=WAIT_MS, max_hash_slot_num=5000, max_index_num=20000, **cfg)
    b = Broker(conf, RemotingClient(), namesrv_addrs=[])
    await b.start()
    b.meta.topics.update(TopicConfig("Arrival", 4, 4))
    if not lane:
        b.dispatcher.lane = None
    srv = RemotingServer(b.dispatcher, "127.0.0.1", 0)
    await srv.start()
    deadline = time.monotonic() + 10  # the listener asked for stamps: on once the kernel's work item has run
    while not kernel_stamps_live():
        assert time.monotonic() < deadline, "the kernel never stamped received packets"
        await asyncio.sleep(0.01)  # sleep-ok: polling the kernel's switch, with a deadline
    try:
        yield b, srv
    finally:
        await srv.stop(grace=1.0)
        await b.shutdown()


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.answers: dict[int, RemotingCommand] = {}

    async def answered(self, opaques: range, timeout: float = 10.0) -> list[RemotingCommand]:
        async def read() -> None:
            while not all(o in self.answers for o in opaques):
                for c in self.decoder.feed(await self.reader.read(65536)):
                    self.answers[c.opaque] = c
        await asyncio.wait_for(read(), timeout)
        return [self.answers[o] for o in opaques]


async def connect(srv: RemotingServer) -> tuple[Client, Connection]:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    deadline = time.monotonic() + 5
    while not srv.connections:
        assert time.monotonic() < deadline, "the server never saw the connection"
        await asyncio.sleep(0.005)  # sleep-ok: polling for the accept, with a deadline
    return Client(reader, writer), next(iter(srv.connections))


async def until_elapsed(since: float, seconds: float) -> None:
    """Let ``seconds`` pass since ``since`` (the wait is what the test is about)."""
    while time.monotonic() - since < seconds:
        await asyncio.sleep(0.02)  # sleep-ok: the test needs this much time to pass


def stored(b: Broker) -> int:
    return b.store.max_phy_offset


@pytest.mark.parametrize("lane", LANES)
async def test_sends_that_waited_in_a_paused_connection_are_refused_and_not_stored(tmp_path: Path,
                                                                                   lane: bool) -> None:
    async with broker(tmp_path, lane) as (b, srv):
        client, conn = await connect(srv)
        client.writer.write(send_frame(1))  # the topic's first send (Python creates the first segment)
        assert [a.code for a in await client.answered(range(1, 2))] == [0]
        before = stored(b)
        conn.hold_reading()  # what flow control does: the sends wait in the socket, readable
        sent = time.monotonic()
        client.writer.write(b"".join(send_frame(i, binary=i % 2 == 0) for i in range(2, 8)))
        await until_elapsed(sent, WAIT_MS / 1000 + 0.1)
        conn.release_reading()
        refused = await client.answered(range(2, 8))
        assert {a.code for a in refused} == {ResponseCode.SYSTEM_BUSY}
        for a in refused:
            assert a.remark is not None and a.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control")
            waited = int(a.remark.split("period in queue: ")[1].split("ms")[0])
            assert WAIT_MS + 100 <= waited < WAIT_MS + 5000  # from when they were readable, not from the read
        assert stored(b) == before and b.send_admission.refused["timeout_clean_queue"] == 6
        assert b.stats.msgs_in == 1
        client.writer.write(send_frame(8))  # a fresh send on the same connection is stored
        assert [a.code for a in await client.answered(range(8, 9))] == [0]
        assert stored(b) > before
        client.writer.close()


@pytest.mark.parametrize("lane", LANES)
async def test_sends_that_waited_behind_a_busy_loop_are_refused_and_not_stored(tmp_path: Path, lane: bool) -> None:
    """The loop blocked (a long callback): what arrived meanwhile is refused once the loop gets to it."""
    async with broker(tmp_path, lane) as (b, srv):
        client, _conn = await connect(srv)
        client.writer.write(send_frame(1))
        assert [a.code for a in await client.answered(range(1, 2))] == [0]
        before = stored(b)
        loop = asyncio.get_running_loop()
        blocked = loop.create_future()

        def block() -> None:  # the broker's loop is this loop: the sends arrive, then a callback holds it
            client.writer.write(b"".join(send_frame(i) for i in range(2, 5)))
            blocked.set_result(None)
            time.sleep(WAIT_MS / 1000 + 0.1)  # sleep-ok: the stall under test

        loop.call_soon(block)
        await blocked
        refused = await client.answered(range(2, 5))
        assert [a.code for a in refused] == [ResponseCode.SYSTEM_BUSY] * 3
        assert stored(b) == before
        client.writer.close()


@pytest.mark.parametrize("lane", LANES)
async def test_a_flush_that_does_not_come_back_refuses_new_sends_and_stores_none_of_them(
        tmp_path: Path, lane: bool, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """SYNC_FLUSH with the disk's flushes parked: once the oldest stored send arrived waitTimeMillsInSendQueue ago,
    new sends are refused at once (a new one would wait as long) and not stored; the parked flush comes back, its
    sends are answered, and sends are stored again."""
    async with broker(tmp_path, lane, flush_disk_type="SYNC_FLUSH") as (b, srv):
        client, _conn = await connect(srv)
        client.writer.write(send_frame(1))
        assert [a.code for a in await client.answered(range(1, 2))] == [0]
        disk = DiskFault(b.store, monkeypatch).stall()
        sent = time.monotonic()
        client.writer.write(b"".join(send_frame(i) for i in range(2, 5)))
        deadline = time.monotonic() + 5
        while b.send_admission.pending < 3:
            assert time.monotonic() < deadline, "the sends were not stored"
            await asyncio.sleep(0.01)  # sleep-ok: polling for the stores, with a deadline
        waiting = stored(b)
        await until_elapsed(sent, WAIT_MS / 1000 + 0.1)
        client.writer.write(b"".join(send_frame(i) for i in range(5, 9)))
        refused = await client.answered(range(5, 9))
        assert [a.code for a in refused] == [ResponseCode.SYSTEM_BUSY] * 4
        assert all((a.remark or "").startswith("[TIMEOUT_CLEAN_QUEUE]") for a in refused)
        assert stored(b) == waiting and b.send_admission.refused["flush_clean_queue"] == 4
        assert not any(o in client.answers for o in range(2, 5))  # still waiting for their flush
        disk.release()
        assert [a.code for a in await client.answered(range(2, 5))] == [0, 0, 0]
        client.writer.write(send_frame(9))
        assert [a.code for a in await client.answered(range(9, 10))] == [0]
        assert stored(b) > waiting
        client.writer.close()


class LateConnection(Connection):
    """Every read arrived ``late`` seconds before it is handled (as if it waited in its socket that long)."""

    late = 0.0

    def _handle_read(self, data: Any) -> None:
        self.arrived -= self.late
        super()._handle_read(data)


@pytest.mark.skipif(native is None, reason="no C lane")
@pytest.mark.parametrize("binary", [0.0, 0.5])
async def test_sends_that_arrived_too_long_ago_get_the_same_answers_from_the_lane_and_python(
        tmp_path: Path, binary: float) -> None:  # fmt: skip
    """Every kind of request, each read 1.5 s after it arrived: every send is answered SYSTEM_BUSY by the lane in C
    exactly as by the Python processor (one-way ones unanswered, other requests served), and nothing is stored."""
    from tests.integration.test_send_lane import Transport, answers, feed, mixed_stream, records, start_broker

    frames = mixed_stream(23, 200, binary)
    out = {}
    for name, lane in (("lane", True), ("python", False)):
        b, _, _ = await start_broker(tmp_path / name, lane, broker_fast_failure_enable=True,
                                     wait_time_mills_in_send_queue=WAIT_MS)
        try:
            conn, tr = LateConnection(b.dispatcher), Transport()
            conn.connection_made(tr)  # type: ignore[arg-type]
            conn.late = WAIT_MS / 1000 + 0.5
            feed(conn, frames, 7)
            await asyncio.sleep(0)  # sleep-ok: one loop pass for answers queued to the end of a read
            got = answers(tr)
            busy = {o for o, (code, _r, _e) in got.items() if code == ResponseCode.SYSTEM_BUSY}
            remarks = {(got[o][1] or "").split(" period in queue:")[0] for o in busy}
            out[name] = (set(got), busy, remarks, records(b), dict(b.send_admission.refused))
        finally:
            await b.shutdown()
    assert out["lane"][:3] == out["python"][:3]
    assert out["lane"][2] == {"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while,"}
    assert len(out["lane"][1]) > 120 and out["lane"][3] == out["python"][3] == []  # nothing stored
    assert out["lane"][4] == out["python"][4] and out["lane"][4]["timeout_clean_queue"] >= len(out["lane"][1])
