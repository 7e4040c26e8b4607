"""The SEND_BATCH_MESSAGE body (spec §3.7): entries of totalsize, magic, crc, flag, body, properties."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Final

from brokerd.message.properties import decode_properties, encode_properties

_BATCH_HEAD: Final = struct.Struct(">iiiii")  # totalsize, magic, crc, flag, bodylen
_I16: Final = struct.Struct(">h")


def parse_batch_body(body: bytes | bytearray | memoryview) -> list[tuple[int, bytes, dict[str, str]]]:
    """Split a SEND_BATCH_MESSAGE body into (flag, body, properties) triples. Raises ValueError."""
    out: list[tuple[int, bytes, dict[str, str]]] = []
    pos = 0
    n = len(body)
    while pos < n:
        if pos + _BATCH_HEAD.size + 2 > n:
            raise ValueError(f"truncated batch entry at {pos}")
        total, _magic, _crc, flag, blen = _BATCH_HEAD.unpack_from(body, pos)
        if total < _BATCH_HEAD.size + 2 or pos + total > n or blen < 0:
            raise ValueError(f"bad batch entry size {total} at {pos}")
        bpos = pos + _BATCH_HEAD.size
        if bpos + blen + 2 > pos + total:
            raise ValueError(f"batch entry body overruns entry at {pos}")
        plen = _I16.unpack_from(body, bpos + blen)[0]
        if plen < 0 or bpos + blen + 2 + plen != pos + total:
            raise ValueError(f"batch entry lengths disagree with size {total} at {pos}")
        ppos = bpos + blen + 2
        out.append((flag, bytes(body[bpos : bpos + blen]), decode_properties(bytes(body[ppos : ppos + plen]))))
        pos += total
    return out


def encode_batch_body(msgs: Iterable[tuple[int, bytes, Mapping[str, str]]]) -> bytes:
    """Encode (flag, body, properties) triples as a batch body (magic and CRC 0, like the Java client)."""
    parts: list[bytes] = []
    for flag, body, props in msgs:
        p = encode_properties(props)
        total = _BATCH_HEAD.size + len(body) + 2 + len(p)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, flag, len(body)) + body + _I16.pack(len(p)) + p)
    return b"".join(parts)
