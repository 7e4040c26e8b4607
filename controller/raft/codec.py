"""Wire format of peer messages: length-prefixed msgpack frames (pure, no I/O).

Frame = 4-byte big-endian payload length + msgpack payload. The first frame on a connection is a
hello `["hello", group, node_id]`; every later frame is one Raft message as a flat list (see
`encode_message`). Entries travel as a flat [term, kind, data, term, kind, data, ...] list; their
indexes follow from the message's `index` (the entry before them), so they are not sent.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import msgpack

from controller.raft.types import Entry, Message, MsgType, Snapshot

MAX_FRAME_BYTES: Final = 512 * 1024 * 1024
_LEN = struct.Struct(">I")
_MSG_TYPES: Final = frozenset(int(t) for t in MsgType)


class CodecError(Exception):
    """A peer sent bytes that are not a valid frame or message; the connection is dropped."""


def frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_BYTES:
        raise CodecError(f"frame of {len(payload)} bytes exceeds MAX_FRAME_BYTES")
    return _LEN.pack(len(payload)) + payload


def encode_hello(group: str, node_id: str) -> bytes:
    out: bytes = msgpack.packb(["hello", group, node_id])
    return frame(out)


def encode_message(m: Message) -> bytes:
    flat: list[Any] = []
    for e in m.entries:
        flat += (e.term, e.kind, e.data)
    snap = [m.snapshot.index, m.snapshot.term, m.snapshot.data] if m.snapshot is not None else None
    payload: bytes = msgpack.packb(
        [m.type, m.frm, m.to, m.term, m.log_term, m.index, m.commit, flat, m.reject, m.reject_hint, m.ctx,
         snap, m.lease_tick]
    )
    return frame(payload)


def decode_message(obj: Any) -> Message:
    try:
        (mtype, frm, to, term, log_term, index, commit, flat, reject, hint, ctx, snap, lease_tick) = obj
        if mtype not in _MSG_TYPES or len(flat) % 3:
            raise CodecError(f"bad message type {mtype!r} or entry list")
        base = index + 1
        entries = [Entry(base + i // 3, flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]
        snapshot = Snapshot(int(snap[0]), int(snap[1]), bytes(snap[2])) if snap is not None else None
        return Message(
            mtype, str(frm), str(to), int(term), log_term=int(log_term), index=int(index), commit=int(commit),
            entries=entries, reject=bool(reject), reject_hint=int(hint), ctx=bytes(ctx), snapshot=snapshot,
            lease_tick=int(lease_tick),
        )
    except CodecError:
        raise
    except (TypeError, ValueError, IndexError) as e:
        raise CodecError(f"malformed message: {e}") from e


class FrameDecoder:
    """Incremental frame splitter: feed bytes, get decoded msgpack objects."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[Any]:
        buf = self._buf
        buf += data
        out: list[Any] = []
        pos = 0
        n_buf = len(buf)
        while n_buf - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n > self._max:
                raise CodecError(f"frame of {n} bytes exceeds limit {self._max}")
            end = pos + 4 + n
            if end > n_buf:
                break
            try:
                out.append(msgpack.unpackb(buf[pos + 4 : end]))
            except Exception as e:  # msgpack raises several types for garbage
                raise CodecError(f"undecodable frame: {e}") from e
            pos = end
        if pos:
            del buf[:pos]
        return out
