"""Hosts and message ids: 4-byte IPv4 addresses, offset message ids (spec §3.5) and new UNIQ_KEYs."""

from __future__ import annotations

import datetime as dt
import functools
import os
import socket
import struct
import threading
import time
from typing import Final

_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


@functools.lru_cache(maxsize=1024)
def ipv4_bytes(ip: str) -> bytes:
    """4-byte address for a host string; IPv4-mapped IPv6 is unwrapped; other IPv6 → 0.0.0.0."""
    try:
        return socket.inet_aton(ip)
    except OSError:
        pass
    try:
        raw = socket.inet_pton(socket.AF_INET6, ip.split("%", 1)[0])
    except OSError:
        return b"\x00\x00\x00\x00"
    if raw[:12] == b"\x00" * 10 + b"\xff\xff":
        return raw[12:]
    return b"\x00\x00\x00\x00"


def offset_msg_id(store_host: tuple[str, int], phys_offset: int) -> str:
    """offsetMsgId: uppercase hex of store IP (4 bytes) + port (int32) + physical offset (int64)."""
    return f"{ipv4_bytes(store_host[0]).hex().upper()}{store_host[1] & 0xFFFFFFFF:08X}{phys_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def offset_msg_id_v6(host: tuple[str, int], phys: int) -> str:
    """offsetMsgId of a record stored with an IPv6 store host (16-byte address)."""
    raw = socket.inet_pton(socket.AF_INET6, host[0]) + _I32.pack(host[1]) + _I64.pack(phys)
    return raw.hex().upper()


def decode_offset_msg_id(s: str) -> tuple[str, int, int]:
    """Inverse of :func:`offset_msg_id`: (ip, port, physical offset); 32 chars = IPv4, 56 = IPv6."""
    if len(s) not in (32, 56):
        raise ValueError(f"bad offset message id length {len(s)}")
    raw = bytes.fromhex(s)
    ip_len = 4 if len(s) == 32 else 16
    ip = socket.inet_ntoa(raw[:4]) if ip_len == 4 else socket.inet_ntop(socket.AF_INET6, raw[:16])
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    return ip, port, offset


class _UniqIdGenerator:
    """UNIQ_KEY ids like the Java client: IP(4) + pid(int16) + hash(int32) + ms since month start(int32) + counter(int16)."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = (ip + struct.pack(">hi", os.getpid() & 0x7FFF, id(self) & 0x7FFFFFFF)).hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._month_start_ms = 0
        self._next_month_ms = 0

    @property
    def prefix(self) -> str:
        return self._prefix

    def _roll_month(self, now_ms: int) -> None:
        now = dt.datetime.fromtimestamp(now_ms / 1000)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + dt.timedelta(days=32)).replace(day=1)
        self._month_start_ms = int(start.timestamp() * 1000)
        self._next_month_ms = int(nxt.timestamp() * 1000)

    def next(self) -> str:
        now = time.time_ns() // 1_000_000
        with self._lock:
            if now >= self._next_month_ms:
                self._roll_month(now)
            self._counter = (self._counter + 1) & 0xFFFF
            tail = struct.pack(">iH", (now - self._month_start_ms) & 0x7FFFFFFF, self._counter)
        return self._prefix + tail.hex().upper()


_UNIQ: list[_UniqIdGenerator] = []  # created on first use (the host lookup stays out of import time)


def _generator() -> _UniqIdGenerator:
    if not _UNIQ:
        _UNIQ.append(_UniqIdGenerator())
    return _UNIQ[0]


def new_uniq_id() -> str:
    """A new UNIQ_KEY (32 uppercase hex chars), for messages that arrive without one."""
    return _generator().next()


def native_uniq_prefix() -> str:
    """The 20-character prefix of the UNIQ_KEYs the C send lane generates (its own counter, the same layout):
    this process's, with a hash field the Python generator does not use, so the two never collide."""
    prefix = _generator().prefix
    return prefix[:12] + f"{int(prefix[12:], 16) ^ 0x40000000:08X}"
