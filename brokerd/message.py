"""RocketMQ message model and codecs (pure, no I/O).

Serves the stored-record layout (spec §3.1) that the commit log holds and PULL returns,
the properties string (§3.4), offset message ids (§3.5) and the batch body (§3.7).

All integers are big-endian. Records are written with IPv4 hosts and magic V1 (1-byte
topic length) unless the topic is longer than 127 bytes (then V2, 2-byte topic length).
The decoder also reads IPv6 hosts (sysflag bits 0x10 / 0x20).
"""

from __future__ import annotations

import datetime as dt
import functools
import mmap
import os
import socket
import struct
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

# ---------------------------------------------------------------- constants

MAGIC_V1: Final = -626843481  # 0xDAA320A7
MAGIC_V2: Final = -626843477  # 0xDAA320AB
MAGIC_BLANK: Final = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH: Final = 8
MAX_PROPERTIES_SIZE: Final = 32767
NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
KEY_SEPARATOR: Final = " "

# MessageSysFlag (§3.2)
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
TRANSACTION_TYPE_MASK: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80
COMPRESSION_LZ4_TYPE: Final = 0x100
COMPRESSION_ZSTD_TYPE: Final = 0x200
COMPRESSION_ZLIB_TYPE: Final = 0x300
COMPRESSION_TYPE_COMPARATOR: Final = 0x700

# Well-known property keys (§3.8)
KEYS: Final = "KEYS"
TAGS: Final = "TAGS"
WAIT: Final = "WAIT"
DELAY: Final = "DELAY"
RETRY_TOPIC: Final = "RETRY_TOPIC"
REAL_TOPIC: Final = "REAL_TOPIC"
REAL_QID: Final = "REAL_QID"
TRAN_MSG: Final = "TRAN_MSG"
PGROUP: Final = "PGROUP"
MIN_OFFSET: Final = "MIN_OFFSET"
MAX_OFFSET: Final = "MAX_OFFSET"
BUYER_ID: Final = "BUYER_ID"
ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
TRANSFER_FLAG: Final = "TRANSFER_FLAG"
CORRECTION_FLAG: Final = "CORRECTION_FLAG"
MQ2_FLAG: Final = "MQ2_FLAG"
RECONSUME_TIME: Final = "RECONSUME_TIME"
MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
MSG_REGION: Final = "MSG_REGION"
TRACE_ON: Final = "TRACE_ON"
UNIQ_KEY: Final = "UNIQ_KEY"
EXTEND_UNIQ_INFO: Final = "EXTEND_UNIQ_INFO"
CONSUME_START_TIME: Final = "CONSUME_START_TIME"
INNER_NUM: Final = "INNER_NUM"
INNER_BASE: Final = "INNER_BASE"
DUP_INFO: Final = "DUP_INFO"
CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRAN_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
TRANSACTION_ID: Final = "__transactionId__"
TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
INSTANCE_ID: Final = "INSTANCE_ID"
CORRELATION_ID: Final = "CORRELATION_ID"
REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
TTL: Final = "TTL"
ARRIVE_TIME: Final = "ARRIVE_TIME"
PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
MSG_TYPE: Final = "MSG_TYPE"
CLUSTER: Final = "CLUSTER"
POP_CK: Final = "POP_CK"
POP_CK_OFFSET: Final = "POP_CK_OFFSET"
FIRST_POP_TIME: Final = "1ST_POP_TIME"
SHARDING_KEY: Final = "__SHARDINGKEY"
FORWARD_QUEUE_ID: Final = "PROPERTY_FORWARD_QUEUE_ID"
REDIRECT: Final = "REDIRECT"
INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET: Final = "INNER_MULTI_QUEUE_OFFSET"
TRACE_CONTEXT: Final = "TRACE_CONTEXT"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
TIMER_OUT_MS: Final = "TIMER_OUT_MS"
TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
TIMER_DELAY_LEVEL: Final = "TIMER_DELAY_LEVEL"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
BORN_HOST: Final = "__BORNHOST"
BORN_TIMESTAMP: Final = "BORN_TIMESTAMP"
CRC32: Final = "__CRC32#"
DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
TRANSIENT_PREFIX: Final = "__RMQ.TRANSIENT."

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
DEFAULT_DELAY_LEVELS: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# Fixed part of a V1/IPv4 record up to and including BODY LENGTH (fields 1..15 minus the body).
HEADER_V4: Final = struct.Struct(">iiiiiqqiq4siq4siiqi")
HEADER_V4_SIZE: Final = HEADER_V4.size  # 88
HEADER_V4_AFTER_MAGIC: Final = struct.Struct(">iiiqqiq4siq4siiqi")  # the same fields minus TOTALSIZE and MAGIC
RECORD_OVERHEAD_V1: Final = HEADER_V4_SIZE + 1 + 2  # 91
_BATCH_HEAD: Final = struct.Struct(">iiiii")  # totalsize, magic, crc, flag, bodylen
_SIZE_MAGIC: Final = struct.Struct(">ii")
_I16: Final = struct.Struct(">h")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


ReadBuf = bytes | bytearray | memoryview | mmap.mmap
"""Anything records can be decoded from (slicing yields bytes, indexing an int)."""


class CorruptRecordError(ValueError):
    """A stored record failed validation (bad magic, size, lengths or body CRC)."""


# ---------------------------------------------------------------- java hash / tags


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()``: signed 32-bit, over UTF-16 code units."""
    data = s.encode("utf-16-le", "surrogatepass")
    units = memoryview(data).cast("H")
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts only
        units = memoryview(data[1::2] + data[::2]).cast("H")
    h = 0
    for u in units:
        h = (31 * h + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_code_of(tags: str | None) -> int:
    """Consume-queue tags code of a TAGS value: its Java hash, 0 when absent or empty."""
    if not tags:
        return 0
    return java_string_hash(tags)


def parse_delay_levels(spec: str) -> list[int]:
    """Parse ``messageDelayLevel`` ("1s 5s ... 2h") into milliseconds; index 0 is level 1."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out: list[int] = []
    for token in spec.split():
        unit = units.get(token[-1:])
        if unit is None or not token[:-1].isdigit():
            raise ValueError(f"bad delay level {token!r}")
        out.append(int(token[:-1]) * unit)
    return out


# ---------------------------------------------------------------- properties


def encode_properties(d: Mapping[str, str | None]) -> bytes:
    """Encode properties as ``name 0x01 value 0x02`` pairs (UTF-8); None values are skipped."""
    if not d:
        return b""
    try:  # all-C fast path: str.join over the (name, value) tuples
        return ("\x02".join(map("\x01".join, d.items())) + "\x02").encode("utf-8", "replace")  # type: ignore[arg-type]
    except TypeError:  # a None (or non-str) value
        return "".join([f"{k}\x01{v}\x02" for k, v in d.items() if v is not None]).encode("utf-8", "replace")


def decode_properties(b: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """Parse a properties string like Java's ``string2messageProperties``.

    Segments split on 0x02; a segment counts only when it has a 0x01 with a non-empty
    name before it and a non-empty value after it; later duplicates win.
    """
    s = b if isinstance(b, str) else bytes(b).decode("utf-8", "replace")
    out: dict[str, str] = {}
    if not s:
        return out
    for seg in s.split("\x02"):
        k, sep, v = seg.partition("\x01")
        if sep and k and v:
            out[k] = v
    return out


def message_keys(props: Mapping[str, str]) -> list[str]:
    """Index keys of a message: KEYS split on spaces plus UNIQ_KEY (non-empty, de-duplicated)."""
    raw = props.get(KEYS)
    uniq = props.get(UNIQ_KEY)
    if raw:
        keys = raw.split(KEY_SEPARATOR) if KEY_SEPARATOR in raw else [raw]
        if "" in keys:
            keys = [k for k in keys if k]
        if uniq and uniq not in keys:
            keys.append(uniq)
        return keys
    return [uniq] if uniq else []


# ---------------------------------------------------------------- hosts and ids


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


def new_uniq_id() -> str:
    """A new UNIQ_KEY (32 uppercase hex chars), for messages that arrive without one."""
    if not _UNIQ:
        _UNIQ.append(_UniqIdGenerator())
    return _UNIQ[0].next()


# ---------------------------------------------------------------- models


@dataclass(slots=True)
class MessageInner:
    """A message about to be stored (the broker-side ``MessageExtBrokerInner``)."""

    topic: str
    queue_id: int
    body: bytes
    flag: int
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int = 0
    store_timestamp: int = 0


@dataclass(slots=True)
class MessageExt:
    """A decoded stored record."""

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)
    msg_id: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return message_keys(self.properties)

    def to_inner(self, topic: str, queue_id: int, properties: dict[str, str], sys_flag: int) -> MessageInner:
        """This stored message, to be stored again under ``topic``/``queue_id`` (delay and transaction services)."""
        return MessageInner(topic=topic, queue_id=queue_id, body=self.body, flag=self.flag, properties=properties,
                            sys_flag=sys_flag, born_timestamp=self.born_timestamp, born_host=self.born_host,
                            store_host=self.store_host, reconsume_times=self.reconsume_times,
                            tags_code=tags_code_of(properties.get(TAGS)))  # fmt: skip


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


# ---------------------------------------------------------------- record encoding


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


# ---------------------------------------------------------------- record decoding


def _host(buf: ReadBuf, pos: int, v6: bool) -> tuple[tuple[str, int], int]:
    if v6:
        ip = socket.inet_ntop(socket.AF_INET6, bytes(buf[pos : pos + 16]))
        return (ip, _I32.unpack_from(buf, pos + 16)[0]), pos + 20
    ip = socket.inet_ntoa(bytes(buf[pos : pos + 4]))
    return (ip, _I32.unpack_from(buf, pos + 4)[0]), pos + 8


_FIXED1 = struct.Struct(">iiiiiqqiq")  # up to BORNTIMESTAMP (48 bytes)


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
        msg_id=offset_msg_id(store_host, phys) if not sysflag & STOREHOSTADDRESS_V6_FLAG else _v6_msg_id(store_host, phys),
    )  # fmt: skip
    return msg, pos + size


def _v6_msg_id(host: tuple[str, int], phys: int) -> str:
    raw = socket.inet_pton(socket.AF_INET6, host[0]) + _I32.pack(host[1]) + _I64.pack(phys)
    return raw.hex().upper()


def decode_records(buf: ReadBuf) -> list[MessageExt]:
    """Decode a concatenation of records (a PULL body). Raises CorruptRecordError on trailing garbage."""
    out: list[MessageExt] = []
    pos = 0
    n = len(buf)
    while pos < n:
        msg, pos = decode_record(buf, pos)
        out.append(msg)
    return out


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


# ---------------------------------------------------------------- batch body (§3.7)


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
