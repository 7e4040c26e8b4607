"""The fault-injecting TCP proxy (the unprivileged network): forwarding, one-way drop, heal, delay, refuse."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.chaos.harness.net import CLIENT
from tests.chaos.harness.proxy import ProxyHub
from tests.support import free_port


@pytest.fixture()
def echo() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    srv.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)


@pytest.fixture()
def hub() -> Iterator[ProxyHub]:
    h = ProxyHub(seed=1)
    yield h
    h.close()


def _roundtrip(port: int, payload: bytes = b"ping", timeout: float = 2.0) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t = time.monotonic()
        s.sendall(payload)
        return s.recv(4096), time.monotonic() - t


def test_forwards_and_drops_one_way_until_healed(echo: int, hub: ProxyHub) -> None:
    listen = free_port()
    link = hub.add(CLIENT, "n0", listen, ("127.0.0.1", echo))
    assert _roundtrip(listen)[0] == b"ping"
    hub.set_drop(CLIENT, "n0")
    with pytest.raises(TimeoutError):
        _roundtrip(listen, timeout=0.5)
    assert link.dropped[0] == 4 and link.faults.drop_up and not link.faults.drop_down
    hub.heal()
    assert _roundtrip(listen)[0] == b"ping"


def test_delay_holds_each_chunk(echo: int, hub: ProxyHub) -> None:
    listen = free_port()
    link = hub.add(CLIENT, "n0", listen, ("127.0.0.1", echo))
    link.faults.delay_ms, link.faults.jitter_ms = 100.0, 0.0
    data, took = _roundtrip(listen)
    assert data == b"ping" and took >= 0.19  # held both ways


def test_refuse_resets_connections(echo: int, hub: ProxyHub) -> None:
    listen = free_port()
    link = hub.add(CLIENT, "n0", listen, ("127.0.0.1", echo))
    hub.refuse([link])
    with pytest.raises((ConnectionError, TimeoutError, OSError)):
        data, _ = _roundtrip(listen, timeout=1.0)
        if not data:
            raise ConnectionResetError("closed")
