"""RocketMQ's recall handle codec (brokerd/timer/handle.py)."""

from __future__ import annotations

import base64

import pytest

from brokerd.timer.handle import INVALID, decode_handle, encode_handle


def test_the_handle_is_javas_url_safe_base64_of_the_five_fields() -> None:
    h = encode_handle("TopicA", "broker-a", "1700000000001", "7F0000010001AB")
    # java.util.Base64.getUrlEncoder().encodeToString("v1 TopicA broker-a 1700000000001 7F0000010001AB".getBytes())
    assert h == base64.urlsafe_b64encode(b"v1 TopicA broker-a 1700000000001 7F0000010001AB").decode()
    d = decode_handle(h)
    assert (d.topic, d.broker_name, d.timestamp, d.message_id, d.timestamp_ms) == (
        "TopicA", "broker-a", "1700000000001", "7F0000010001AB", 1700000000001)


def test_padding_is_optional_and_extra_fields_are_ignored_as_java_does() -> None:
    raw = base64.urlsafe_b64encode(b"v1 T b 5 ID extra").decode().rstrip("=")
    d = decode_handle(raw)
    assert (d.topic, d.message_id) == ("T", "ID")
    assert decode_handle(encode_handle("T", "b", "soon", "ID")).timestamp_ms == -1  # NumberUtils.toLong(.., -1)


@pytest.mark.parametrize("raw", ["", "not base64!", "@@@@", base64.urlsafe_b64encode(b"v2 T b 5 ID").decode(),
                                 base64.urlsafe_b64encode(b"v1 T b 5").decode(), base64.b64encode(b"\xff\xfe").decode()])
def test_malformed_handles_are_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=INVALID):
        decode_handle(raw)
