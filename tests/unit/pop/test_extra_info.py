"""The POP strings exactly as RocketMQ spells them (ExtraInfoUtil, KeyBuilder, BatchAck), and bad ones refused."""

from __future__ import annotations

import base64

import pytest

from brokerd.pop.extra_info import (
    ExtraInfoError,
    PopInfo,
    bitset_indexes,
    build_extra_info,
    encode_bitset,
    normal_topic,
    parse_batch_ack,
    parse_extra_info,
    parse_info,
    pop_retry_topic,
    real_topic,
    topic_mark,
)


def test_checkpoint_string_round_trip_and_marks() -> None:
    s = build_extra_info(10, 1700000000000, 60000, 0, "T", "broker-a", 3, 12)
    assert s == "10 1700000000000 60000 0 0 broker-a 3 12"
    ei = parse_extra_info(s + " 123456")  # the proxy's receipt handle: a ninth field (commit-log offset)
    assert (ei.ck_offset, ei.pop_time, ei.invisible_time, ei.revive_qid, ei.mark, ei.broker_name, ei.queue_id,
            ei.msg_offset) == (10, 1700000000000, 60000, 0, "0", "broker-a", 3, 12)
    assert ei.deadline == 1700000000000 + 60000 and not ei.is_order
    assert parse_extra_info("1 2 3 999 0 b").is_order
    assert build_extra_info(0, 1, 2, 999, "%RETRY%G_T", "b", 0) == "0 1 2 999 1 b 0"
    assert topic_mark("%RETRY%G+T") == "2" and topic_mark("%RETRY%G") == "1" and topic_mark("T") == "0"


def test_retry_topic_names_as_keybuilder() -> None:
    assert pop_retry_topic("T", "G", False) == "%RETRY%G_T"
    assert pop_retry_topic("T", "G", True) == "%RETRY%G+T"
    assert real_topic("T", "G", "1") == "%RETRY%G_T" and real_topic("T", "G", "2") == "%RETRY%G+T"
    assert real_topic("T", "G", "0") == "T"
    assert normal_topic("%RETRY%G_T_x", "G") == "T_x" and normal_topic("%RETRY%G+T", "G") == "T"
    with pytest.raises(ExtraInfoError):
        real_topic("T", "G", "7")


@pytest.mark.parametrize("bad", [None, "", "1 2 3", "1 2 3 4 9 b", "a 2 3 4 0 b", "1 2 3 4 0 ", "-1 2 3 0 0 b",
                                 "1 2 3 4 0 b x", "1 2 3 4 0 b 0 y"])
def test_malformed_checkpoint_strings_are_refused(bad: str | None) -> None:
    with pytest.raises(ExtraInfoError):
        parse_extra_info(bad)


def test_answer_fields_as_the_java_client_parses_them() -> None:
    info = PopInfo()
    info.add_queue("T", 0, 5, [5, 6, 8])
    info.add_queue("%RETRY%G_T", 0, 0, [0])
    info.add_order_counts("T", 0, {5: 0, 6: 2})
    h = info.header(True)
    assert h == {"startOffsetInfo": "0 0 5;1 0 0", "msgOffsetInfo": "0 0 5,6,8;1 0 0",
                 "orderCountInfo": "0 qo0%6 2;0 0 0"}
    assert parse_info(h["startOffsetInfo"], "s") == {"0@0": ["5"], "1@0": ["0"]}
    assert parse_info(h["orderCountInfo"], "o")["0@qo0%6"] == ["2"]
    with pytest.raises(ExtraInfoError):
        parse_info("0 0", "s")
    with pytest.raises(ExtraInfoError):
        parse_info("0 0 1;0 0 2", "s")


def test_batch_ack_bitset_as_fastjson_writes_java_bitsets() -> None:
    # java.util.BitSet with bits 0, 3, 9 -> toByteArray() = [0x09, 0x02] -> fastjson base64 "CQI="
    assert bitset_indexes("CQI=") == (0, 3, 9)
    assert bitset_indexes([9, 2]) == (0, 3, 9)
    assert encode_bitset([0, 3, 9]) == base64.b64encode(bytes([9, 2])).decode()
    a = parse_batch_ack({"c": "G", "t": "T", "r": "1", "so": 4, "q": 1, "rq": 0, "pt": 77, "it": 1000, "b": "CQI="})
    assert list(a.offsets) == [4, 7, 13] and a.mark == "1"
    long = parse_batch_ack({"consumerGroup": "G", "topic": "T", "retry": "0", "startOffset": "4", "queueId": 1,
                            "reviveQueueId": 999, "popTime": 77, "invisibleTime": 1000, "bitSet": "AQ=="})
    assert list(long.offsets) == [4] and long.revive_qid == 999
    bad: object
    for bad in ({"c": "G"}, {"c": "G", "t": "T", "so": "x"}, {"c": "G", "t": "T", "b": "!!"}, [],
                {"c": "G", "t": "T", "r": "5"}):
        with pytest.raises(ExtraInfoError):
            parse_batch_ack(bad)
