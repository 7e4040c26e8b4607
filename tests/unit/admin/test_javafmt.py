"""Java renderings mqadmin prints: UtilAll's time formats, timestamps typed by the operator, versions, JSON."""

from __future__ import annotations

import time

import pytest

from brokerd.admin.javafmt import (
    TimestampError,
    date_time,
    human,
    human2,
    java_hash_order,
    jstr,
    parse_timestamp,
    perm_str,
    version_desc,
)
from brokerd.admin.jsonx import ObjKey, compact, loads, object_key, pretty
from brokerd.message.javahash import java_string_hash


def local_ms(y: int, mo: int, d: int, h: int, mi: int, s: int, ms: int) -> int:
    return int(time.mktime((y, mo, d, h, mi, s, 0, 0, -1))) * 1000 + ms


def test_timestamps_the_operator_types() -> None:
    assert parse_timestamp("now", now_ms=42) == 42
    assert parse_timestamp("1676730526212") == 1676730526212
    assert parse_timestamp("2024-05-01#10:11:12:345") == local_ms(2024, 5, 1, 10, 11, 12, 345)
    for bad in ("2024-05-01 10:11:12", "yesterday", "2024-13-01#10:11:12:000", "2024-05-01#10:11:12:1234"):
        with pytest.raises(TimestampError, match="yyyy-MM-dd#HH:mm:ss:SSS"):
            parse_timestamp(bad)
    with pytest.raises(TimestampError):
        parse_timestamp("now", allow_now=False)


def test_time_renderings() -> None:
    t = local_ms(2024, 5, 1, 10, 11, 12, 5)
    assert human2(t) == "2024-05-01 10:11:12,005"
    assert human(t) == "20240501101112005"
    assert date_time(t) == "2024-05-01 10:11:12"


def test_values_as_java_prints_them() -> None:
    assert perm_str(6) == "RW-" and perm_str(7) == "RWX" and perm_str(2) == "-W-"
    assert jstr(True) == "true" and jstr(None) == "null" and jstr(1.0) == "1.0"
    assert jstr(["a", "b"]) == "[a, b]" and jstr({"k": "v"}) == "{k=v}"


def test_version_names_match_mqversion() -> None:
    assert version_desc(0) == "V3_0_0_SNAPSHOT"
    assert version_desc(479) == "V5_3_3"  # what our brokers announce
    assert version_desc(413) == "V5_0_0"
    assert version_desc(401) == "V4_9_4"  # RocketMQ 4.9.4 clients
    assert version_desc(10_000) == "V5_9_9"


def test_java_hash_order_buckets_like_hashmap() -> None:
    keys = ["UNIQ_KEY", "TAGS", "KEYS", "WAIT"]
    order = java_hash_order([java_string_hash(k) for k in keys])
    assert sorted(order) == [0, 1, 2, 3]
    # HashMap(16): bucket = (h ^ h>>>16) & 15 -- TAGS (2574055) lands before KEYS, WAIT before UNIQ_KEY
    buckets = [((java_string_hash(k) & 0xFFFFFFFF) ^ ((java_string_hash(k) & 0xFFFFFFFF) >> 16)) & 15 for k in keys]
    assert [buckets[i] for i in order] == sorted(buckets)


def test_fastjson_maps_keyed_by_objects() -> None:
    text = ('{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":5},'
            '{"brokerName":"b","queueId":1,"topic":"T"}:{"maxOffset":6}},"consumeTps":1.5}')
    d = loads(text)
    keys = list(d["offsetTable"])
    assert all(isinstance(k, ObjKey) for k in keys) and keys[1].get("queueId") == 1
    assert d["consumeTps"] == 1.5
    key = object_key('{"brokerName":"b","queueId":3,"topic":"T"}')
    assert key is not None and key.get("queueId") == 3
    assert loads("{0:'127.0.0.1:10911'}") == {0: "127.0.0.1:10911"}  # port-ok: data, nothing binds it


def test_pretty_and_compact_like_fastjson() -> None:
    assert pretty({"a": [{"b": 1}], "c": {}, "d": {0: "x", 1: "y"}}) == (
        '{\n\t"a":[\n\t\t{\n\t\t\t"b":1\n\t\t}\n\t],\n\t"c":{},\n\t"d":{0:"x",1:"y"\n\t}\n}')
    assert compact({"result": {"ip": [{"queueId": 0}]}, "f": 1.0}) == '{"result":{"ip":[{"queueId":0}]},"f":1.0}'
