"""HA replication wire codec (spec §4.3 classic, §4.4 AutoSwitch): pure encode functions and incremental decoders.

Everything is big-endian (Java ``ByteBuffer``). This is raw TCP on the HA port (listenPort + 1), not remoting.

AutoSwitch (RIP-44), every message starts with an int32 ``HAConnectionState`` ordinal:

* slave → master handshake, 16 bytes: ``int32 state=1, int16 isSyncFromLastFile, int16 isAsyncLearner,
  int64 slaveBrokerId``;
* slave → master transfer report, 12 bytes: ``int32 state=2, int64 slaveMaxPhyOffset``;
* master → slave handshake, 20-byte header ``int32 state=1, int32 bodySize, int64 masterMaxPhyOffset,
  int32 lastEpoch`` + ``bodySize / 12`` entries of ``int32 epoch, int64 startOffset``;
* master → slave transfer, 36-byte header ``int32 state=2, int32 bodySize, int64 startOffset, int32 epoch,
  int64 epochStartOffset, int64 confirmOffset`` + ``bodySize`` raw commit-log bytes (0 = heartbeat).

Classic (DefaultHAService): slave → master an 8-byte ``int64 maxPhyOffset``; master → slave a 12-byte header
``int64 startPhysicalOffset, int32 bodySize`` + body.

Zero copy: the encoders for frames with a body return the *header only*; a driver sends
``writelines([header, body_view])``. The decoders hand bodies out as ``memoryview`` slices of the fed ``bytes``
object when a frame lies wholly inside one fed chunk (the common case for large reads), else as one ``bytes``
copy (a single C-level memcpy) out of the reassembly buffer; there is no per-byte Python work.

Deviations from RocketMQ (documented on purpose):

* Decoders are strict: a state ordinal not valid for the direction, a negative or over-cap body size, a handshake
  body that is not a multiple of 12, a flag other than 0/1, or a negative offset/epoch raises
  ``HAProtocolError``; the connection must then be closed (the decoder refuses further input).
* The master's handshake carries at most ``MAX_HANDSHAKE_EPOCHS`` (1000, the size of Java's handshake buffer)
  entries; ``encode_master_handshake`` sends the newest 1000 (the consistent-point search walks newest first).
* The deprecated slave handshake variant with a 50-byte address is not supported.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from brokerd.store.epoch import EpochEntry


class HAConnectionState(IntEnum):
    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class HAProtocolError(ValueError):
    """A malformed HA frame; the message says what was wrong. Close the connection."""


Body = bytes | memoryview

_SLAVE_HANDSHAKE: Final = struct.Struct(">ihhq")  # 16
_SLAVE_REPORT: Final = struct.Struct(">iq")  # 12
_MASTER_HANDSHAKE: Final = struct.Struct(">iiqi")  # 20
_EPOCH_ENTRY: Final = struct.Struct(">iq")  # 12
_TRANSFER: Final = struct.Struct(">iiqiqq")  # 36
_CLASSIC_REPORT: Final = struct.Struct(">q")  # 8
_CLASSIC_TRANSFER: Final = struct.Struct(">qi")  # 12
_STATE: Final = struct.Struct(">i")

SLAVE_HANDSHAKE_SIZE: Final = _SLAVE_HANDSHAKE.size
SLAVE_REPORT_SIZE: Final = _SLAVE_REPORT.size
MASTER_HANDSHAKE_HEADER_SIZE: Final = _MASTER_HANDSHAKE.size
EPOCH_ENTRY_SIZE: Final = _EPOCH_ENTRY.size
TRANSFER_HEADER_SIZE: Final = _TRANSFER.size
CLASSIC_REPORT_SIZE: Final = _CLASSIC_REPORT.size
CLASSIC_TRANSFER_HEADER_SIZE: Final = _CLASSIC_TRANSFER.size
MAX_HANDSHAKE_EPOCHS: Final = 1000
DEFAULT_MAX_BODY: Final = 16 * 1024 * 1024
_INT32_MAX: Final = (1 << 31) - 1


# ---------------------------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    slave_broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class SlaveReport:
    """A slave's max physical offset (its ack)."""

    max_offset: int


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    max_offset: int
    last_epoch: int
    entries: tuple[EpochEntry, ...]


@dataclass(frozen=True, slots=True)
class TransferFrame:
    """Raw log bytes at ``start_offset`` (empty body = heartbeat), in ``epoch`` which started at
    ``epoch_start_offset``; ``confirm_offset`` is the master's."""

    start_offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: Body = b""


@dataclass(frozen=True, slots=True)
class ClassicReport:
    max_offset: int


@dataclass(frozen=True, slots=True)
class ClassicTransfer:
    start_offset: int
    body: Body = b""


SlaveMessage = SlaveHandshake | SlaveReport
MasterMessage = MasterHandshake | TransferFrame


# ---------------------------------------------------------------------------------------------- encoders


def _check_offset(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def encode_slave_handshake(slave_broker_id: int, sync_from_last_file: bool = False,
                           async_learner: bool = False) -> bytes:  # fmt: skip
    return _SLAVE_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, int(sync_from_last_file), int(async_learner),
                                 slave_broker_id)  # fmt: skip


def encode_slave_report(max_offset: int) -> bytes:
    _check_offset("max_offset", max_offset)
    return _SLAVE_REPORT.pack(HAConnectionState.TRANSFER, max_offset)


def encode_master_handshake(max_offset: int, last_epoch: int, entries: Sequence[EpochEntry]) -> bytes:
    """Header + body in one buffer (small). Sends the newest ``MAX_HANDSHAKE_EPOCHS`` entries."""
    _check_offset("max_offset", max_offset)
    sent = list(entries)[-MAX_HANDSHAKE_EPOCHS:]
    out = bytearray(_MASTER_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, len(sent) * EPOCH_ENTRY_SIZE,
                                           max_offset, last_epoch))  # fmt: skip
    for e in sent:
        out += _EPOCH_ENTRY.pack(e.epoch, e.start_offset)
    return bytes(out)


def encode_transfer_header(start_offset: int, body_size: int, epoch: int, epoch_start_offset: int,
                           confirm_offset: int) -> bytes:  # fmt: skip
    """The 36-byte transfer header only; send ``[header, body]`` with ``writelines`` (no body copy)."""
    _check_offset("start_offset", start_offset)
    if not 0 <= body_size <= _INT32_MAX:
        raise ValueError(f"body_size {body_size} outside int32")
    return _TRANSFER.pack(HAConnectionState.TRANSFER, body_size, start_offset, epoch, epoch_start_offset,
                          confirm_offset)  # fmt: skip


def encode_classic_report(max_offset: int) -> bytes:
    _check_offset("max_offset", max_offset)
    return _CLASSIC_REPORT.pack(max_offset)


def encode_classic_transfer_header(start_offset: int, body_size: int) -> bytes:
    """The 12-byte classic header only; the caller sends the body after it."""
    _check_offset("start_offset", start_offset)
    if not 0 <= body_size <= _INT32_MAX:
        raise ValueError(f"body_size {body_size} outside int32")
    return _CLASSIC_TRANSFER.pack(start_offset, body_size)


def encode_parts(msg: SlaveMessage | MasterMessage | ClassicReport | ClassicTransfer) -> tuple[Body, ...]:
    """The buffers to ``writelines`` for ``msg`` (header, then the body view untouched when there is one)."""
    if isinstance(msg, SlaveHandshake):
        return (encode_slave_handshake(msg.slave_broker_id, msg.sync_from_last_file, msg.async_learner),)
    if isinstance(msg, SlaveReport):
        return (encode_slave_report(msg.max_offset),)
    if isinstance(msg, MasterHandshake):
        return (encode_master_handshake(msg.max_offset, msg.last_epoch, msg.entries),)
    if isinstance(msg, TransferFrame):
        hdr = encode_transfer_header(msg.start_offset, len(msg.body), msg.epoch, msg.epoch_start_offset,
                                     msg.confirm_offset)  # fmt: skip
        return (hdr, msg.body) if len(msg.body) else (hdr,)
    if isinstance(msg, ClassicReport):
        return (encode_classic_report(msg.max_offset),)
    hdr = encode_classic_transfer_header(msg.start_offset, len(msg.body))
    return (hdr, msg.body) if len(msg.body) else (hdr,)


# ---------------------------------------------------------------------------------------------- decoders


class _Decoder:
    """Reassembly shared by the four decoders: ``feed`` bytes, get complete messages back.

    Subclasses implement ``_parse(src, pos, end)`` returning ``(message, new_pos)`` or ``None`` when the frame
    at ``pos`` is incomplete; ``src`` is either the fed immutable ``bytes`` or the internal buffer."""

    def __init__(self, max_body: int = DEFAULT_MAX_BODY) -> None:
        if max_body <= 0:
            raise ValueError(f"max_body must be > 0, got {max_body}")
        self.max_body = max_body
        self._buf = bytearray()
        self._failed: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame waiting for more input."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[object]:
        if self._failed is not None:
            raise HAProtocolError(f"decoder already failed: {self._failed}")
        try:
            return self._feed(data)
        except HAProtocolError as exc:
            self._failed = str(exc)
            raise

    def _feed(self, data: bytes | bytearray | memoryview) -> list[object]:
        out: list[object] = []
        if not self._buf and isinstance(data, bytes):
            pos = self._drain(data, 0, out)  # fast path: frames wholly inside ``data`` reference it
            self._buf += memoryview(data)[pos:]
            return out
        self._buf += data
        pos = self._drain(self._buf, 0, out)
        del self._buf[:pos]
        return out

    def _drain(self, src: bytes | bytearray, pos: int, out: list[object]) -> int:
        end = len(src)
        while pos < end:
            got = self._parse(src, pos, end)
            if got is None:
                break
            msg, pos = got
            out.append(msg)
        return pos

    def _body(self, src: bytes | bytearray, start: int, size: int) -> Body:
        if size == 0:
            return b""
        if isinstance(src, bytes):
            return memoryview(src)[start : start + size]
        with memoryview(src) as view:
            return bytes(view[start : start + size])

    def _size(self, what: str, size: int, cap: int) -> None:
        if size < 0:
            raise HAProtocolError(f"{what}: negative body size {size}")
        if size > cap:
            raise HAProtocolError(f"{what}: body size {size} over the cap {cap}")

    def _parse(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        raise NotImplementedError


def _nonneg(what: str, **values: int) -> None:
    for name, v in values.items():
        if v < 0:
            raise HAProtocolError(f"{what}: negative {name} {v}")


class SlaveMessageDecoder(_Decoder):
    """Master side: decodes what a slave sends (handshake 16 bytes, report 12 bytes)."""

    def _parse(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        if end - pos < 4:
            return None
        (state,) = _STATE.unpack_from(src, pos)
        if state == HAConnectionState.HANDSHAKE:
            if end - pos < SLAVE_HANDSHAKE_SIZE:
                return None
            _, last_file, learner, slave_id = _SLAVE_HANDSHAKE.unpack_from(src, pos)
            if last_file not in (0, 1) or learner not in (0, 1):
                raise HAProtocolError(f"slave handshake: flags must be 0/1, got {last_file}/{learner}")
            return SlaveHandshake(slave_id, bool(last_file), bool(learner)), pos + SLAVE_HANDSHAKE_SIZE
        if state == HAConnectionState.TRANSFER:
            if end - pos < SLAVE_REPORT_SIZE:
                return None
            _, offset = _SLAVE_REPORT.unpack_from(src, pos)
            _nonneg("slave report", max_offset=offset)
            return SlaveReport(offset), pos + SLAVE_REPORT_SIZE
        raise HAProtocolError(f"slave message: state {state} is not HANDSHAKE(1) or TRANSFER(2)")

    def feed_messages(self, data: bytes | bytearray | memoryview) -> list[SlaveMessage]:
        return [m for m in self.feed(data) if isinstance(m, SlaveHandshake | SlaveReport)]


class MasterMessageDecoder(_Decoder):
    """Slave side: decodes what a master sends (handshake with epochs, transfer frames)."""

    def _parse(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        if end - pos < 4:
            return None
        (state,) = _STATE.unpack_from(src, pos)
        if state == HAConnectionState.HANDSHAKE:
            return self._handshake(src, pos, end)
        if state == HAConnectionState.TRANSFER:
            return self._transfer(src, pos, end)
        raise HAProtocolError(f"master message: state {state} is not HANDSHAKE(1) or TRANSFER(2)")

    def _handshake(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        if end - pos < MASTER_HANDSHAKE_HEADER_SIZE:
            return None
        _, size, max_offset, last_epoch = _MASTER_HANDSHAKE.unpack_from(src, pos)
        self._size("master handshake", size, MAX_HANDSHAKE_EPOCHS * EPOCH_ENTRY_SIZE)
        if size % EPOCH_ENTRY_SIZE:
            raise HAProtocolError(f"master handshake: body size {size} is not a multiple of {EPOCH_ENTRY_SIZE}")
        _nonneg("master handshake", max_offset=max_offset, last_epoch=last_epoch)
        body_at = pos + MASTER_HANDSHAKE_HEADER_SIZE
        if end - body_at < size:
            return None
        entries = tuple(EpochEntry(e, s) for e, s in _EPOCH_ENTRY.iter_unpack(src[body_at : body_at + size]))
        for prev, cur in zip(entries, entries[1:], strict=False):
            if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
                raise HAProtocolError(f"master handshake: epoch entries out of order ({prev} then {cur})")
        if entries and (entries[0].epoch < 0 or entries[0].start_offset < 0):
            raise HAProtocolError(f"master handshake: negative epoch entry {entries[0]}")
        return MasterHandshake(max_offset, last_epoch, entries), body_at + size

    def _transfer(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        if end - pos < TRANSFER_HEADER_SIZE:
            return None
        _, size, start, epoch, epoch_start, confirm = _TRANSFER.unpack_from(src, pos)
        self._size("transfer frame", size, self.max_body)
        _nonneg("transfer frame", start_offset=start, epoch=epoch, epoch_start_offset=epoch_start,
                confirm_offset=confirm)  # fmt: skip
        body_at = pos + TRANSFER_HEADER_SIZE
        if end - body_at < size:
            return None
        return TransferFrame(start, epoch, epoch_start, confirm, self._body(src, body_at, size)), body_at + size

    def feed_messages(self, data: bytes | bytearray | memoryview) -> list[MasterMessage]:
        return [m for m in self.feed(data) if isinstance(m, MasterHandshake | TransferFrame)]


class ClassicReportDecoder(_Decoder):
    """Classic master side: 8-byte offsets. (Java keeps only the last complete value; all are returned here.)"""

    def _parse(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        if end - pos < CLASSIC_REPORT_SIZE:
            return None
        (offset,) = _CLASSIC_REPORT.unpack_from(src, pos)
        _nonneg("classic report", max_offset=offset)
        return ClassicReport(offset), pos + CLASSIC_REPORT_SIZE


class ClassicTransferDecoder(_Decoder):
    """Classic slave side: 12-byte header + body."""

    def _parse(self, src: bytes | bytearray, pos: int, end: int) -> tuple[object, int] | None:
        if end - pos < CLASSIC_TRANSFER_HEADER_SIZE:
            return None
        start, size = _CLASSIC_TRANSFER.unpack_from(src, pos)
        self._size("classic transfer", size, self.max_body)
        _nonneg("classic transfer", start_offset=start)
        body_at = pos + CLASSIC_TRANSFER_HEADER_SIZE
        if end - body_at < size:
            return None
        return ClassicTransfer(start, self._body(src, body_at, size)), body_at + size
