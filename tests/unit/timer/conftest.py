"""In-process brokers for the timer tests: real store files under tmp_path, no sockets. The timer service's
background tasks are paused so that a test drives it step by step (``TimerService.step``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from brokerd import message as m
from brokerd.broker import Broker
from brokerd.broker_config import BrokerConfig
from brokerd.message import MessageInner, decode_record
from brokerd.remoting import RemotingClient
from brokerd.timer.core import TIMER_TOPIC

BrokerFactory = Callable[..., Awaitable[Broker]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def make_broker(tmp_path: Path) -> AsyncIterator[BrokerFactory]:
    started: list[Broker] = []

    async def factory(root: Path | None = None, *, manual: bool = True, **cfg: Any) -> Broker:
        kw: dict[str, Any] = {"max_hash_slot_num": 5000, "max_index_num": 20000, "mapped_file_size_commit_log": 8 << 20,
                              "timer_precision_ms": 100, "timer_flush_interval_ms": 200, "recall_message_enable": True,
                              "disk_space_warning_level_ratio": 1.0, "disk_space_clean_forcibly_ratio": 1.0, **cfg}
        conf = BrokerConfig(store_path_root_dir=str(root or tmp_path / "b"), listen_port=30911,  # port-ok: no bind
                            broker_name="timer-test", **kw)
        b = Broker(conf, RemotingClient(), namesrv_addrs=[])
        await b.start()
        if manual:
            await b.timers.pause()
        started.append(b)
        return b

    yield factory
    for b in started:
        if b.status == "running":
            await b.shutdown()


def timer_msg(topic: str, uniq: str, due_ms: int, body: bytes = b"payload", **props: str) -> MessageInner:
    return MessageInner(topic=topic, queue_id=0, body=body, flag=0,
                        properties={m.UNIQ_KEY: uniq, m.TIMER_DELIVER_MS: str(due_ms), m.KEYS: uniq, **props},
                        sys_flag=0, born_timestamp=now_ms(), born_host=("10.0.0.1", 5000),
                        store_host=("127.0.0.1", 30911))  # fmt: skip; port-ok: the host written into records, nothing binds it


def send_timer(b: Broker, msg: MessageInner) -> None:
    """What the send processor does with a timer message."""
    assert b.timers.park(msg) is None and msg.topic == TIMER_TOPIC
    res = b.store.append_message(msg)
    assert res.ok
    b.timers.parked(msg, res.queue_offset, res.wrote_offset, res.wrote_bytes)


def delivered(b: Broker, topic: str, queue_id: int = 0) -> list[tuple[str, int, int]]:
    """(UNIQ_KEY, store time, due time) of the messages in a real queue, in order."""
    out = []
    offset = 0
    while r := b.store.get_message(topic, queue_id, offset, 32).buffers:  # 32 at most per read
        for buf in r:
            e, _ = decode_record(buf)
            out.append((e.properties[m.UNIQ_KEY], e.store_timestamp, int(e.properties[m.TIMER_OUT_MS])))
        offset += len(r)
    return out


async def steps_until(b: Broker, cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Drive the timer service until ``cond`` holds (failing after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:  # one step at least: the service notices what changed (a truncation) in a step
        wait = await b.timers.step()
        if cond():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(min(wait, 0.01))  # sleep-ok: the step's own wait, bounded; the loop is what is tested
