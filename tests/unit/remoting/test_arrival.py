"""A request's arrival: when its bytes became readable (the kernel's receive stamp), not when the loop read them;
and reads kept past a turn's budget keep their arrival and their order (turns.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from brokerd.remoting import Connection, Dispatcher, RemotingCommand, RemotingServer, arrival, encode, request
from brokerd.remoting.arrival import ArrivalClock
from brokerd.remoting.connection import loop_turns
from tests.support import kernel_stamps_live, wait_for


def test_the_kernel_stamp_is_when_the_bytes_arrived_not_when_they_are_read() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    assert arrival.stamp_listener(srv.fileno())  # as servers do
    with srv, socket.create_connection(srv.getsockname()) as client:
        conn, _ = srv.accept()
        with conn:
            clock = ArrivalClock(conn.fileno())
            try:
                assert clock.stamped
                # The kernel turns stamping on asynchronously (a work item) when the host's first socket asks
                # for it; until then a buffer is stamped when it is read. Wait for the switch, with a deadline.
                wait_for(kernel_stamps_live, 5, "the kernel to stamp received segments")
                t0 = time.monotonic()
                client.sendall(b"x" * 100)
                t1 = time.monotonic()
                time.sleep(0.05)  # sleep-ok: the bytes wait unread
                arrived = clock.before_read()
                assert t0 - 0.002 <= arrived <= t1 + 0.002, (t0, arrived, t1)
                conn.recv(100)
                clock.after_read(False)
                client.sendall(b"y")
                assert clock.before_read() >= t1 + 0.05  # drained just now: the next bytes are new
                assert clock.peeks == 1  # the second read came within EXACT_WITHIN of one that drained the socket
            finally:
                clock.close()


async def test_a_request_that_waited_behind_a_busy_loop_carries_its_arrival() -> None:
    d = Dispatcher("arrival")
    seen: list[tuple[float, float]] = []

    def note(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append((conn.arrived, time.monotonic()))
        return cmd.response()

    d.default = note
    srv = RemotingServer(d, host="127.0.0.1", port=0)
    await srv.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    try:
        loop = asyncio.get_running_loop()
        sent: list[float] = []

        def send_then_block() -> None:
            sent.append(time.monotonic())
            writer.write(encode(request(34, {})))
            time.sleep(0.1)  # sleep-ok: the loop is held while the request waits, readable

        # The kernel turns receive stamps on asynchronously (a work item) when the host's first socket asks for
        # them; until then a read is stamped when it happens. So the request is sent again (at most 20 times)
        # until one carries the time it became readable: a broker's sockets keep stamping on for good.
        for _ in range(20):
            loop.call_soon(send_then_block)
            await reader.read(4096)
            arrived, handled = seen[-1]
            if handled - arrived >= 0.095:
                break
        assert handled - arrived >= 0.095 and abs(arrived - sent[-1]) < 0.01, (len(sent), arrived, handled)
    finally:
        writer.close()
        await srv.stop(grace=0.1)


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def writelines(self, data: list[Any]) -> None:
        self.written.append(b"".join(bytes(x) for x in data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def read(conn: Connection, data: bytes) -> float:
    """One read as uvloop does it: get_buffer, the bytes into it, buffer_updated; its arrival."""
    buf = conn.get_buffer(-1)
    buf[:len(data)] = data
    conn.buffer_updated(len(data))
    return conn.arrived


async def test_reads_past_the_turns_budget_are_kept_with_their_arrival_and_order() -> None:
    d = Dispatcher("budget")
    seen: list[tuple[str, float]] = []

    def slow(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append((cmd.ext["n"], conn.arrived))
        time.sleep(0.003)  # sleep-ok: more than a turn's handling budget (2 ms)
        return cmd.response()

    d.default = slow
    a, b = Connection(d), Connection(d)
    for c in (a, b):
        c.connection_made(Transport())  # type: ignore[arg-type]
    kept = loop_turns().kept
    read(a, encode(request(34, {"n": "a1"})))
    arrived_b1 = read(b, encode(request(34, {"n": "b1"})))
    arrived_a2 = read(a, encode(request(34, {"n": "a2"})))
    assert [n for n, _ in seen] == ["a1"] and b.backlog > 0 and a.backlog > 0  # the turn's budget is spent
    assert loop_turns().kept == kept + 2 and loop_turns().kept_bytes >= a.backlog + b.backlog
    deadline = time.monotonic() + 5
    while len(seen) < 3:
        assert time.monotonic() < deadline
        await asyncio.sleep(0)  # sleep-ok: the loop's next turns handle the kept reads
    assert seen[1:] == [("b1", arrived_b1), ("a2", arrived_a2)]  # in turn, with the arrival of their read
    assert a.backlog == b.backlog == 0


def test_a_stamped_listener_hands_its_stamps_to_every_connection_it_accepts() -> None:
    """Stamping is asked for on the listening socket, so it is on (the kernel's switch flipped) before any
    connection arrives, and an accepted socket stamps its first segment already."""
    with socket.socket() as listener, socket.socket() as client:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert arrival.stamp_listener(listener.fileno())
        client.connect(listener.getsockname())
        conn, _ = listener.accept()
        with conn:
            assert conn.getsockopt(socket.SOL_SOCKET, arrival.SO_TIMESTAMPNS) == 1
