"""Overload shedding (RocketMQ's BrokerFastFailure) as a pure core: a fake clock, no broker."""

from __future__ import annotations

import dataclasses

import pytest

from brokerd.broker_config import BrokerConfig, ConfigError
from brokerd.processors.admission import SendAdmission

FLUSHED = [0]  # the fake store's flushed offset (SYNC_FLUSH)


def admission(**cfg: object) -> tuple[SendAdmission, list[BrokerConfig]]:
    holder = [dataclasses.replace(BrokerConfig(), **cfg)]  # type: ignore[arg-type]
    FLUSHED[0] = 0
    return SendAdmission(lambda: holder[0], lambda: FLUSHED[0]), holder


def test_a_send_that_arrived_wait_time_ago_is_refused_whatever_kept_it_waiting() -> None:
    a, _ = admission()
    assert a.refusal(5.199, 5.0) is None  # arrived 199 ms ago
    remark = a.refusal(5.2, 5.0)
    assert remark == ("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 200ms, "
                      "size of queue: 0")
    assert not a.holds  # about this send: the next one, younger, is taken (no flow control)
    a.refuse(3)
    assert a.refused == {"timeout_clean_queue": 3, "flush_clean_queue": 0, "overload": 0, "pcbusy_clean_queue": 0}
    assert a.state_refusal(5.2) is None and a.refusal(5.2, 5.2) is None


def test_a_send_is_refused_once_the_oldest_unflushed_one_waited_too_long() -> None:
    a, _ = admission()
    first = a.waiting(3, 10.0, 100)  # arrived at 10.0
    assert a.refusal(10.199, 10.199) is None
    remark = a.refusal(10.25, 10.25)
    assert remark == ("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 250ms, "
                      "size of queue: 3")
    assert a.holds and a.state_refusal(10.25) == remark  # about the broker: a send arriving now is refused too
    a.refuse()
    FLUSHED[0] = 100  # the flush came: sends are taken again (even before the answers, e.g. waiting for replicas)
    assert a.refusal(10.3, 10.3) is None and a.pending == 3
    a.answered(first)
    assert a.pending == 0
    assert a.refused == {"timeout_clean_queue": 0, "flush_clean_queue": 1, "overload": 0, "pcbusy_clean_queue": 0}


def test_the_oldest_unanswered_send_decides_even_when_answers_come_out_of_order() -> None:
    a, _ = admission()
    old, new = a.waiting(1, 1.0, 10), a.waiting(1, 1.15, 20)
    a.answered(new)
    assert a.refusal(1.21, 1.21) is not None  # the old one still waits
    a.answered(old)
    assert a.refusal(1.21, 1.21) is None and a.pending == 0


def test_a_full_queue_refuses_at_once() -> None:
    a, _ = admission(send_thread_pool_queue_capacity=5)
    entry = a.waiting(5, 0.0, 10)
    remark = a.refusal(0.001, 0.001)
    assert remark == "[OVERLOAD]system busy, start flow control for a while" and a.holds
    a.refuse()
    assert a.refused["overload"] == 1
    a.answered(entry)
    assert a.refusal(0.002, 0.002) is None


def test_a_slow_put_means_a_busy_page_cache_for_a_while() -> None:
    a, _ = admission()
    a.put_took(0.9, 5.0)
    assert a.refusal(5.0, 5.0) is None  # under osPageCacheBusyTimeOutMills
    a.put_took(1.2, 6.0)
    remark = a.refusal(6.1, 6.1)
    assert remark is not None and remark.startswith("[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while,"
                                                    " period in queue: 1200ms, size of queue: 0")
    assert a.refusal(6.2, 6.2) is None  # flow control lasts waitTimeMillsInSendQueue


def test_live_config_changes_apply_and_shedding_can_be_switched_off() -> None:
    a, holder = admission()
    a.waiting(1, 0.0, 10)
    assert a.refusal(0.5, 0.5) is not None and a.refusal(0.5, 0.2) is not None
    holder[0] = dataclasses.replace(holder[0], wait_time_mills_in_send_queue=1000)
    assert a.refusal(0.5, 0.5) is None and a.refusal(0.5, 0.0) is None
    holder[0] = dataclasses.replace(holder[0], broker_fast_failure_enable=False)
    assert a.refusal(5.0, 0.0) is None


@pytest.mark.parametrize("key", ["waitTimeMillsInSendQueue", "sendThreadPoolQueueCapacity",
                                 "osPageCacheBusyTimeOutMills"])
def test_shedding_limits_must_be_positive(key: str) -> None:
    field = {"waitTimeMillsInSendQueue": "wait_time_mills_in_send_queue",
             "sendThreadPoolQueueCapacity": "send_thread_pool_queue_capacity",
             "osPageCacheBusyTimeOutMills": "os_page_cache_busy_time_out_mills"}[key]
    with pytest.raises(ConfigError, match=key):
        dataclasses.replace(BrokerConfig(), **{field: 0})


def test_waits_for_replicas_alone_or_an_async_flush_store_never_time_out() -> None:
    holder = [BrokerConfig()]
    a = SendAdmission(lambda: holder[0], lambda: None)  # ASYNC_FLUSH: nothing waits for the disk
    a.waiting(5, 0.0, 10)
    assert a.refusal(100.0, 100.0) is None and a.pending == 5
