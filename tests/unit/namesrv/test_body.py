"""RegisterBrokerBody codecs (JSON, compressed, pre-V3_0_11 wrapper) and the fastjson-tolerant reader."""

from __future__ import annotations

import struct
import zlib

import orjson
import pytest

from brokerd.namesrv.body import (
    BodyError,
    DataVersion,
    TopicConfig,
    TopicMemo,
    crc32,
    decode_register_body,
    encode_register_body,
    encode_wrapper_body,
)
from brokerd.namesrv.client import build_register_body
from brokerd.namesrv.lenient_json import LenientJSONError, loads

TCS = {
    "TBW102": {"topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7,
               "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}},
    "T1": {"topicName": "T1", "readQueueNums": 4, "writeQueueNums": 2, "perm": 6, "topicFilterType": "MULTI_TAG",
           "topicSysFlag": 3, "order": True, "attributes": {"+message.type": "NORMAL"}},
}
DV = {"counter": 5, "stateVersion": 2, "timestamp": 1700000000000}


def test_json_body_round_trip_keeps_every_topic_field() -> None:
    data = build_register_body(TCS, DV)
    obj = orjson.loads(data)
    assert obj["topicConfigSerializeWrapper"]["topicConfigTable"]["T1"] == TCS["T1"]
    body = decode_register_body(data, compressed=False, version=479)
    assert body.data_version == DataVersion(5, 2, 1700000000000)
    assert body.topic_config_table["T1"] == TopicConfig("T1", 4, 2, 6, "MULTI_TAG", 3, True,
                                                        {"+message.type": "NORMAL"})
    assert body.filter_server_list == []


def test_compressed_body_round_trip_drops_only_what_java_drops() -> None:
    data = build_register_body(TCS, DV, compressed=True)
    assert data[:1] == b"\x78"
    body = decode_register_body(data, compressed=True, version=479)
    t1 = body.topic_config_table["T1"]
    # The line encoding carries name, queue nums, perm, filter type and attributes; not sysFlag/order.
    assert (t1.read_queue_nums, t1.write_queue_nums, t1.perm, t1.topic_filter_type) == (4, 2, 6, "MULTI_TAG")
    assert t1.attributes == {"+message.type": "NORMAL"} and t1.topic_sys_flag == 0
    assert body.data_version == DataVersion(5, 2, 1700000000000)


def _java_compressed(with_mapping: bool) -> bytes:
    """Built by hand the way Java's RegisterBrokerBody.encode(true) lays it out."""
    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b
    raw = chunk(b'{"counter":1,"stateVersion":0,"timestamp":42}') + struct.pack(">i", 2)
    raw += chunk(b"TBW102 8 8 7 SINGLE_TAG {}") + chunk(b"T9 3 3 6 SINGLE_TAG")
    raw += chunk(b"[]")
    if with_mapping:
        raw += struct.pack(">i", 1) + chunk(b'{"topic":"T9","bname":"broker-a","totalQueues":3}')
    return zlib.compress(raw, 9)


@pytest.mark.parametrize("version,with_mapping", [(479, True), (401, False)])
def test_java_compressed_layout_decodes(version: int, with_mapping: bool) -> None:
    body = decode_register_body(_java_compressed(with_mapping), compressed=True, version=version)
    assert sorted(body.topic_config_table) == ["T9", "TBW102"]
    assert body.topic_config_table["TBW102"].perm == 7
    assert body.data_version == DataVersion(1, 0, 42)
    assert ("T9" in body.topic_queue_mapping_info) == with_mapping


def test_zlib_body_is_recognised_despite_compressed_false_header() -> None:
    # Java 5.x always sends compressed=false in the header, even for a compressed body.
    body = decode_register_body(build_register_body(TCS, DV, compressed=True), compressed=False, version=479)
    assert sorted(body.topic_config_table) == ["T1", "TBW102"]


def test_old_broker_sends_a_bare_wrapper() -> None:
    data = encode_wrapper_body({"T1": TCS["T1"]}, DataVersion(1, 0, 9))
    body = decode_register_body(data, compressed=False, version=36)
    assert list(body.topic_config_table) == ["T1"] and body.filter_server_list is None


def test_missing_body_is_an_empty_registration() -> None:
    body = decode_register_body(None, compressed=False, version=479)
    assert body.topic_config_table == {} and body.data_version == DataVersion(0, 0, 0)


def test_fastjson_lenient_body_is_accepted() -> None:
    data = (b"{filterServerList:[],topicConfigSerializeWrapper:{dataVersion:{counter:2,timestamp:7},"
            b"topicConfigTable:{'T1':{topicName:'T1',readQueueNums:4,writeQueueNums:4,perm:6,},},},}")
    body = decode_register_body(data, compressed=False, version=479)
    assert body.topic_config_table["T1"].read_queue_nums == 4
    assert body.data_version == DataVersion(2, 0, 7)


@pytest.mark.parametrize("data,compressed,msg", [
    (b"not json at all", False, "not JSON"),
    (b"[1,2]", False, "JSON object"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}', False, "readQueueNums"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicFilterType":"SQL"}}}}', False, "topicFilterType"),
    (b"\x00\x01garbage", True, "zlib"),
    (zlib.compress(struct.pack(">i", 100) + b"{}"), True, "out of bounds"),
    (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3) + b"a b"), True,
     "expected at least 5"),
])
def test_bad_bodies_raise_a_clear_body_error(data: bytes, compressed: bool, msg: str) -> None:
    with pytest.raises(BodyError, match=msg):
        decode_register_body(data, compressed=compressed, version=479)


def test_zip_bomb_is_refused() -> None:
    from brokerd.namesrv import body as body_mod

    data = zlib.compress(b"\x00" * 2_000_000)
    with pytest.raises(BodyError, match="inflates beyond"):
        body_mod.inflate(data, limit=1_000_000)


def test_topic_config_line_keeps_attributes_with_spaces() -> None:
    tc = TopicConfig("T", 1, 2, 6, attributes={"k": "a b"})
    assert TopicConfig.decode_line(tc.encode_line()).attributes == {"k": "a b"}


def test_crc32_is_masked_positive() -> None:
    assert crc32(b"a") == 0xE8B7BE43 & 0x7FFFFFFF
    assert crc32(b"") == 0 and crc32(None) == 0


def test_encode_accepts_topic_config_objects() -> None:
    data = encode_register_body({"T": TopicConfig("T", 2, 2, 6)}, DataVersion(), compressed=True, version=300)
    assert list(decode_register_body(data, compressed=True, version=300).topic_config_table) == ["T"]


def test_lenient_reader() -> None:
    assert loads(b'{0:"10.0.0.1:10911",1:\'x\',}') == {"0": "10.0.0.1:10911", "1": "x"}  # port-ok: address data, nothing binds it
    assert loads('{"a":[1,,2,],"b":-1.5e3,"c":null,"d":"\\u00e9\\n"}') == {"a": [1, 2], "b": -1500.0, "c": None,
                                                                           "d": "é\n"}
    for bad in (b"{", b'{"a" 1}', b"[1,2", b"{a:b}", b'"abc', b"1 2"):
        with pytest.raises(LenientJSONError):
            loads(bad)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_re_registration_takes_unchanged_topics_as_they_were_and_checks_the_changed_ones(compressed: bool) -> None:
    first = TopicMemo()
    a = decode_register_body(build_register_body(TCS, DV, compressed=compressed), compressed=compressed, version=479,
                             memo=first)
    changed = {**TCS, "T1": {**TCS["T1"], "perm": 2}, "T2": {**TCS["T1"], "topicName": "T2"}}
    second = TopicMemo(first.current)
    b = decode_register_body(build_register_body(changed, DV, compressed=compressed), compressed=compressed,
                             version=479, memo=second)
    assert b.topic_config_table == decode_register_body(build_register_body(changed, DV, compressed=compressed),
                                                        compressed=compressed, version=479).topic_config_table
    assert b.topic_config_table["TBW102"] is a.topic_config_table["TBW102"]  # unchanged: the same object
    assert b.topic_config_table["T1"].perm == 2 and b.topic_config_table["T1"] is not a.topic_config_table["T1"]
    assert len(second.current) == 3  # this registration's topics, for the next one
    bad = {**TCS, "T1": {**TCS["T1"], "topicFilterType": "NOPE"}}  # a changed config is validated again
    if not compressed:
        with pytest.raises(BodyError):
            decode_register_body(build_register_body(bad, DV), compressed=False, version=479, memo=TopicMemo(second.current))
