"""Codec tests against the exact first frames real clients send (tests/testdata/client_first_frames.json)."""

from __future__ import annotations

import json
import pathlib
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.remoting.codec import FrameDecoder, FrameError, decode_payload, encode, encode_binary
from brokerd.remoting.command import HeaderError, RemotingCommand

FRAMES = json.loads((pathlib.Path(__file__).parents[2] / "testdata" / "client_first_frames.json").read_text())


@pytest.mark.parametrize("frame", FRAMES, ids=[f"{f['client'][:24]}-{f['target']}-{f['ser']}" for f in FRAMES])
def test_real_client_first_frames_decode(frame: dict) -> None:
    raw = bytes.fromhex(frame["hex"])
    cmds = FrameDecoder().feed(raw)
    assert len(cmds) == 1
    cmd = cmds[0]
    assert cmd.code == frame["code"]
    assert not cmd.is_response and not cmd.is_oneway
    assert all(isinstance(v, str) for v in cmd.ext.values())
    if frame["target"] == "namesrv":
        assert cmd.ext["topic"]
    else:
        topic = cmd.ext.get("b") or cmd.ext.get("topic")
        assert topic and topic.startswith("T_")
        assert cmd.body and cmd.body.startswith(b"harness message 0")


def test_numbers_and_booleans_in_ext_fields_are_coerced_to_strings() -> None:
    alions = next(f for f in FRAMES if f["client"].startswith("ali-ons") and f["target"] == "broker")
    cmd = FrameDecoder().feed(bytes.fromhex(alions["hex"]))[0]
    assert cmd.ext["d"] == "4" and cmd.ext["e"] == "1" and cmd.ext["k"] == "false"
    assert cmd.ext["g"] == "1795315828294"
    assert cmd.int_field("e") == 1 and cmd.bool_field("k") is False


def test_binary_header_matches_json_header_of_same_request() -> None:
    java = [f for f in FRAMES if f["client"].startswith("Apache") and f["target"] == "broker"]
    by_ser = {f["ser"]: FrameDecoder().feed(bytes.fromhex(f["hex"]))[0] for f in java}
    j, b = by_ser["JSON"], by_ser["ROCKETMQ"]
    assert b.code == j.code == 310
    assert set(b.ext) == set(j.ext) and b.ext["a"] == j.ext["a"]


def test_response_is_json_with_string_ext_fields_and_response_flag() -> None:
    req = RemotingCommand(code=105, opaque=7)
    resp = req.response(ext={"queueId": "3"}, body=b"xyz")
    raw = encode(resp)
    total, word = struct.unpack(">ii", raw[:8])
    assert total == len(raw) - 4 and word >> 24 == 0
    header = orjson.loads(raw[8:8 + (word & 0xFFFFFF)])
    assert header["opaque"] == 7 and header["flag"] == 1 and header["extFields"] == {"queueId": "3"}
    assert raw.endswith(b"xyz")


def test_spec_worked_example_binary_request_header() -> None:
    cmd = RemotingCommand(code=105, opaque=7, version=479, language="JAVA")
    raw = encode_binary(cmd)
    assert raw[:8] == bytes.fromhex("0000001901000015")
    assert raw[8:] == bytes.fromhex("006900" "01DF" "00000007" "00000000" "00000000" "00000000")
    assert decode_payload(raw[4:]).opaque == 7


def test_split_feeding_and_pipelined_frames() -> None:
    frames = b"".join(encode(RemotingCommand(code=34, opaque=i, ext={"k": str(i)})) for i in range(50))
    dec = FrameDecoder()
    got = []
    for i in range(0, len(frames), 7):
        got += dec.feed(frames[i:i + 7])
    assert [c.opaque for c in got] == list(range(50))
    assert dec.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=30),
       st.lists(st.binary(max_size=300), min_size=1, max_size=12))
def test_a_stream_read_in_any_pieces_gives_every_frame_whole(cuts: list[int], bodies: list[bytes]) -> None:
    """Reads that start on a frame are decoded in place, the others after the pending bytes: any cut, same frames."""
    stream = b"".join(encode(RemotingCommand(code=310, opaque=i, ext={"b": "T"}, body=b))
                      for i, b in enumerate(bodies))
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    pos = 0
    for i in range(len(stream)):
        if pos >= len(stream):
            break
        n = cuts[i % len(cuts)]
        got += dec.feed(stream[pos:pos + n])
        pos += n
    assert [(c.opaque, c.body or b"") for c in got] == list(enumerate(bodies))
    assert dec.buffered == 0


@pytest.mark.parametrize("raw,reason", [
    (struct.pack(">i", 16 * 1024 * 1024 + 1), "out of range"),
    (struct.pack(">i", 2), "out of range"),
    (struct.pack(">ii", 8, 100) + b"xxxx", "exceeds"),
    (struct.pack(">ii", 6, 0x05000002) + b"{}", "serialize type"),
    (struct.pack(">ii", 9, 5) + b"[1,2]", "object"),
    (struct.pack(">ii", 14, 10) + b'{"code":"x"', "JSON"),
    (struct.pack(">ii", 16, 12) + b'{"code":"x"}', "integer"),
    (struct.pack(">ii", 14, 0x0100000A) + b"\x00" * 10, "21 bytes"),
])
def test_malformed_frames_raise_frame_error(raw: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        FrameDecoder().feed(raw)


def test_typed_field_errors_name_the_field() -> None:
    cmd = RemotingCommand(code=11, ext={"queueId": "abc"})
    with pytest.raises(HeaderError, match="queueId"):
        cmd.int_field("queueId")
    with pytest.raises(HeaderError, match="topic"):
        cmd.str_field("topic")
    assert RemotingCommand(code=1, ext={"x": "3.0"}).int_field("x") == 3


ext_values = st.one_of(st.text(max_size=20), st.integers(-2**63, 2**63 - 1), st.booleans())


@settings(max_examples=200, deadline=None)
@given(code=st.integers(-2**31, 2**31 - 1), opaque=st.integers(0, 2**31 - 1),
       ext=st.dictionaries(st.text(min_size=1, max_size=10), ext_values, max_size=8),
       body=st.binary(max_size=64))
def test_json_roundtrip_any_header(code: int, opaque: int, ext: dict, body: bytes) -> None:
    header = orjson.dumps({"code": code, "opaque": opaque, "flag": 0, "language": "CPP", "version": 333,
                           "extFields": ext})
    raw = struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
    cmd = FrameDecoder().feed(raw)[0]
    assert cmd.code == code and cmd.opaque == opaque and (cmd.body or b"") == body
    assert set(cmd.ext) == set(ext) and all(isinstance(v, str) for v in cmd.ext.values())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_frame_error(data: bytes) -> None:
    try:
        FrameDecoder().feed(data)
    except FrameError:
        pass


@settings(max_examples=200, deadline=None)
@given(code=st.integers(-32768, 32767), opaque=st.integers(-2**31, 2**31 - 1), remark=st.text(max_size=10),
       ext=st.dictionaries(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8), max_size=5))
def test_binary_roundtrip(code: int, opaque: int, remark: str, ext: dict) -> None:
    cmd = RemotingCommand(code=code, opaque=opaque, remark=remark or None, ext=ext)
    back = decode_payload(encode_binary(cmd)[4:])
    assert (back.code, back.opaque, back.remark, back.ext) == (code, opaque, remark or None, ext)
