"""Which sends are timer messages, when they are due and what RocketMQ answers for bad ones (brokerd/timer/core.py)."""

from __future__ import annotations

import pytest

from brokerd import message as m
from brokerd.message import MessageInner
from brokerd.timer.core import (
    MESSAGE_ILLEGAL,
    PROGRESS_TOPIC,
    START_DELIVER_TIME,
    SYSTEM_ERROR,
    TIMER_TOPIC,
    Kind,
    TimerSettings,
    classify,
    delete_key,
    illegal_remark,
    java_long,
    park,
    split_delete_key,
)

NOW = 1_700_000_000_000
S = TimerSettings(precision_ms=100, max_delay_sec=3600)


def msg(props: dict[str, str], sys_flag: int = 0, topic: str = "T") -> MessageInner:
    return MessageInner(topic=topic, queue_id=3, body=b"b", flag=0, properties=dict(props), sys_flag=sys_flag,
                        born_timestamp=NOW, born_host=("1.2.3.4", 5), store_host=("1.2.3.4", 6))


@pytest.mark.parametrize("props,due", [
    ({m.TIMER_DELIVER_MS: str(NOW + 5000)}, NOW + 5000),
    ({m.TIMER_DELAY_SEC: "7"}, NOW + 7000),
    ({m.TIMER_DELAY_MS: "1"}, NOW + 1),
    ({START_DELIVER_TIME: str(NOW + 60_000)}, NOW + 60_000),
    ({m.TIMER_DELAY_SEC: "3600"}, NOW + 3_600_000),  # exactly the max: accepted
    ({m.TIMER_DELAY_SEC: "+2"}, NOW + 2000),  # Long.parseLong takes a sign
    # TIMER_DELAY_SEC wins over TIMER_DELAY_MS over TIMER_DELIVER_MS, as RocketMQ reads them
    ({m.TIMER_DELAY_SEC: "1", m.TIMER_DELAY_MS: "2", m.TIMER_DELIVER_MS: str(NOW + 3)}, NOW + 1000),
    ({m.TIMER_DELAY_MS: "2", m.TIMER_DELIVER_MS: str(NOW + 3)}, NOW + 2),
])
def test_a_future_time_parks_the_message_until_then(props: dict[str, str], due: int) -> None:
    v = classify(msg(props), NOW, S)
    assert v.kind is Kind.PARK and v.deliver_ms == due


@pytest.mark.parametrize("props", [
    {m.TIMER_DELIVER_MS: str(NOW)}, {m.TIMER_DELIVER_MS: "0"}, {m.TIMER_DELAY_SEC: "0"}, {m.TIMER_DELAY_MS: "-5"},
    {"OTHER": "1"}, {},
])
def test_now_past_or_no_timer_property_is_a_plain_message(props: dict[str, str]) -> None:
    assert classify(msg(props), NOW, S).kind is Kind.PLAIN


@pytest.mark.parametrize("props", [
    {m.TIMER_DELAY_SEC: "3601"}, {m.TIMER_DELAY_MS: str(3_600_001)}, {m.TIMER_DELIVER_MS: str(NOW + 3_600_001)},
    {m.TIMER_DELAY_SEC: str(2**62)},  # past int64 once in ms
    {m.TIMER_DELAY_SEC: "1.5"}, {m.TIMER_DELAY_MS: "abc"}, {m.TIMER_DELIVER_MS: ""}, {m.TIMER_DELIVER_MS: " 5"},
    {m.TIMER_DELIVER_MS: str(2**63)}, {START_DELIVER_TIME: "soon"},
])
def test_beyond_the_max_or_malformed_is_refused_message_illegal(props: dict[str, str]) -> None:
    v = classify(msg(props), NOW, S)
    assert v.kind is Kind.REFUSE and v.code == MESSAGE_ILLEGAL == 13
    assert v.remark == illegal_remark(3600) and "3600000ms" in v.remark


def test_a_delay_level_wins_and_drops_the_timer_properties() -> None:
    mm = msg({m.DELAY: "3", m.TIMER_DELAY_SEC: "9999999", m.TIMER_DELIVER_MS: "x", m.TIMER_DELAY_MS: "1"})
    assert classify(mm, NOW, S).kind is Kind.PLAIN
    assert mm.properties == {m.DELAY: "3"}


def test_prepared_and_rolled_back_halves_are_left_alone_a_commit_is_a_timer() -> None:
    props = {m.TIMER_DELAY_SEC: "5"}
    assert classify(msg(props, m.TRANSACTION_PREPARED_TYPE), NOW, S).kind is Kind.PLAIN
    assert classify(msg(props, m.TRANSACTION_ROLLBACK_TYPE), NOW, S).kind is Kind.PLAIN
    assert classify(msg(props, m.TRANSACTION_COMMIT_TYPE), NOW, S).kind is Kind.PARK


def test_messages_already_in_the_timer_topic_or_with_a_due_time_are_not_parked_again() -> None:
    assert classify(msg({m.TIMER_DELAY_SEC: "5"}, topic=TIMER_TOPIC), NOW, S).kind is Kind.PLAIN
    assert classify(msg({m.TIMER_DELAY_SEC: "5", m.TIMER_OUT_MS: "1"}), NOW, S).kind is Kind.PLAIN


def test_wheel_disabled_answers_rocketmqs_system_error() -> None:
    v = classify(msg({m.TIMER_DELAY_SEC: "5"}), NOW, TimerSettings(wheel_enable=False))
    assert v.kind is Kind.REFUSE and v.code == SYSTEM_ERROR and "timerWheelEnable is false" in v.remark


def test_a_delete_key_in_the_future_deletes_in_the_past_is_refused() -> None:
    key = delete_key("T", "U1")
    assert classify(msg({m.TIMER_DELAY_SEC: "5", m.TIMER_DEL_UNIQKEY: key}), NOW, S).kind is Kind.DELETE
    v = classify(msg({m.TIMER_DELIVER_MS: str(NOW - 1), m.TIMER_DEL_UNIQKEY: key}), NOW, S)
    assert v.kind is Kind.REFUSE and v.code == MESSAGE_ILLEGAL
    assert split_delete_key(key) == ("T", "U1") and split_delete_key("nope") is None


def test_park_moves_the_message_to_the_timer_topic_keeping_its_real_place() -> None:
    mm = msg({m.TIMER_DELAY_SEC: "5", "k": "v"})
    park(mm, NOW + 5000)
    assert (mm.topic, mm.queue_id) == (TIMER_TOPIC, 0)
    assert mm.properties[m.TIMER_OUT_MS] == str(NOW + 5000)
    assert (mm.properties[m.REAL_TOPIC], mm.properties[m.REAL_QID], mm.properties["k"]) == ("T", "3", "v")
    assert mm.topic != PROGRESS_TOPIC


def test_java_long_rules() -> None:
    assert java_long("-12") == -12 and java_long("+7") == 7 and java_long(str(2**63 - 1)) == 2**63 - 1
    for bad in ("", "1e3", "0x10", "1 ", str(2**63), "٣"):
        with pytest.raises(ValueError):
            java_long(bad)


def test_settings_follow_the_broker_config() -> None:
    from brokerd.broker_config import BrokerConfig

    s = TimerSettings.of(BrokerConfig(timer_precision_ms=100, timer_max_delay_sec=60, timer_roll_window_slot=10,
                                      recall_message_enable=True))  # fmt: skip
    assert (s.precision_ms, s.max_delay_ms, s.window_ms, s.recall_enable) == (100, 60_000, 1000, True)
