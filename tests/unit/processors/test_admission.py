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


def test_a_send_is_refused_once_the_oldest_unflushed_one_waited_too_long() -> None:
    a, _ = admission()
    first = a.waiting(3, 10.0, 100)
    assert a.refusal(10.199) is None
    remark = a.refusal(10.25)
    assert remark == ("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 250ms, "
                      "size of queue: 3")
    a.refuse(remark)
    FLUSHED[0] = 100  # the flush came: sends are taken again (even before the answers, e.g. waiting for replicas)
    assert a.refusal(10.3) is None and a.pending == 3
    a.answered(first)
    assert a.pending == 0
    assert a.refused == {"timeout_clean_queue": 1, "overload": 0, "pcbusy_clean_queue": 0}


def test_the_oldest_unanswered_send_decides_even_when_answers_come_out_of_order() -> None:
    a, _ = admission()
    old, new = a.waiting(1, 1.0, 10), a.waiting(1, 1.15, 20)
    a.answered(new)
    assert a.refusal(1.21) is not None  # the old one still waits
    a.answered(old)
    assert a.refusal(1.21) is None and a.pending == 0


def test_a_full_queue_refuses_at_once() -> None:
    a, _ = admission(send_thread_pool_queue_capacity=5)
    entry = a.waiting(5, 0.0, 10)
    remark = a.refusal(0.001)
    assert remark == "[OVERLOAD]system busy, start flow control for a while"
    a.refuse(remark)
    assert a.refused["overload"] == 1
    a.answered(entry)
    assert a.refusal(0.002) is None


def test_a_slow_put_means_a_busy_page_cache_for_a_while() -> None:
    a, _ = admission()
    a.put_took(0.9, 5.0)
    assert a.refusal(5.0) is None  # under osPageCacheBusyTimeOutMills
    a.put_took(1.2, 6.0)
    remark = a.refusal(6.1)
    assert remark is not None and remark.startswith("[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while,"
                                                    " period in queue: 1200ms, size of queue: 0")
    assert a.refusal(6.2) is None  # flow control lasts waitTimeMillsInSendQueue


def test_live_config_changes_apply_and_shedding_can_be_switched_off() -> None:
    a, holder = admission()
    a.waiting(1, 0.0, 10)
    assert a.refusal(0.5) is not None
    holder[0] = dataclasses.replace(holder[0], wait_time_mills_in_send_queue=1000)
    assert a.refusal(0.5) is None
    holder[0] = dataclasses.replace(holder[0], broker_fast_failure_enable=False)
    assert a.refusal(5.0) is None


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
    assert a.refusal(100.0) is None and a.pending == 5
