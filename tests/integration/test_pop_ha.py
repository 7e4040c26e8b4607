"""POP under HA (controller mode, the shipped 2-container cross layout, incremental metadata sync): the master's
container is killed in the middle of POP consumption; the promoted slave rebuilds the POP state from the
checkpoints and acks its log received and serves the consumers: every message delivered, none whose ack was
answered SUCCESS delivered again, the consumer offset on the new master past every acknowledged message."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from brokerd.remoting import RemotingClient, request
from tests.ha_cluster import HACluster
from tests.integration.helpers.pop_workload import Seen, consume
from tests.pop_client import PopClient
from tests.support import rpc, wait_for

pytestmark = pytest.mark.integration

SET = "broker-a"
EXTRA = {"allowMetadataIncrementalSync": "true", "mappedFileSizeCommitLog": 32 * 1024 * 1024}


async def _make_topic(cluster: HACluster, topic: str, queues: int) -> str:
    master = await cluster.amaster_of(SET)
    assert master is not None
    cli = RemotingClient()
    try:
        r = await cli.invoke(master, request(17, {"topic": topic, "readQueueNums": str(queues),
                                                  "writeQueueNums": str(queues), "perm": "6"}), 5.0)
        assert r.code == 0, r.remark
    finally:
        await cli.close()
    return master


def _run(cluster: HACluster, topic: str, group: str, n: int, seen: Seen, *, kill_at: float, batch: bool) -> str:
    bodies = [f"h-{i}".encode() for i in range(n)]

    async def run() -> str:
        master = await _make_topic(cluster, topic, 4)
        p = PopClient(master, "P")
        for i, b in enumerate(bodies):
            assert (await p.send(topic, b, qid=i % 4)).code == 0  # SYNC: the slave holds it when answered
        await p.close()
        stop = asyncio.Event()

        async def where() -> str | None:
            return await cluster.amaster_of(SET)

        async def finished(addr: str) -> bool:
            return await _aoffsets(addr, group, topic) == [n // 4] * 4

        workers = [asyncio.ensure_future(consume(where, group, topic, set(bodies), seen, stop, seed=k,
                                                 batch=batch and k == 0, finished=finished)) for k in range(3)]
        deadline = time.monotonic() + 60
        while len(seen.acked_ok) < n * kill_at and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # sleep-ok: waiting for progress with a bound
        await asyncio.to_thread(cluster.kill_container, cluster.container_of(master))
        try:
            await asyncio.wait_for(asyncio.gather(*workers), 120)
        finally:
            stop.set()
            print("POP answers:", dict(seen.codes), "acked", len(seen.acked_ok), "of", n)
        new = await cluster.amaster_of(SET)
        assert new is not None and new != master
        return new

    new_master = asyncio.run(run())
    assert not seen.missing(bodies)
    assert not seen.acked_then_delivered(), seen.acked_then_delivered()[:5]
    return new_master


async def _aoffsets(addr: str, group: str, topic: str) -> list[int]:
    c = PopClient(addr, group)
    try:
        out = []
        for q in range(4):
            r = await c.call(request(14, {"consumerGroup": group, "topic": topic, "queueId": str(q)}))
            out.append(int(r.ext.get("offset", "-1")) if r.code == 0 else -1)
        return out
    finally:
        await c.close()


def _offsets(addr: str, group: str, topic: str) -> list[int]:
    return asyncio.run(_aoffsets(addr, group, topic))


def _modes(addr: str) -> dict[str, Any]:
    r = rpc(addr, 402)
    return dict(orjson.loads(r.body)) if r.code == 0 and r.body else {}


def test_failover_in_the_middle_of_pop_consumption(tmp_path: Path) -> None:
    cluster = HACluster(tmp_path, containers=2, replicas=2, broker_extra=EXTRA).start()
    try:
        cluster.wait_in_sync(SET, 2)
        # the message request mode replicates to the slave as a change record (RIP-81)
        master = asyncio.run(_make_topic(cluster, "T_pop_mode", 1))
        body = orjson.dumps({"topic": "T_pop_mode", "consumerGroup": "G_pop_mode", "mode": "POP", "popShareQueueNum": 1})
        assert rpc(master, 401, {}, body).code == 0
        slave = next(cluster.broker_addr(SET, c) for c in range(2) if cluster.broker_addr(SET, c) != master)
        wait_for(lambda: _modes(slave).get("messageRequestModeMap", {}).get("T_pop_mode"), 20, "the mode on the slave")
        seen = Seen()
        topic, group, n = "T_pop_ha", "G_pop_ha", 240
        new_master = _run(cluster, topic, group, n, seen, kill_at=0.4, batch=True)
        assert seen.errors > 0
        assert _offsets(new_master, group, topic) == [n // 4] * 4
        assert _modes(new_master)["messageRequestModeMap"]["T_pop_mode"]["G_pop_mode"]["mode"] == "POP"
    except BaseException:
        print(cluster.logs(80))
        raise
    finally:
        cluster.stop()


@pytest.mark.slow
def test_repeated_failovers_during_pop_consumption(tmp_path: Path) -> None:
    """Soak: the master's container is killed, restarted as a slave, and the new master killed in turn."""
    cluster = HACluster(tmp_path, containers=2, replicas=2, broker_extra=EXTRA).start()
    try:
        for round_ in range(3):
            cluster.wait_in_sync(SET, 2, timeout=60)
            seen = Seen()
            _run(cluster, f"T_pop_soak{round_}", f"G_pop_soak{round_}", 600, seen, kill_at=0.5, batch=round_ == 1)
            for c, d in cluster.daemons.items():
                if not d.alive():
                    cluster.start_container(c)
                    cluster.wait_container(c)
    finally:
        cluster.stop()
