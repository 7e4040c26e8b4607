"""HA wire codec (spec §4.3, §4.4): byte-exact layouts, round trips, partial feeds, malformed input."""

from __future__ import annotations

import struct

import pytest

from brokerd.ha.wire import (
    ClassicReport,
    ClassicReportDecoder,
    ClassicTransfer,
    ClassicTransferDecoder,
    HAProtocolError,
    MasterHandshake,
    MasterMessage,
    MasterMessageDecoder,
    SlaveHandshake,
    SlaveMessage,
    SlaveMessageDecoder,
    SlaveReport,
    TransferFrame,
    encode_classic_report,
    encode_classic_transfer_header,
    encode_master_handshake,
    encode_parts,
    encode_slave_handshake,
    encode_slave_report,
    encode_transfer_header,
)
from brokerd.store.epoch import EpochEntry


def test_slave_messages_match_the_spec_layout() -> None:
    assert encode_slave_handshake(7, True, False) == struct.pack(">ihhq", 1, 1, 0, 7)
    assert len(encode_slave_handshake(7)) == 16
    assert encode_slave_report(123456789012) == struct.pack(">iq", 2, 123456789012)
    assert len(encode_slave_report(0)) == 12


def test_master_messages_match_the_spec_layout() -> None:
    entries = [EpochEntry(1, 0), EpochEntry(3, 4096)]
    want = struct.pack(">iiqi", 1, 24, 8192, 3) + struct.pack(">iq", 1, 0) + struct.pack(">iq", 3, 4096)
    assert encode_master_handshake(8192, 3, entries) == want
    hdr = encode_transfer_header(4096, 100, 3, 4096, 4000)
    assert hdr == struct.pack(">iiqiqq", 2, 100, 4096, 3, 4096, 4000) and len(hdr) == 36


def test_classic_layouts() -> None:
    assert encode_classic_report(99) == struct.pack(">q", 99)
    assert encode_classic_transfer_header(1 << 40, 5) == struct.pack(">qi", 1 << 40, 5)


def test_encode_parts_keeps_the_body_object_for_writelines() -> None:
    log = bytearray(b"x" * 1000)
    view = memoryview(log)[10:510]
    parts = encode_parts(TransferFrame(10, 2, 0, 5, view))
    assert len(parts) == 2 and parts[1] is view
    assert parts[0] == struct.pack(">iiqiqq", 2, 500, 10, 2, 0, 5)
    assert encode_parts(TransferFrame(10, 2, 0, 5)) == (struct.pack(">iiqiqq", 2, 0, 10, 2, 0, 5),)


def _join(parts: tuple[bytes | memoryview, ...]) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_master_stream_round_trips_byte_by_byte_and_whole() -> None:
    msgs: list[MasterMessage] = [MasterHandshake(300, 2, (EpochEntry(1, 0), EpochEntry(2, 100))),
            TransferFrame(100, 2, 100, 90, b"a" * 150), TransferFrame(250, 2, 100, 250)]
    stream = b"".join(_join(encode_parts(m)) for m in msgs)
    whole = MasterMessageDecoder().feed_messages(stream)
    assert [_norm(m) for m in whole] == [_norm(m) for m in msgs]
    dec = MasterMessageDecoder()
    got = []
    for i in range(len(stream)):
        got += dec.feed_messages(stream[i : i + 1])
        assert dec.buffered <= 36 + 150
    assert [_norm(m) for m in got] == [_norm(m) for m in msgs] and dec.buffered == 0


def _norm(m: object) -> object:
    if isinstance(m, TransferFrame):
        return (m.start_offset, m.epoch, m.epoch_start_offset, m.confirm_offset, bytes(m.body))
    return m


def test_a_frame_inside_one_fed_bytes_object_is_not_copied() -> None:
    data = _join(encode_parts(TransferFrame(0, 1, 0, 0, b"z" * 4096)))
    (frame,) = MasterMessageDecoder().feed_messages(data)
    assert isinstance(frame, TransferFrame) and isinstance(frame.body, memoryview)
    assert frame.body.obj is data and bytes(frame.body) == b"z" * 4096


def test_partial_frame_waits_then_completes_across_feeds() -> None:
    data = _join(encode_parts(TransferFrame(7, 1, 0, 3, b"hello")))
    dec = MasterMessageDecoder()
    assert dec.feed_messages(data[:20]) == [] and dec.feed_messages(data[20:40]) == []
    (frame,) = dec.feed_messages(bytearray(data[40:]) + bytearray(encode_transfer_header(12, 0, 1, 0, 3))[:5])
    assert isinstance(frame, TransferFrame) and bytes(frame.body) == b"hello" and dec.buffered == 5


def test_slave_stream_round_trips() -> None:
    msgs: list[SlaveMessage] = [SlaveHandshake(3, False, True), SlaveReport(0), SlaveReport(1 << 33)]
    stream = b"".join(_join(encode_parts(m)) for m in msgs)
    dec = SlaveMessageDecoder()
    got = dec.feed_messages(stream[:13]) + dec.feed_messages(stream[13:])
    assert got == msgs


def test_classic_round_trips() -> None:
    reps = ClassicReportDecoder().feed(encode_classic_report(5) + encode_classic_report(6)[:3])
    assert reps == [ClassicReport(5)]
    dec = ClassicTransferDecoder()
    data = _join(encode_parts(ClassicTransfer(1 << 30, b"raw")))
    (t,) = dec.feed(data[:12]) + dec.feed(data[12:])
    assert isinstance(t, ClassicTransfer) and t.start_offset == 1 << 30 and bytes(t.body) == b"raw"


@pytest.mark.parametrize(("data", "needle"), [
    (struct.pack(">iiqi", 7, 0, 0, 0), "state 7"),
    (struct.pack(">iiqiqq", 2, -1, 0, 1, 0, 0), "negative body size"),
    (struct.pack(">iiqiqq", 2, 1 << 30, 0, 1, 0, 0), "over the cap"),
    (struct.pack(">iiqi", 1, 13, 0, 0), "not a multiple of 12"),
    (struct.pack(">iiqi", 1, 12_012, 0, 0), "over the cap"),
    (struct.pack(">iiqiqq", 2, 0, -5, 1, 0, 0), "negative start_offset"),
    (struct.pack(">iiqi", 1, 24, 0, 2) + struct.pack(">iqiq", 2, 0, 1, 5), "out of order"),
])  # fmt: skip
def test_malformed_master_frames_raise_a_clear_error(data: bytes, needle: str) -> None:
    dec = MasterMessageDecoder()
    with pytest.raises(HAProtocolError, match=needle):
        dec.feed(data)
    with pytest.raises(HAProtocolError, match="already failed"):
        dec.feed(b"")


@pytest.mark.parametrize(("data", "needle"), [
    (struct.pack(">iq", 0, 0), "state 0"),
    (struct.pack(">ihhq", 1, 2, 0, 1), "flags must be 0/1"),
    (struct.pack(">iq", 2, -1), "negative max_offset"),
])  # fmt: skip
def test_malformed_slave_messages_raise(data: bytes, needle: str) -> None:
    with pytest.raises(HAProtocolError, match=needle):
        SlaveMessageDecoder().feed(data)


def test_the_body_cap_is_configurable_and_a_too_large_frame_is_refused_before_buffering() -> None:
    dec = MasterMessageDecoder(max_body=10)
    with pytest.raises(HAProtocolError, match="11 over the cap 10"):
        dec.feed(encode_transfer_header(0, 11, 1, 0, 0))
    (ok,) = MasterMessageDecoder(max_body=10).feed_messages(_join(encode_parts(TransferFrame(0, 1, 0, 0, b"0" * 10))))
    assert isinstance(ok, TransferFrame)


def test_handshake_sends_only_the_newest_1000_epochs() -> None:
    entries = [EpochEntry(i + 1, i * 10) for i in range(1200)]
    (hs,) = MasterMessageDecoder().feed_messages(encode_master_handshake(20_000, 1200, entries))
    assert isinstance(hs, MasterHandshake) and len(hs.entries) == 1000 and hs.entries[-1] == entries[-1]


def test_encoders_reject_negative_offsets() -> None:
    with pytest.raises(ValueError, match="max_offset"):
        encode_slave_report(-1)
    with pytest.raises(ValueError, match="body_size"):
        encode_transfer_header(0, -1, 1, 0, 0)
