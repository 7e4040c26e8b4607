"""Message codecs: what clients and the broker see on the wire (pure, no files)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd import message as m
from brokerd.message import (
    CorruptRecordError,
    MessageInner,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    decode_records,
    encode_batch_body,
    encode_properties,
    encode_record,
    java_string_hash,
    message_keys,
    offset_msg_id,
    parse_batch_body,
    tags_code_of,
    verify_record,
)

# ------------------------------------------------------------------ java hash


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -2147483648),  # wraps to Integer.MIN_VALUE
        ("中文", 20013 * 31 + 25991),  # two BMP code units
        ("😀", 0xD83D * 31 + 0xDE00),  # one astral char = a surrogate pair of two UTF-16 units
    ],
)
def test_java_string_hash_matches_java(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected


@given(st.text(max_size=40))
def test_java_string_hash_is_signed_32_bit_polynomial(s: str) -> None:
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i : i + 2], "big")) % 2**32
    assert java_string_hash(s) == (h - 2**32 if h >= 2**31 else h)


def test_tags_code_is_zero_without_tags() -> None:
    assert tags_code_of(None) == 0
    assert tags_code_of("") == 0
    assert tags_code_of("TagA") == java_string_hash("TagA")


# ------------------------------------------------------------------ properties

_prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1)


@given(st.dictionaries(_prop_text, _prop_text, max_size=8))
def test_properties_round_trip_including_non_ascii(d: dict[str, str]) -> None:
    raw = encode_properties(d)
    assert decode_properties(raw) == d
    assert decode_properties(raw.decode("utf-8")) == d
    if d:
        assert raw.endswith(b"\x02")


def test_properties_encoding_layout_and_null_values_skipped() -> None:
    assert encode_properties({"TAGS": "a", "KEYS": "k1 k2"}) == b"TAGS\x01a\x02KEYS\x01k1 k2\x02"
    assert encode_properties({"A": None, "B": "x"}) == b"B\x01x\x02"
    assert encode_properties({}) == b""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", {}),
        ("A\x01b", {"A": "b"}),  # no trailing separator
        ("\x01v\x02K\x01v\x02", {"K": "v"}),  # empty name dropped
        ("K\x01\x02", {}),  # empty value dropped
        ("novalue\x02K\x01v\x02", {"K": "v"}),  # segment without a name/value separator dropped
        ("K\x01a\x01b\x02", {"K": "a\x01b"}),  # the first separator splits
        ("K\x011\x02K\x012\x02", {"K": "2"}),  # later duplicates win
        ("\x02\x02K\x01v\x02\x02", {"K": "v"}),  # empty segments ignored
        ("键\x01值\x02", {"键": "值"}),
    ],
)
def test_properties_parsing_rules(raw: str, expected: dict[str, str]) -> None:
    assert decode_properties(raw) == expected
    assert decode_properties(raw.encode("utf-8")) == expected


def test_message_keys_split_on_spaces_plus_uniq_key() -> None:
    assert message_keys({m.KEYS: "a b  c", m.UNIQ_KEY: "U"}) == ["a", "b", "c", "U"]
    assert message_keys({m.KEYS: "U", m.UNIQ_KEY: "U"}) == ["U"]
    assert message_keys({m.UNIQ_KEY: "U"}) == ["U"]
    assert message_keys({}) == []


# ------------------------------------------------------------------ records


def _msg(topic: str = "TopicA", body: bytes = b"hello", props: dict[str, str] | None = None, **kw: object) -> MessageInner:
    fields: dict[str, object] = {
        "topic": topic, "queue_id": 3, "body": body, "flag": 7, "properties": {m.TAGS: "t"} if props is None else props,
        "sys_flag": 0, "born_timestamp": 1_700_000_000_123, "born_host": ("10.1.2.3", 50001),
        "store_host": ("192.168.0.9", 10911), "reconsume_times": 2, "prepared_transaction_offset": 99,
    }  # fmt: skip
    fields.update(kw)
    return MessageInner(**fields)  # type: ignore[arg-type]


def test_record_layout_matches_spec_offsets() -> None:
    msg = _msg()
    raw = encode_record(msg, queue_offset=42, phys_offset=4096, store_timestamp=1_700_000_000_456)
    props = encode_properties(msg.properties)
    assert len(raw) == 91 + len(b"hello") + len(b"TopicA") + len(props)
    size, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = struct.unpack_from(">iiiiiqqiq", raw, 0)
    assert (size, magic & 0xFFFFFFFF, qid, flag, qoff, phys, born_ts) == (
        len(raw), 0xDAA320A7, 3, 7, 42, 4096, 1_700_000_000_123)
    assert crc == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert raw[48:52] == bytes([10, 1, 2, 3]) and struct.unpack_from(">i", raw, 52)[0] == 50001
    assert struct.unpack_from(">q", raw, 56)[0] == 1_700_000_000_456
    assert raw[64:68] == bytes([192, 168, 0, 9]) and struct.unpack_from(">i", raw, 68)[0] == 10911
    assert struct.unpack_from(">iqi", raw, 72) == (2, 99, 5)
    assert raw[88:93] == b"hello"
    assert raw[93] == 6 and raw[94:100] == b"TopicA"
    assert struct.unpack_from(">h", raw, 100)[0] == len(props) and raw[102:] == props


_record_props = st.dictionaries(_prop_text, _prop_text, max_size=5)


@settings(max_examples=60)
@given(
    topic=st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=200),
    body=st.binary(max_size=2000),
    props=_record_props,
    qoff=st.integers(0, 2**40),
    phys=st.integers(0, 2**50),
    sysflag=st.sampled_from([0, 1, 2, 4, 8, 12, 0x301]),
)
def test_record_round_trip(topic: str, body: bytes, props: dict[str, str], qoff: int, phys: int, sysflag: int) -> None:
    msg = _msg(topic=topic, body=body, props=props, sys_flag=sysflag)
    raw = encode_record(msg, queue_offset=qoff, phys_offset=phys, store_timestamp=123)
    assert verify_record(raw, 0) == len(raw)
    ext, nxt = decode_record(raw)
    assert nxt == len(raw)
    assert (ext.topic, ext.body, ext.properties, ext.queue_offset, ext.commit_log_offset) == (topic, body, props, qoff, phys)
    assert (ext.queue_id, ext.flag, ext.sys_flag, ext.born_host, ext.store_host) == (
        3, 7, sysflag, ("10.1.2.3", 50001), ("192.168.0.9", 10911))
    assert ext.magic == (m.MAGIC_V2 if len(topic.encode()) > 127 else m.MAGIC_V1)
    assert ext.msg_id == offset_msg_id(("192.168.0.9", 10911), phys)


@settings(max_examples=40)
@given(body=st.binary(min_size=1, max_size=500), flip=st.integers(0, 10_000))
def test_verify_record_detects_a_flipped_body_byte(body: bytes, flip: int) -> None:
    raw = bytearray(encode_record(_msg(body=body), queue_offset=0, phys_offset=0))
    raw[88 + flip % len(body)] ^= 0x5A
    with pytest.raises(CorruptRecordError, match="CRC"):
        verify_record(raw, 0)


def test_verify_record_rejects_bad_magic_size_and_truncation() -> None:
    raw = encode_record(_msg(), queue_offset=0, phys_offset=0)
    with pytest.raises(CorruptRecordError, match="magic"):
        verify_record(raw[:4] + b"\x00\x00\x00\x01" + raw[8:], 0)
    with pytest.raises(CorruptRecordError, match="size"):
        verify_record(raw[:-1], 0)
    with pytest.raises(CorruptRecordError, match="truncated"):
        verify_record(raw[:6], 0)
    bad_len = bytearray(raw)
    struct.pack_into(">i", bad_len, 84, 6)  # body length disagrees with the record size
    with pytest.raises(CorruptRecordError):
        verify_record(bad_len, 0)


def test_decode_records_reads_a_pull_body_and_rejects_trailing_garbage() -> None:
    raws = [encode_record(_msg(body=bytes([i]) * i), queue_offset=i, phys_offset=i * 1000) for i in range(5)]
    msgs = decode_records(b"".join(raws))
    assert [x.queue_offset for x in msgs] == list(range(5))
    assert [x.body for x in msgs] == [bytes([i]) * i for i in range(5)]
    with pytest.raises(CorruptRecordError):
        decode_records(b"".join(raws) + b"\x00\x00\x00")


def test_ipv6_born_host_is_written_as_ipv4() -> None:
    raw = encode_record(_msg(born_host=("::ffff:10.9.8.7", 1234), sys_flag=m.BORNHOST_V6_FLAG), queue_offset=0,
                        phys_offset=0)  # fmt: skip
    ext, _ = decode_record(raw)
    assert ext.born_host == ("10.9.8.7", 1234)
    assert ext.sys_flag & m.BORNHOST_V6_FLAG == 0


def test_oversized_properties_are_refused_by_the_encoder() -> None:
    with pytest.raises(ValueError, match="properties"):
        encode_record(_msg(props={"K": "v" * 40_000}), queue_offset=0, phys_offset=0)


# ------------------------------------------------------------------ ids


def test_offset_msg_id_is_32_uppercase_hex_and_decodes() -> None:
    mid = offset_msg_id(("10.1.2.3", 10911), 0x1234)
    assert mid == "0A01020300002A9F0000000000001234"
    assert decode_offset_msg_id(mid) == ("10.1.2.3", 10911, 0x1234)
    with pytest.raises(ValueError):
        decode_offset_msg_id("ABC")


def test_new_uniq_ids_are_unique_32_hex_chars() -> None:
    ids = {m.new_uniq_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 32 and i == i.upper() and int(i, 16) >= 0 for i in ids)


# ------------------------------------------------------------------ batch body


@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300), _record_props), max_size=6))
def test_batch_body_round_trip(entries: list[tuple[int, bytes, dict[str, str]]]) -> None:
    assert parse_batch_body(encode_batch_body(entries)) == entries


def test_batch_body_layout_matches_the_java_encoder() -> None:
    body = encode_batch_body([(5, b"abc", {"K": "v"})])
    total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, 0)
    assert (total, magic, crc, flag, blen) == (len(body), 0, 0, 5, 3)
    assert body[20:23] == b"abc" and struct.unpack_from(">h", body, 23)[0] == 4 and body[25:] == b"K\x01v\x02"


@pytest.mark.parametrize("cut", [1, 10, 21, 23])  # 24 would drop the whole second entry
def test_truncated_batch_body_is_rejected(cut: int) -> None:
    body = encode_batch_body([(0, b"abc", {"K": "v"}), (0, b"de", {})])
    with pytest.raises(ValueError):
        parse_batch_body(body[:-cut])


def test_batch_entry_with_inconsistent_lengths_is_rejected() -> None:
    body = bytearray(encode_batch_body([(0, b"abc", {"K": "v"})]))
    struct.pack_into(">i", body, 16, 100)  # body length past the entry
    with pytest.raises(ValueError):
        parse_batch_body(bytes(body))
