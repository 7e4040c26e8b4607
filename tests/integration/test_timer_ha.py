"""Timer messages through a failover in the shipped HA deployment (tests/ha_cluster.py: 3 controllers, two
containers in the cross layout): SIGKILL the container mastering broker-a while a burst of timers is being fired and
more are pending; the slave in the other container is elected, and every timer reaches its real topic exactly once
on the new master (none lost, none twice), never before its time."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from brokerd import message as m
from brokerd.message import MessageExt
from brokerd.remoting import RemotingClient, request
from tests.ha_cluster import HACluster
from tests.integration.test_timer import _sends, now_ms, pull_all, send_request
from tests.support import topics, wait_for

pytestmark = pytest.mark.integration

TOPIC = "TimerHA"
QUEUES = 4
BURST = 8_000  # due at the same moment: firing them takes long enough for the kill to land in the middle
PENDING = 500


@pytest.fixture
def two(tmp_path: pathlib.Path) -> Iterator[HACluster]:
    cl = HACluster(tmp_path, containers=2, replicas=2, broker_extra={"timerPrecisionMs": 100})
    try:
        yield cl.start()
    finally:
        cl.stop()


def firing_started(addr: str, before: int = 0) -> bool:
    """The master has stored (and its replica confirmed) the first batch of the burst (queue 0 past ``before``)."""
    return stored_in_queue0(addr) > before


def stored_in_queue0(addr: str) -> int:
    async def ask() -> int:
        client = RemotingClient()
        try:
            r = await client.invoke(addr, request(30, {"topic": TOPIC, "queueId": "0"}), 2)
            return int(r.ext.get("offset", "0")) if r.code == 0 else 0
        finally:
            await client.close()
    return asyncio.run(ask())


async def _read_all(addr: str) -> list[MessageExt]:
    client = RemotingClient()
    try:
        return [x for q in range(QUEUES) for x in await pull_all(client, addr, TOPIC, q)]
    finally:
        await client.close()


@pytest.mark.slow
def test_a_failover_in_the_middle_of_firing_and_of_pending_timers_fires_each_once(two: HACluster) -> None:
    cl = two
    old = cl.master_of("broker-a")
    assert old is not None
    create = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
              "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip

    async def setup_and_send() -> tuple[int, int]:
        client = RemotingClient()
        try:
            assert (await client.invoke(old, request(17, create), 5)).code == 0
            burst = now_ms() + 12_000  # being fired when the master dies (the sends take a few seconds)
            later = burst + 6_000  # still pending then
            reqs = [send_request(TOPIC, {m.UNIQ_KEY: f"P{i}", m.TIMER_DELIVER_MS: str(later + i)}, qid=i % QUEUES)
                    for i in range(PENDING)]
            reqs += [send_request(TOPIC, {m.UNIQ_KEY: f"B{i}", m.TIMER_DELIVER_MS: str(burst)}, qid=i % QUEUES)
                     for i in range(BURST)]
            answers = await _sends(old, reqs, client)
            assert all(a.code == 0 and a.ext.get("recallHandle") for a in answers), Counter(
                (a.code, bool(a.ext.get("recallHandle"))) for a in answers)
            return burst, later
        finally:
            await client.close()

    wait_for(lambda: cl.in_sync("broker-a") >= 2, 30, "both replicas of broker-a in sync")
    burst, later = asyncio.run(setup_and_send())
    slave = cl.broker_addr("broker-a", 1 - cl.container_of(old))
    wait_for(lambda: TOPIC in topics(slave), 15, "the slave has the topic")
    wait_for(lambda: firing_started(old), 30, "the burst is being fired", interval=0.005)
    cl.kill_container(cl.container_of(old))
    killed_at = now_ms()
    new = cl.wait_master("broker-a", not_addr=old, timeout=30)
    assert new == slave
    n = BURST + PENDING
    deadline = time.monotonic() + 90
    got: list[MessageExt] = []
    while time.monotonic() < deadline:
        got = asyncio.run(_read_all(new))
        if len(got) >= n and now_ms() > later + 1000:
            break
        time.sleep(0.5)  # sleep-ok: polling the new master's topic with a deadline
    time.sleep(1.0)  # sleep-ok: a duplicate would come with the rest: look once more
    got = asyncio.run(_read_all(new))
    counts = Counter(x.properties[m.UNIQ_KEY] for x in got)
    fired_before = sum(1 for x in got if x.properties[m.UNIQ_KEY][0] == "B" and x.store_timestamp < killed_at)
    want = Counter({f"P{i}": 1 for i in range(PENDING)} | {f"B{i}": 1 for i in range(BURST)})
    assert counts == want, (fired_before, len(counts), sum(counts.values()),
                            [k for k, v in counts.items() if v > 1][:5], sorted(set(want) - set(counts))[:5], cl.logs(40))
    print(f"the old master had fired {fired_before} of the burst when it was killed")  # noqa: T201 - shown with -s
    assert min(x.store_timestamp - int(x.properties[m.TIMER_OUT_MS]) for x in got) >= 0


@pytest.mark.slow
def test_failover_there_and_back_with_the_old_master_rejoining(two: HACluster) -> None:
    """Kill broker-a's master in the middle of a burst; restart it (it rejoins as a slave, cutting back what it
    wrote alone, and rebuilds its timer state); then kill the new master in the middle of a second burst: the old
    one, master again, fires what its log says is due and not resolved. Every timer exactly once."""
    cl = two
    first = cl.master_of("broker-a")
    assert first is not None
    create = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
              "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip

    def burst(addr: str, tag: str, n: int) -> int:
        async def go() -> int:
            client = RemotingClient()
            try:
                await client.invoke(addr, request(17, create), 5)
                due = now_ms() + 12_000
                reqs = [send_request(TOPIC, {m.UNIQ_KEY: f"{tag}{i}", m.TIMER_DELIVER_MS: str(due)}, qid=i % QUEUES)
                        for i in range(n)]
                answers = await _sends(addr, reqs, client)
                assert all(a.code == 0 and a.ext.get("recallHandle") for a in answers)
                return due
            finally:
                await client.close()
        return asyncio.run(go())

    wait_for(lambda: cl.in_sync("broker-a") >= 2, 30, "both replicas of broker-a in sync")
    burst(first, "X", 6000)
    wait_for(lambda: TOPIC in topics(cl.broker_addr("broker-a", 1 - cl.container_of(first))), 15, "topic on slave")
    wait_for(lambda: firing_started(first), 30, "the first burst is being fired", interval=0.005)
    c_first = cl.container_of(first)
    cl.kill_container(c_first)
    second = cl.wait_master("broker-a", not_addr=first, timeout=30)
    cl.start_container(c_first)  # back as a slave of the new master
    cl.wait_container(c_first)
    wait_for(lambda: cl.in_sync("broker-a") >= 2, 60, "the old master back in sync")
    before = stored_in_queue0(second)
    burst(second, "Y", 6000)
    wait_for(lambda: firing_started(second, before), 30, "the second burst is being fired", interval=0.005)
    cl.kill_container(cl.container_of(second))
    third = cl.wait_master("broker-a", not_addr=second, timeout=30)
    assert third == first
    want = Counter({f"X{i}": 1 for i in range(6000)} | {f"Y{i}": 1 for i in range(6000)})
    deadline = time.monotonic() + 90
    got: list[MessageExt] = []
    while time.monotonic() < deadline and len(got) < len(want):
        time.sleep(0.5)  # sleep-ok: polling the master's topic with a deadline
        got = asyncio.run(_read_all(third))
    time.sleep(1.0)  # sleep-ok: a duplicate would come with the rest: look once more
    counts = Counter(x.properties[m.UNIQ_KEY] for x in asyncio.run(_read_all(third)))
    assert counts == want, (len(counts), [k for k, v in counts.items() if v > 1][:5], sorted(set(want) - set(counts))[:5])
