"""The answers written as protobuf bytes directly (wire.py) against the reference: the same message built with
the proto classes (brokerd/proxy/pb.py) serialises to the same bytes and parses back equal."""

from __future__ import annotations

import itertools

import pytest

from brokerd.proxy import pb
from brokerd.proxy.codes import Code
from brokerd.proxy.wire import SendEntry, send_response, status


def reference(code: int, message: str, entries: list[SendEntry]) -> bytes:
    return bytes(pb.response_class("SendMessage")(
        status=pb.Status(code=code, message=message),
        entries=[pb.SendResultEntry(status=pb.Status(code=e.code, message=e.message), message_id=e.message_id,
                                    transaction_id=e.transaction_id, offset=e.offset, recall_handle=e.recall_handle)
                 for e in entries]).SerializeToString())


ENTRIES = [
    SendEntry(Code.OK, "OK", "0A0000010000000000000000000000", "", 0),
    SendEntry(Code.OK, "OK", "01F2", "7F000001000029", 127, "djEgVCBicm9rZXItYSAxNyBNSUQ="),
    SendEntry(Code.OK, "OK", "m-é-✓", "", 1 << 40),
    SendEntry(Code.MASTER_PERSISTENCE_TIMEOUT, "send message failed, FLUSH_DISK_TIMEOUT"),
    SendEntry(Code.TOPIC_NOT_FOUND, ""),
    SendEntry(0, "", "", "", 128),
]


@pytest.mark.parametrize("entries", [list(c) for n in (0, 1, 2, 3) for c in itertools.combinations(ENTRIES, n)])
def test_send_responses_are_the_bytes_upb_writes(entries: list[SendEntry]) -> None:
    for code, message in ((Code.OK, "OK"), (Code.MULTIPLE_RESULTS, "MULTIPLE_RESULTS"), (0, "")):
        data = send_response(code, message, entries)
        assert data == reference(code, message, entries)
        back = pb.response_class("SendMessage").FromString(data)
        assert (back.status.code, back.status.message, len(back.entries)) == (code, message, len(entries))
        assert [(e.status.code, e.message_id, e.offset, e.recall_handle) for e in back.entries] == [
            (e.code, e.message_id, e.offset, e.recall_handle) for e in entries]


def test_a_status_with_large_codes_and_long_messages() -> None:
    for code, message in ((Code.INTERNAL_SERVER_ERROR, "x" * 300), (Code.BAD_REQUEST, "bad\nrequest")):
        assert status(code, message) == bytes(pb.Status(code=code, message=message).SerializeToString())
