"""What a due timer becomes, pure: its message in the real topic (fired) or, due beyond the wheel's window, a copy
parked again in the timer topic (rolled), as RocketMQ's ``TimerMessageStore.convert`` builds them.

``delivery`` (from a decoded record) is the reference; ``prepare`` (the firing's hot path: from the parked record's
bytes) reads the common layout directly (V1 magic, IPv4 hosts: what this broker writes) and gives the same
message, falling back to ``decode_record`` + ``delivery`` for any other record.
"""

from __future__ import annotations

import enum
import socket
import struct
from typing import Final, Literal

from brokerd import message as m
from brokerd.message import (
    HEADER_V4,
    HEADER_V4_SIZE,
    MAGIC_V1,
    CorruptRecordError,
    MessageExt,
    MessageInner,
    decode_properties,
    decode_record,
    java_string_hash,
)
from brokerd.native import native
from brokerd.timer.core import TIMER_TOPIC

DROP: Final = None
_TIMER_TOPIC_RAW: Final = TIMER_TOPIC.encode()
_I16: Final = struct.Struct(">h")
_V6_HOSTS: Final = 0x30
_IPS: dict[bytes, str] = {}
_java_hash = native.java_hash if native is not None else java_string_hash
_PROPS_DECODE = getattr(native, "props_decode", None)
_PREPARE = getattr(native, "timer_prepare", None)


class Stale(enum.Enum):
    """The record read is not the parked message the timer entry was made for (the log was cut back under it)."""

    STALE = 0


STALE: Final = Stale.STALE


def due_of(ext: MessageExt) -> int:
    """The due time a parked record carries (its store time when it carries none that parses: fired at once)."""
    return _due(ext.properties, ext.store_timestamp)


def _due(props: dict[str, str], store_ts: int) -> int:
    raw = props.get(m.TIMER_OUT_MS, "")
    try:
        return int(raw)
    except ValueError:
        return store_ts


def delivery(ext: MessageExt, roll: bool, now_ms: int) -> MessageInner | None:
    """The message to store for the parked record ``ext``; None when it cannot be delivered (no real topic)."""
    props = dict(ext.properties)
    topic = props.get(m.REAL_TOPIC)
    if not topic:
        return DROP
    props[m.TIMER_ENQUEUE_MS] = props.get(m.TIMER_ENQUEUE_MS) or str(ext.store_timestamp)
    props[m.TIMER_DEQUEUE_MS] = str(now_ms)
    if roll:
        props[m.TIMER_ROLL_TIMES] = str(_int(props.get(m.TIMER_ROLL_TIMES)) + 1)
        return ext.to_inner(TIMER_TOPIC, 0, props, ext.sys_flag)
    qid = props.pop(m.REAL_QID, "0")
    del props[m.REAL_TOPIC]
    return ext.to_inner(topic, int(qid) if qid.isdigit() else 0, props, ext.sys_flag)


def prepare(raw: bytes, qoff: int, due: int, roll: bool, now_ms: int) -> MessageInner | None | Literal[Stale.STALE]:
    """``delivery`` of the parked record ``raw`` (the bytes read for the timer entry of queue offset ``qoff``, due
    at ``due``): STALE when it is not that parked message (not a whole record, another offset, topic or due time).
    In C when built (brokerd/csrc/timer_prepare.c); the Python code below is its reference and takes what it
    leaves."""
    if _PREPARE is not None:
        made = _PREPARE(raw, qoff, due, roll, now_ms, TIMER_TOPIC, MessageInner)
        if made is not NotImplemented:
            return STALE if made is False else made
    return prepare_python(raw, qoff, due, roll, now_ms)


def prepare_python(raw: bytes, qoff: int, due: int, roll: bool,
                   now_ms: int) -> MessageInner | None | Literal[Stale.STALE]:  # fmt: skip
    """``prepare`` in Python (the reference of the C code)."""
    n = len(raw)
    if n > HEADER_V4_SIZE + 3:
        (size, magic, _crc, _qid, flag, q, _phys, sysflag, born_ts, born_ip, born_port, store_ts, store_ip, store_port,
         reconsume, _prep, blen) = HEADER_V4.unpack_from(raw)  # fmt: skip
        p = HEADER_V4_SIZE + blen
        if magic == MAGIC_V1 and size == n and not sysflag & _V6_HOSTS and blen >= 0 and p < n:
            t_end = p + 1 + raw[p]
            plen = _I16.unpack_from(raw, t_end)[0] if t_end + 2 <= n else -1
            if plen >= 0 and t_end + 2 + plen == n:
                if q != qoff or raw[p + 1 : t_end] != _TIMER_TOPIC_RAW:
                    return STALE
                props = _properties(raw, t_end + 2)
                if _due(props, store_ts) != due:
                    return STALE
                topic = props.get(m.REAL_TOPIC)
                if not topic:
                    return DROP
                props[m.TIMER_ENQUEUE_MS] = props.get(m.TIMER_ENQUEUE_MS) or str(store_ts)
                props[m.TIMER_DEQUEUE_MS] = str(now_ms)
                if roll:
                    props[m.TIMER_ROLL_TIMES] = str(_int(props.get(m.TIMER_ROLL_TIMES)) + 1)
                    topic, queue_id = TIMER_TOPIC, 0
                else:
                    qid = props.pop(m.REAL_QID, "0")
                    del props[m.REAL_TOPIC]
                    queue_id = int(qid) if qid.isdigit() else 0
                tags = props.get(m.TAGS)
                return MessageInner(topic, queue_id, raw[HEADER_V4_SIZE:p], flag, props, sysflag, born_ts,
                                    (_ip(born_ip), born_port), (_ip(store_ip), store_port), reconsume, 0,
                                    _java_hash(tags) if tags else 0)  # fmt: skip
    return _prepare_decoded(raw, qoff, due, roll, now_ms)


def _prepare_decoded(raw: bytes, qoff: int, due: int, roll: bool,
                     now_ms: int) -> MessageInner | None | Literal[Stale.STALE]:  # fmt: skip
    """``prepare`` by the reference decoder (any layout)."""
    try:
        ext, _ = decode_record(raw)
    except CorruptRecordError:
        return STALE
    if ext.store_size != len(raw) or ext.queue_offset != qoff or ext.topic != TIMER_TOPIC or due_of(ext) != due:
        return STALE
    return delivery(ext, roll, now_ms)


def _properties(raw: bytes, start: int) -> dict[str, str]:
    """``decode_properties`` of ``raw[start:]`` (in C when built: brokerd/csrc/props.c)."""
    if _PROPS_DECODE is not None:
        d: dict[str, str] | None = _PROPS_DECODE(raw, start, len(raw))
        if d is not None:
            return d
    return decode_properties(raw[start:])


def _ip(raw: bytes) -> str:
    ip = _IPS.get(raw)
    if ip is None:
        ip = socket.inet_ntoa(raw)
        if len(_IPS) < 4096:
            _IPS[raw] = ip
    return ip


def _int(raw: str | None) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0
