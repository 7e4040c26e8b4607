"""The send lane's pre-check: a frame it lets go straight to the processors is never a send."""

from __future__ import annotations

import struct

from hypothesis import assume, given
from hypothesis import strategies as st

from brokerd.processors.send_lane import may_be_send
from brokerd.remoting.codec import decode_payload, encode, encode_binary
from brokerd.remoting.command import RemotingCommand

SENDS = (10, 310, 320)


def json_frame(header: bytes, body: bytes = b"x" * 10) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


@given(code=st.sampled_from([*SENDS, 11, 14, 15, 34, 200050, 200051, 200151, 3100, 1, 0, 36]),
       binary=st.booleans(), topic=st.text(min_size=1, max_size=20))
def test_the_codec_s_frames(code: int, binary: bool, topic: str) -> None:
    assume(not binary or code < 1 << 15)  # the binary header's code is a short (POP codes come as JSON)
    cmd = RemotingCommand(code, ext={"topic": topic}, body=b"body")
    frame = encode_binary(cmd) if binary else encode(cmd)
    assert decode_payload(memoryview(frame)[4:]).code == code
    assert may_be_send(frame, 0) is (code in SENDS)


def test_client_layouts_and_odd_headers_are_left_to_the_lane() -> None:
    assert may_be_send(json_frame(b'{"code": 310, "extFields": {}}'), 0)  # the C++ client's spacing
    assert not may_be_send(json_frame(b'{"code": 200051, "extFields": {}}'), 0)
    assert not may_be_send(b"pad" + json_frame(b'{"code":11,"flag":0}'), 3)
    for odd in (b'{"extFields":{},"code":11}', b'{"code":"11","flag":0}', b'{"code":11111111,"a":1}',
                b'{"code":11x,"flag":0}'):
        assert may_be_send(json_frame(odd), 0)  # not a layout it knows: the lane decides
    assert may_be_send(b"\x00\x00\x00\x20\x00", 0)  # cut short
    assert may_be_send(json_frame(b'{"code":2000')[:20], 0)  # cut inside the code: the lane decides
