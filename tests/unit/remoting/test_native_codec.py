"""The C codec (brokerd._native) against the Python codec it mirrors: whatever frame the C side decodes or
encodes, the Python side gives the same command / the same JSON; frames it declines go to Python unchanged."""

from __future__ import annotations

import json
import os
import pathlib
import random
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.native import native
from brokerd.remoting.codec import MAX_FRAME, FrameDecoder, FrameError, decode_payload, encode_header
from brokerd.remoting.command import RemotingCommand

pytestmark = pytest.mark.skipif(native is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")

FRAMES = json.loads((pathlib.Path(__file__).parents[2] / "testdata" / "client_first_frames.json").read_text())


def test_the_native_module_is_built_where_the_tests_run() -> None:
    """scripts/test installs a compiler's output: a silent fall back to Python would leave the C path untested."""
    if os.environ.get("BROKERD_NATIVE") == "0":
        pytest.skip("disabled on purpose")
    assert native is not None


def frame_of(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def python_decode(raw: bytes) -> RemotingCommand:
    return decode_payload(memoryview(raw)[4:])


def native_decode(raw: bytes) -> RemotingCommand | None:
    assert native is not None
    hit = native.decode_frame(bytearray(raw), 0, MAX_FRAME)
    if hit is None:
        return None
    cmd, end = hit
    assert end == len(raw)
    return cmd  # type: ignore[no-any-return]


@pytest.mark.parametrize("frame", [f for f in FRAMES if f["ser"] == "JSON"], ids=lambda f: f["client"][:30])
def test_real_client_frames_decode_natively_like_python(frame: dict) -> None:
    raw = bytes.fromhex(frame["hex"])
    got = native_decode(raw)
    assert got is not None, "a real client's JSON frame must take the C path"
    assert got == python_decode(raw)


scalar = st.one_of(st.text(max_size=12), st.integers(-(2**70), 2**70), st.booleans(), st.none(),
                   st.floats(allow_nan=False, allow_infinity=False))
ext_fields = st.dictionaries(st.text(max_size=8), st.one_of(scalar, st.lists(st.integers(), max_size=2)), max_size=8)


@settings(max_examples=400, deadline=None)
@given(code=st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=3), st.none()),
       opaque=st.integers(-(2**63), 2**63), flag=st.integers(0, 3), version=st.integers(0, 500),
       language=st.one_of(st.sampled_from(["JAVA", "CPP", "PYTHON", "GO"]), st.integers(-2, 20), st.text(max_size=5)),
       remark=st.one_of(st.none(), st.text(max_size=20), st.integers()), ext=st.one_of(ext_fields, st.none()),
       extra=st.dictionaries(st.sampled_from(["serializeTypeCurrentRPC", "x", "extFields2"]), scalar, max_size=2),
       ascii_only=st.booleans(), indent=st.booleans(), body=st.binary(max_size=16),
       drop=st.sets(st.sampled_from(["opaque", "flag", "version", "language", "remark", "extFields"])))
def test_any_json_header_decodes_the_same_or_is_left_to_python(
        code: object, opaque: int, flag: int, version: int, language: object, remark: object, ext: object,
        extra: dict, ascii_only: bool, indent: bool, body: bytes, drop: set[str]) -> None:  # fmt: skip
    h: dict[str, object] = {"code": code, "opaque": opaque, "flag": flag, "version": version, "language": language,
                            "remark": remark, "extFields": ext, **extra}  # fmt: skip
    for k in drop:
        h.pop(k, None)
    header = json.dumps(h, ensure_ascii=ascii_only, indent=1 if indent else None).encode()
    raw = frame_of(header, body)
    got = native_decode(raw)
    try:
        want: RemotingCommand | None = python_decode(raw)
    except FrameError:
        want = None
    if got is not None:
        assert got == want
    plain = (type(code) is int and abs(code) < 10**18 and abs(opaque) < 10**18 and type(language) in (str, int)
             and (remark is None or type(remark) is str) and (ext is None or all(
                 type(v) in (str, bool, type(None)) or (type(v) is int and abs(v) < 10**18) for v in ext.values()))
             and all(type(v) in (str, bool, type(None)) or (type(v) is int and abs(v) < 10**18)
                     for v in extra.values()))  # fmt: skip
    if plain and "extFields2" not in extra and "x" not in extra:
        assert got is not None, "a header of strings and integers must take the C path"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_random_header_bytes_never_crash_and_agree_with_python(data: bytes) -> None:
    raw = frame_of(data)
    got = native_decode(raw)
    if got is not None:
        assert got == python_decode(raw)


def test_escapes_surrogate_pairs_and_bad_utf8() -> None:
    h = b'{"code":1,"remark":"a\\"b\\\\c\\u00e9\\ud83d\\ude00\\n","extFields":{"k\\u0001":"v\\u0002w"}}'
    got = native_decode(frame_of(h))
    assert got is not None and got == python_decode(frame_of(h))
    assert got.remark == 'a"b\\c\u00e9\U0001F600\n' and got.ext == {"k\x01": "v\x02w"}
    for bad in (b'{"code":1,"remark":"\\ud800"}', b'{"code":1,"remark":"\xff"}', b'{"code":1,"remark":"a\x01"}',
                b'{"code":01}', b'{"code":1,}', b'{"code":1} x', b'{"code":1.5}'):
        assert native_decode(frame_of(bad)) is None, bad
        with pytest.raises(FrameError):
            python_decode(frame_of(bad))


def test_every_special_byte_at_every_position_of_a_string_decodes_like_python() -> None:
    """Strings are scanned 8 bytes at a time: a quote, backslash escape, control byte or non-ASCII character at
    any position around those 8-byte steps is found (decoded or refused exactly as the Python codec)."""
    for n in range(0, 26):
        for at in range(n + 1):
            for special in (b'\\"', b"\\\\", b"\\u0001", b"\x01", b"\x7f", "\u00e9".encode(), b"\xff", b'"'):
                value = b"a" * at + special + b"b" * (n - at)
                h = b'{"code":1,"remark":"' + value + b'","extFields":{"k":"' + value + b'"}}'
                raw = frame_of(h)
                got = native_decode(raw)
                try:
                    want = python_decode(raw)
                except FrameError:
                    assert got is None, h
                    continue
                assert got == want, h  # every string the Python codec accepts here, the C one decodes too


def test_frames_longer_than_the_limit_are_left_to_python() -> None:
    raw = frame_of(b'{"code":1}', b"x" * 100)
    assert native is not None
    assert native.decode_frame(bytearray(raw), 0, 50) is None
    with pytest.raises(FrameError):
        FrameDecoder(max_frame=50).feed(raw)


def test_split_and_pipelined_feeding_gives_every_frame_once() -> None:
    frames = [frame_of(orjson.dumps({"code": 10 + i, "opaque": i, "extFields": {"a": str(i)}}), bytes([i]) * i)
              for i in range(50)]  # fmt: skip
    stream = b"".join(frames)
    rnd = random.Random(7)
    dec, out, pos = FrameDecoder(), [], 0
    while pos < len(stream):
        n = rnd.randint(1, 300)
        out += dec.feed(stream[pos:pos + n])
        pos += n
    assert [(c.code, c.opaque, c.ext, c.body) for c in out] == [
        (10 + i, i, {"a": str(i)}, (bytes([i]) * i) or None) for i in range(50)]


@settings(max_examples=300, deadline=None)
@given(code=st.integers(-(2**31), 2**31 - 1), opaque=st.integers(0, 2**31 - 1), flag=st.integers(0, 3),
       language=st.text(max_size=6), version=st.integers(0, 1000), remark=st.one_of(st.none(), st.text(max_size=30)),
       ext=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=6), blen=st.integers(0, 5))
def test_native_head_encoding_is_the_python_encoding(code: int, opaque: int, flag: int, language: str, version: int,
                                                     remark: str | None, ext: dict, blen: int) -> None:  # fmt: skip
    assert native is not None
    cmd = RemotingCommand(code, opaque, flag, language, version, remark, ext)
    head = native.encode_head(code, opaque, flag, language, version, remark, ext, blen)
    try:
        want = encode_header(cmd)
    except orjson.JSONEncodeError:  # lone surrogates: Python refuses, C must leave it to Python
        assert head is None
        return
    assert head is not None
    total, hlen = struct.unpack(">ii", head[:8])
    assert hlen == len(head) - 8 and total == 4 + hlen + blen
    assert orjson.loads(head[8:]) == orjson.loads(want)
    assert list(orjson.loads(head[8:])) == list(orjson.loads(want))  # same key order


def test_non_string_ext_values_are_left_to_the_python_encoder() -> None:
    assert native is not None
    assert native.encode_head(0, 1, 1, "JAVA", 479, None, {"a": 1}, 0) is None
    assert native.encode_head(0, 1, 1, "JAVA", 479, 5, {}, 0) is None


JSON_FRAMES = [bytes.fromhex(f["hex"]) for f in FRAMES if f["ser"] == "JSON"]
SPECIAL = list(b'"\\{}[]:,0123456789-.eEu \x01\x00\x7f\xc3\xa9\xed\xa0\xff') + [ord("n"), ord("t")]


@settings(max_examples=1500, deadline=None)
@given(st.data())
def test_mutated_real_client_frames_decode_the_same_or_are_left_to_python(data: st.DataObject) -> None:
    raw = bytearray(data.draw(st.sampled_from(JSON_FRAMES)))
    hlen = int.from_bytes(raw[4:8], "big")
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(8, 8 + hlen - 1))
        raw[pos] = data.draw(st.one_of(st.sampled_from(SPECIAL), st.integers(0, 255)))
    got = native_decode(bytes(raw))
    try:
        want: RemotingCommand | None = python_decode(bytes(raw))
    except FrameError:
        want = None
    if got is not None:
        assert got == want
