"""The stored-record layout (spec §3.1) that the commit log holds and PULL returns: encoding, decoding and
validation.

All integers are big-endian. Records are written with IPv4 hosts and magic V1 (1-byte topic length) unless the
topic is longer than 127 bytes (then V2, 2-byte topic length). The decoder also reads IPv6 hosts (sysflag bits
0x10 / 0x20).
"""

from __future__ import annotations

import mmap
import socket
import struct
import zlib
from typing import Final

from brokerd.message.constants import (
    BORNHOST_V6_FLAG,
    HEADER_V4,
    HEADER_V4_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_SIZE,
    RECORD_OVERHEAD_V1,
    STOREHOSTADDRESS_V6_FLAG,
)
from brokerd.message.ids import ipv4_bytes, offset_msg_id, offset_msg_id_v6
from brokerd.message.model import MessageExt, MessageInner
from brokerd.message.properties import decode_properties, encode_properties

_SIZE_MAGIC: Final = struct.Struct(">ii")
_I16: Final = struct.Struct(">h")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_FIXED1: Final = struct.Struct(">iiiiiqqiq")  # up to BORNTIMESTAMP (48 bytes)

ReadBuf = bytes | bytearray | memoryview | mmap.mmap
"""Anything records can be decoded from (slicing yields bytes, indexing an int)."""


class CorruptRecordError(ValueError):
    """A stored record failed validation (bad magic, size, lengths or body CRC)."""


# ---------------------------------------------------------------- encoding


class RecordEncoder:
    """Encodes stored records into a caller-owned buffer; caches per-topic and per-host bytes.

    Single-threaded use only (the caches are plain dicts).
    """

    __slots__ = ("topics", "hosts")

    def __init__(self) -> None:
        self.topics: dict[str, tuple[bytes, int]] = {}
        self.hosts: dict[str, bytes] = {}

    def topic_prefix(self, topic: str) -> tuple[bytes, int]:
        """(length prefix + UTF-8 topic, magic) for a topic."""
        hit = self.topics.get(topic)
        if hit is None:
            raw = topic.encode("utf-8")
            if len(raw) > 127:
                if len(raw) > 32767:
                    raise ValueError("topic too long")
                hit = (_I16.pack(len(raw)) + raw, MAGIC_V2)
            else:
                hit = (bytes((len(raw),)) + raw, MAGIC_V1)
            if len(self.topics) < 100_000:
                self.topics[topic] = hit
        return hit

    def host(self, ip: str) -> bytes:
        hit = self.hosts.get(ip)
        if hit is None:
            hit = ipv4_bytes(ip)
            if len(self.hosts) < 100_000:
                self.hosts[ip] = hit
        return hit

    def encode_into(
        self,
        buf: bytearray | memoryview,
        pos: int,
        msg: MessageInner,
        props: bytes,
        queue_offset: int,
        phys_offset: int,
        store_timestamp: int,
        store_host: tuple[str, int],
    ) -> int:
        """Write the record at ``buf[pos:]`` and return its size (the caller checked the space)."""
        topic_prefix, magic = self.topic_prefix(msg.topic)
        body = msg.body
        blen = len(body)
        tail = topic_prefix + _I16.pack(len(props)) + props
        size = HEADER_V4_SIZE + blen + len(tail)
        born = msg.born_host
        HEADER_V4.pack_into(
            buf, pos, size, magic, zlib.crc32(body) & 0x7FFFFFFF, msg.queue_id, msg.flag,
            queue_offset, phys_offset, msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG),
            msg.born_timestamp, self.host(born[0]), born[1], store_timestamp, self.host(store_host[0]),
            store_host[1], msg.reconsume_times, msg.prepared_transaction_offset, blen,
        )  # fmt: skip
        start = pos + HEADER_V4_SIZE
        buf[start : start + blen] = body
        buf[start + blen : pos + size] = tail
        return size


_ENCODER = RecordEncoder()


def record_size(topic: str, body_len: int, props_len: int) -> int:
    """Stored size of a record with IPv4 hosts."""
    tlen = len(topic.encode("utf-8"))
    return RECORD_OVERHEAD_V1 + body_len + tlen + props_len + (1 if tlen > 127 else 0)


def encode_record(
    msg: MessageInner,
    *,
    queue_offset: int,
    phys_offset: int,
    store_timestamp: int | None = None,
    props: bytes | None = None,
) -> bytes:
    """Encode one stored record as bytes (IPv4 hosts; V1 magic unless the topic exceeds 127 bytes).

    ``store_timestamp`` defaults to ``msg.store_timestamp``; ``props`` to the encoded ``msg.properties``.
    """
    p = encode_properties(msg.properties) if props is None else props
    if len(p) > MAX_PROPERTIES_SIZE:
        raise ValueError(f"properties too long: {len(p)} > {MAX_PROPERTIES_SIZE}")
    ts = msg.store_timestamp if store_timestamp is None else store_timestamp
    buf = bytearray(record_size(msg.topic, len(msg.body), len(p)))
    _ENCODER.encode_into(buf, 0, msg, p, queue_offset, phys_offset, ts, msg.store_host)
    return bytes(buf)


# ---------------------------------------------------------------- decoding


def _host(buf: ReadBuf, pos: int, v6: bool) -> tuple[tuple[str, int], int]:
    if v6:
        ip = socket.inet_ntop(socket.AF_INET6, bytes(buf[pos : pos + 16]))
        return (ip, _I32.unpack_from(buf, pos + 16)[0]), pos + 20
    ip = socket.inet_ntoa(bytes(buf[pos : pos + 4]))
    return (ip, _I32.unpack_from(buf, pos + 4)[0]), pos + 8


def decode_record(buf: ReadBuf, pos: int = 0) -> tuple[MessageExt, int]:
    """Decode the record at ``pos``; return it and the position after it. Raises CorruptRecordError."""
    end_buf = len(buf)
    if pos + 8 > end_buf:
        raise CorruptRecordError(f"truncated record header at {pos}")
    try:
        size, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = _FIXED1.unpack_from(buf, pos)
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise CorruptRecordError(f"bad magic {magic & 0xFFFFFFFF:#x} at {pos}")
        if size < RECORD_OVERHEAD_V1 or pos + size > end_buf:
            raise CorruptRecordError(f"bad record size {size} at {pos}")
        p = pos + _FIXED1.size
        born_host, p = _host(buf, p, bool(sysflag & BORNHOST_V6_FLAG))
        store_ts = _I64.unpack_from(buf, p)[0]
        store_host, p = _host(buf, p + 8, bool(sysflag & STOREHOSTADDRESS_V6_FLAG))
        reconsume, prep, blen = struct.unpack_from(">iqi", buf, p)
        p += 16
        body = bytes(buf[p : p + blen])
        p += blen
        if magic == MAGIC_V1:
            tlen = buf[p]
            p += 1
        else:
            tlen = _U16.unpack_from(buf, p)[0]
            p += 2
        topic = bytes(buf[p : p + tlen]).decode("utf-8", "replace")
        p += tlen
        plen = _I16.unpack_from(buf, p)[0]
        p += 2
        props = decode_properties(bytes(buf[p : p + plen])) if plen > 0 else {}
        p += max(plen, 0)
    except (struct.error, IndexError) as exc:
        raise CorruptRecordError(f"truncated record at {pos}: {exc}") from exc
    if blen < 0 or p != pos + size:
        raise CorruptRecordError(f"record lengths disagree with size {size} at {pos}")
    msg = MessageExt(
        store_size=size, magic=magic, body_crc=crc, queue_id=qid, flag=flag, queue_offset=qoff,
        commit_log_offset=phys, sys_flag=sysflag, born_timestamp=born_ts, born_host=born_host,
        store_timestamp=store_ts, store_host=store_host, reconsume_times=reconsume,
        prepared_transaction_offset=prep, body=body, topic=topic, properties=props,
        msg_id=offset_msg_id(store_host, phys) if not sysflag & STOREHOSTADDRESS_V6_FLAG else offset_msg_id_v6(store_host, phys),
    )  # fmt: skip
    return msg, pos + size


def decode_records(buf: ReadBuf) -> list[MessageExt]:
    """Decode a concatenation of records (a PULL body). Raises CorruptRecordError on trailing garbage."""
    out: list[MessageExt] = []
    pos = 0
    n = len(buf)
    while pos < n:
        msg, pos = decode_record(buf, pos)
        out.append(msg)
    return out


# ---------------------------------------------------------------- layout and validation


def record_layout(buf: ReadBuf, pos: int, size: int) -> tuple[int, int, int, int, int]:
    """Return (sys_flag, body_pos, body_len, topic_pos, topic_len) of a record; raises CorruptRecordError."""
    try:
        sysflag = _I32.unpack_from(buf, pos + 36)[0]
        p = pos + 48 + (20 if sysflag & BORNHOST_V6_FLAG else 8) + 8
        p += (20 if sysflag & STOREHOSTADDRESS_V6_FLAG else 8) + 12
        blen = _I32.unpack_from(buf, p)[0]
        body_pos = p + 4
        p = body_pos + blen
        if blen < 0 or p >= pos + size:
            raise CorruptRecordError(f"bad body length {blen} at {pos}")
        magic = _I32.unpack_from(buf, pos + 4)[0]
        if magic == MAGIC_V1:
            tlen, p = buf[p], p + 1
        else:
            tlen, p = _U16.unpack_from(buf, p)[0], p + 2
        topic_pos = p
        p += tlen
        plen = _I16.unpack_from(buf, p)[0]
    except (struct.error, IndexError) as exc:
        raise CorruptRecordError(f"truncated record at {pos}") from exc
    if plen < 0 or p + 2 + plen != pos + size:
        raise CorruptRecordError(f"record lengths disagree with size {size} at {pos}")
    return sysflag, body_pos, blen, topic_pos, tlen


def record_properties(buf: ReadBuf, pos: int = 0, size: int | None = None) -> dict[str, str]:
    """The properties of the stored record at ``pos`` (they end the record). Raises CorruptRecordError."""
    if size is None:
        size = _I32.unpack_from(buf, pos)[0]
    _, _, _, topic_pos, tlen = record_layout(buf, pos, size)
    return decode_properties(bytes(buf[topic_pos + tlen + 2 : pos + size]))


def verify_record(buf: ReadBuf, pos: int, limit: int | None = None) -> int:
    """Validate the record at ``pos`` (magic, size bounds, inner lengths, body CRC); return its size.

    ``limit`` is the exclusive end of readable data (default ``len(buf)``). Raises CorruptRecordError.
    """
    end = len(buf) if limit is None else limit
    if pos + 8 > end:
        raise CorruptRecordError(f"truncated record header at {pos}")
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise CorruptRecordError(f"bad magic {magic & 0xFFFFFFFF:#x} at {pos}")
    if size < RECORD_OVERHEAD_V1 or pos + size > end:
        raise CorruptRecordError(f"bad record size {size} at {pos}")
    _, body_pos, blen, _, _ = record_layout(buf, pos, size)
    crc = _I32.unpack_from(buf, pos + 8)[0]
    mv = memoryview(buf)
    try:
        actual = zlib.crc32(mv[body_pos : body_pos + blen]) & 0x7FFFFFFF
    finally:
        mv.release()
    if actual != crc:
        raise CorruptRecordError(f"body CRC mismatch at {pos}: stored {crc}, computed {actual}")
    return int(size)
