"""The hot answers written as protobuf bytes directly (a SendMessageResponse), without building message objects
first: the same bytes upb would serialise (proto3: a field at its default value is left out). Pure; the classes
in ``pb`` stay the reference (tests/unit/proxy/test_wire.py parses these bytes with them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from brokerd.proxy.codes import Code


@dataclass(frozen=True, slots=True)
class Encoded:
    """An answer already serialised, and the status code it carries (the request counters)."""

    code: Code
    data: bytes


def _varint(n: int) -> bytes:
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF  # int64 / enum: two's complement, ten bytes
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(tag: int, data: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(data)) + data


def _str(tag: int, text: str) -> bytes:
    return _len(tag, text.encode()) if text else b""


def status(code: int, message: str) -> bytes:
    """A Status message's bytes (code = 1, message = 2)."""
    return (b"\x08" + _varint(code) if code else b"") + _str(0x12, message)


_OK_STATUS: Final = status(Code.OK, "OK")


@dataclass(frozen=True, slots=True)
class SendEntry:
    code: int
    message: str
    message_id: str = ""
    transaction_id: str = ""
    offset: int = 0
    recall_handle: str = ""


def send_entry(e: SendEntry) -> bytes:
    """A SendResultEntry: status = 1, message_id = 2, transaction_id = 3, offset = 4, recall_handle = 5."""
    st = _OK_STATUS if e.code == Code.OK and e.message == "OK" else status(e.code, e.message)
    return b"".join((_len(0x0A, st), _str(0x12, e.message_id), _str(0x1A, e.transaction_id),
                     b"\x20" + _varint(e.offset) if e.offset else b"", _str(0x2A, e.recall_handle)))


def send_response(code: int, message: str, entries: list[SendEntry]) -> bytes:
    """A SendMessageResponse: status = 1, entries = 2."""
    st = _OK_STATUS if code == Code.OK and message == "OK" else status(code, message)
    return _len(0x0A, st) + b"".join(_len(0x12, send_entry(e)) for e in entries)
