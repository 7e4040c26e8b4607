"""RocketMQ's own Java remoting client (5.3.1) in POP mode against the container: its admin API sets the group's
request mode (SET_MESSAGE_REQUEST_MODE), its push consumer asks for its assignment (QUERY_ASSIGNMENT), pops,
acks, and changes the invisible time of what its listener fails; after mqadmin resetOffsetByTime it reads the
topic again."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers.mqadmin import MQAdmin
from tests.java_support import java_command
from tests.pop_client import PopClient
from tests.support import Cluster, arpc, rpc, wait_for

pytestmark = pytest.mark.integration


def test_java_push_consumer_in_pop_mode(tmp_path: Path) -> None:
    c = Cluster(tmp_path, brokers=2).start()
    topic, group, n, fail_once = "T_pop_java", "G_pop_java", 24, 3
    try:
        async def produce() -> None:
            for addr in (c.broker_addr(0), c.broker_addr(1)):
                r = await arpc(addr, 17, {"topic": topic, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
                assert r.code == 0
            clients = [PopClient(c.broker_addr(0), "P"), PopClient(c.broker_addr(1), "P")]
            for i in range(n):
                assert (await clients[i % 2].send(topic, f"j-{i}".encode(), qid=i % 4 // 2)).code == 0
            for cl in clients:
                await cl.close()

        asyncio.run(produce())
        out = subprocess.run(java_command("remoting", "org.pyrmq.tests.pop.PopPushConsumer",
                                          [c.namesrv, topic, group, str(n), str(fail_once), "90"]),
                             capture_output=True, text=True, timeout=150)
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        recv = [r["recv"] for r in rows if "recv" in r]
        summary = next((r["summary"] for r in rows if "summary" in r), None)
        assert summary is not None, out.stdout[-3000:] + out.stderr[-3000:]
        assert len([r for r in rows if "modeSet" in r]) == 2
        assert summary["popQueues"] > 0 and summary["pullQueues"] == 0  # consumed by POP, not by pull
        assert summary["done"] == n
        by_body: dict[str, list[dict[str, Any]]] = {}
        for r in recv:
            by_body.setdefault(str(r["body"]), []).append(r)
        assert sorted(by_body) == sorted(f"j-{i}" for i in range(n))
        for body, seen in by_body.items():
            assert all(s["topic"] == topic for s in seen)
            ok = [k for k, s in enumerate(seen) if not s["failed"]]
            assert ok and ok[0] == len(seen) - 1, (body, seen)  # nothing after the acknowledged delivery
            if int(body.split("-")[1]) < fail_once:
                assert seen[0]["failed"] and seen[-1]["reconsumeTimes"] >= 1, (body, seen)
        for i, addr in enumerate((c.broker_addr(0), c.broker_addr(1))):  # the group's offsets: everything acked
            for qid in range(2):
                off = rpc(addr, 14, {"consumerGroup": group, "topic": topic, "queueId": str(qid)})
                assert off.code == 0 and int(off.ext["offset"]) == n // 4, (i, qid, off.ext)
    finally:
        assert c.stop() == 0


def _java_pop(c: Cluster, topic: str, group: str, n: int) -> tuple[list[str], dict[str, Any]]:
    out = subprocess.run(java_command("remoting", "org.pyrmq.tests.pop.PopPushConsumer",
                                      [c.namesrv, topic, group, str(n), "0", "60"]),
                         capture_output=True, text=True, timeout=120)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    summary = next((r["summary"] for r in rows if "summary" in r), None)
    assert summary is not None, out.stdout[-3000:] + out.stderr[-3000:]
    return [str(r["recv"]["body"]) for r in rows if "recv" in r], summary


def _offsets(addr: str, group: str, topic: str, want: list[int]) -> list[int]:
    def now() -> list[int]:
        return [int(rpc(addr, 14, {"consumerGroup": group, "topic": topic, "queueId": str(q)}).ext.get("offset", -1))
                for q in range(len(want))]
    wait_for(lambda: now() == want, 10, f"the group's offsets to be {want}")
    return now()


@pytest.mark.slow
def test_reset_offset_by_time_makes_a_pop_group_read_again_after_a_restart(tmp_path: Path) -> None:
    """mqadmin resetOffsetByTime on a POP group (INVOKE_BROKER_TO_RESET_OFFSET, RocketMQ's resetPopOffset): the
    Java POP consumer reads everything again from the reset point, also after the broker was killed and restarted
    in between (the reset is a record of the revive log)."""
    c = Cluster(tmp_path, brokers=1).start()
    topic, group, n = "T_pop_reset", "G_pop_reset", 12
    bodies = sorted(f"r-{i}" for i in range(n))
    try:
        before = int(time.time() * 1000) - 1000

        async def produce() -> None:
            addr = c.broker_addr()
            assert (await arpc(addr, 17, {"topic": topic, "readQueueNums": "2", "writeQueueNums": "2",
                                          "perm": "6"})).code == 0
            p = PopClient(addr, "P")
            for i in range(n):
                assert (await p.send(topic, f"r-{i}".encode(), qid=i % 2)).code == 0
            await p.close()

        asyncio.run(produce())
        recv, summary = _java_pop(c, topic, group, n)
        assert sorted(set(recv)) == bodies and summary["done"] == n and summary["popQueues"] > 0
        _offsets(c.broker_addr(), group, topic, [n // 2, n // 2])
        out = MQAdmin(c.namesrv).ok("resetOffsetByTime", "-g", group, "-t", topic, "-s", str(before))
        assert "broker-a" in out and out.count("\n") >= 3, out
        _offsets(c.broker_addr(), group, topic, [0, 0])
        assert c.daemon is not None
        c.daemon.kill()
        c.start()
        recv, summary = _java_pop(c, topic, group, n)
        assert sorted(set(recv)) == bodies and summary["done"] == n  # read again, from the reset point
        _offsets(c.broker_addr(), group, topic, [n // 2, n // 2])
    finally:
        assert c.stop() == 0
