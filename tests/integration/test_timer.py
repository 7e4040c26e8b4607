"""Timer messages against a real container process (tests/support.Cluster): timers reach their real topic at their
time and never before, bad ones are refused with RocketMQ's code and nothing stored while the connection serves
on, RECALL_MESSAGE withdraws a pending one, and a SIGKILL with timers pending (and while they fire) leaves every
timer delivered exactly once after the restart."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from brokerd import message as m
from brokerd.message import MessageExt, decode_records, encode_properties
from brokerd.remoting import RemotingClient, RemotingCommand, request
from brokerd.timer.core import TIMER_TOPIC
from brokerd.timer.handle import encode_handle
from tests.support import Cluster, wait_for

pytestmark = pytest.mark.integration

BROKER: dict[str, Any] = {"timerPrecisionMs": 100, "recallMessageEnable": "true", "timerMaxDelaySec": 3600}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def send_request(topic: str, props: dict[str, str], body: bytes = b"timer-body", qid: int = 0) -> RemotingCommand:
    return request(310, {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0",
                         "g": str(now_ms()), "h": "0", "i": encode_properties(props).decode(), "j": "0",
                         "k": "false"}, body)  # fmt: skip


async def pull_all(client: RemotingClient, addr: str, topic: str, qid: int = 0) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = 0
    while True:
        r = await client.invoke(addr, request(11, {
            "consumerGroup": "g_timer_check", "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0"}), 5)  # fmt: skip
        if r.code != 0:
            return out
        msgs = decode_records(r.body or b"")
        out += msgs
        offset = int(r.ext["nextBeginOffset"])


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    cl = Cluster(tmp_path, brokers=1, **BROKER)
    try:
        yield cl.start()
    finally:
        cl.stop()


async def _sends(addr: str, reqs: list[RemotingCommand], client: RemotingClient) -> list[RemotingCommand]:
    sem = asyncio.Semaphore(64)

    async def one(req: RemotingCommand) -> RemotingCommand:
        async with sem:
            for _ in range(50):
                r = await client.invoke(addr, req, 10)
                if r.code != 2:  # SYSTEM_BUSY (overload shedding): sent again, as a client does
                    return r
                await asyncio.sleep(0.05)  # sleep-ok: a client's back-off before resending
            return r

    return list(await asyncio.gather(*(one(r) for r in reqs)))


def test_timers_arrive_at_their_time_and_bad_ones_are_refused_on_a_serving_connection(cluster: Cluster) -> None:
    addr = cluster.broker_addr()

    async def run() -> None:
        client = RemotingClient()  # one connection for everything below: it keeps serving after each refusal
        try:
            base = now_ms() + 1500
            reqs = [send_request("TimerT", {m.UNIQ_KEY: f"D{i}", m.TIMER_DELIVER_MS: str(base + 20 * i)})
                    for i in range(50)]
            reqs += [send_request("TimerT", {m.UNIQ_KEY: f"S{i}", m.TIMER_DELAY_SEC: "2"}) for i in range(25)]
            reqs += [send_request("TimerT", {m.UNIQ_KEY: f"M{i}", m.TIMER_DELAY_MS: str(1200 + i)}) for i in range(25)]
            answers = await _sends(addr, reqs, client)
            assert all(a.code == 0 and a.ext.get("recallHandle") for a in answers), [a.remark for a in answers][:3]
            parked = await pull_all(client, addr, TIMER_TOPIC)
            assert len(parked) == 100 and not await pull_all(client, addr, "TimerT")
            for bad, code in (({m.TIMER_DELAY_SEC: "3601"}, 13), ({m.TIMER_DELIVER_MS: str(now_ms() + 3_700_000)}, 13),
                              ({m.TIMER_DELAY_MS: "soon"}, 13), ({m.TIMER_DELAY_SEC: "1.5"}, 13),
                              ({m.TIMER_DELIVER_MS: str(now_ms() - 5), m.TIMER_DEL_UNIQKEY: "TimerT+X"}, 13)):
                r = await client.invoke(addr, send_request("TimerT", {m.UNIQ_KEY: "BAD", **bad}), 5)
                assert r.code == code and "timer message illegal" in (r.remark or ""), (bad, r.code, r.remark)
            assert len(await pull_all(client, addr, TIMER_TOPIC)) == 100  # nothing stored for them
            deadline = time.monotonic() + 20
            got: list[MessageExt] = []
            while len(got) < 100 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # sleep-ok: polling the real topic with a deadline
                got = await pull_all(client, addr, "TimerT")
            assert sorted(x.properties[m.UNIQ_KEY] for x in got) == sorted(
                [f"D{i}" for i in range(50)] + [f"S{i}" for i in range(25)] + [f"M{i}" for i in range(25)])
            late = [x.store_timestamp - int(x.properties[m.TIMER_OUT_MS]) for x in got]
            assert min(late) >= 0, sorted(late)[:5]  # never before its time
            assert sorted(late)[int(0.9 * len(late))] < 1000, sorted(late)  # loose: the benchmark measures it
            assert all(m.REAL_TOPIC not in x.properties and x.properties.get(m.TIMER_DEQUEUE_MS) for x in got)
            # what a consumer pulls is the message as sent (and as the send path stored it: CLUSTER) plus RocketMQ's
            # timer properties: nothing of the firing batch it went out in
            own = {m.UNIQ_KEY, m.TIMER_DELIVER_MS, m.TIMER_DELAY_SEC, m.TIMER_DELAY_MS, m.CLUSTER}
            timer_keys = {m.TIMER_OUT_MS, m.TIMER_ENQUEUE_MS, m.TIMER_DEQUEUE_MS}
            assert all(set(x.properties) <= own | timer_keys for x in got), {k for x in got for k in x.properties}
        finally:
            await client.close()

    asyncio.run(run())


def test_recall_withdraws_a_pending_timer_and_answers_rocketmqs_codes(cluster: Cluster) -> None:
    addr = cluster.broker_addr()

    async def recall(client: RemotingClient, topic: str, handle: str) -> RemotingCommand:
        return await client.invoke(addr, request(370, {"producerGroup": "pg", "topic": topic,
                                                       "recallHandle": handle}), 5)

    async def run() -> None:
        client = RemotingClient()
        try:
            due = now_ms() + 2000
            answers = await _sends(addr, [send_request("RecallT", {m.UNIQ_KEY: f"R{i}", m.TIMER_DELIVER_MS: str(due)})
                                          for i in range(4)], client)
            handles = [a.ext["recallHandle"] for a in answers]
            r = await recall(client, "RecallT", handles[1])
            assert (r.code, r.ext.get("msgId")) == (0, "R1"), r.remark
            assert (await recall(client, "RecallT", handles[1])).code == 0  # again: nothing left to recall, SUCCESS
            assert (await recall(client, "RecallT", "@@not a handle@@")).code == 604
            assert (await recall(client, "OtherT", handles[2])).code == 17  # no such topic
            await _sends(addr, [send_request("OtherT", {m.UNIQ_KEY: "O"})], client)
            r = await recall(client, "OtherT", handles[2])
            assert (r.code, r.remark) == (604, "recall failed, topic not match")
            past = encode_handle("RecallT", "broker-a", str(now_ms() - 1), "R3")
            assert (await recall(client, "RecallT", past)).remark == "recall failed, timestamp invalid"
            other_broker = encode_handle("RecallT", "broker-x", str(due + 1), "R3")
            assert (await recall(client, "RecallT", other_broker)).code == 604
            deadline = time.monotonic() + 15
            got: list[MessageExt] = []
            while len(got) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # sleep-ok: polling the real topic with a deadline
                got = await pull_all(client, addr, "RecallT")
            await asyncio.sleep(1.0)  # sleep-ok: the recalled one would have fired with the others by now
            got = await pull_all(client, addr, "RecallT")
            assert sorted(x.properties[m.UNIQ_KEY] for x in got) == ["R0", "R2", "R3"]
            r = await recall(client, "RecallT", handles[0])  # delivered: its time has passed
            assert (r.code, r.remark) == (604, "recall failed, timestamp invalid")
        finally:
            await client.close()

    asyncio.run(run())


@pytest.mark.parametrize("moment", ["pending", pytest.param("firing", marks=pytest.mark.slow)])
def test_sigkill_with_timers_pending_or_firing_delivers_each_exactly_once(tmp_path: pathlib.Path,
                                                                         moment: str) -> None:
    """``pending``: killed before any is due, some come due while the broker is down. ``firing``: 6000 timers due
    at the same moment, killed while they go out."""
    cl = Cluster(tmp_path, brokers=1, **BROKER).start()
    addr = cl.broker_addr()
    n = 600 if moment == "pending" else 6000
    try:
        async def produce() -> int:
            client = RemotingClient()
            try:
                due = now_ms() + (2500 if moment == "pending" else 8000)
                reqs = [send_request("CrashT", {m.UNIQ_KEY: f"C{i}", m.TIMER_DELIVER_MS: str(due + (i % 3) * 500
                                                                                             if moment == "pending"
                                                                                             else due)},
                                     qid=i % 4) for i in range(n)]  # fmt: skip
                answers = await _sends(addr, reqs, client)
                assert all(a.code == 0 for a in answers)
                return due
            finally:
                await client.close()

        due = asyncio.run(produce())
        if moment == "pending":
            wait_for(lambda: now_ms() >= due - 500, 10, "shortly before the first timers are due")
        else:
            wait_for(lambda: now_ms() >= due + 30, 10, "the burst is firing")
        assert cl.daemon is not None
        cl.daemon.kill(signal.SIGKILL)
        cl.stop()
        if moment == "pending":
            wait_for(lambda: now_ms() >= due + 600, 10, "some timers due while the broker is down")
        cl.start()

        async def check() -> Counter[str]:
            client = RemotingClient()
            try:
                deadline = time.monotonic() + 60
                got: list[MessageExt] = []
                while time.monotonic() < deadline:
                    got = [x for q in range(4) for x in await pull_all(client, addr, "CrashT", q)]
                    if len(got) >= n:
                        break
                    await asyncio.sleep(0.3)  # sleep-ok: polling the real topic with a deadline
                await asyncio.sleep(1.0)  # sleep-ok: a duplicate would come with the rest: look once more
                got = [x for q in range(4) for x in await pull_all(client, addr, "CrashT", q)]
                assert min(x.store_timestamp - int(x.properties[m.TIMER_OUT_MS]) for x in got) >= 0
                return Counter(x.properties[m.UNIQ_KEY] for x in got)
            finally:
                await client.close()

        counts = asyncio.run(check())
        assert counts == Counter({f"C{i}": 1 for i in range(n)}), (
            len(counts), sum(counts.values()), [k for k, v in counts.items() if v > 1][:5])
    finally:
        cl.stop()
