"""5.x consumption through the gRPC endpoint across a container restart and an HA failover: what was acked is
never delivered again, what was received but not acked comes back after its invisible time (to a 5.x SDK
consumer), and the surviving container's endpoint serves the promoted master."""

from __future__ import annotations

import asyncio
import functools
import pathlib
import time
from typing import Any

import pytest

from brokerd.proxy import pb
from brokerd.proxy.codes import Code
from tests.ha_cluster import HACluster
from tests.integration.test_grpc_endpoint import Raw, message
from tests.integration.test_grpc_sdk import run_python
from tests.support import Cluster, free_port, wait_for

pytestmark = pytest.mark.integration

INVISIBLE_MS = 10_000  # the endpoint's minimum for a receive


async def send_all(raw: Raw, topic: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        deadline = time.monotonic() + 20
        while True:
            resp = await raw.call("SendMessage", pb.request_class("SendMessage")(messages=[message(topic, i)]))
            if resp.status.code == Code.OK or time.monotonic() > deadline:
                break
        assert resp.status.code == Code.OK, resp.status
        ids.append(resp.entries[0].message_id)
    return ids


async def receive(raw: Raw, topic: str, group: str, want: int, timeout: float = 40) -> list[Any]:
    """ReceiveMessage until ``want`` messages came (each stays invisible INVISIBLE_MS)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        req = pb.request_class("ReceiveMessage")(
            group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression={"type": 1, "expression": "*"}, batch_size=32, auto_renew=False,
            invisible_duration=pb.duration(INVISIBLE_MS), long_polling_timeout=pb.duration(5000))
        for r in await raw.stream("ReceiveMessage", req):
            if r.WhichOneof("content") == "message":
                got.append(r.message)
    return got


async def ack(raw: Raw, topic: str, group: str, msgs: list[Any]) -> list[int]:
    req = pb.request_class("AckMessage")(group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=[
        {"message_id": m.system_properties.message_id, "receipt_handle": m.system_properties.receipt_handle}
        for m in msgs])
    resp = await raw.call("AckMessage", req)
    return [int(e.status.code) for e in resp.entries]


def sdk_receive(endpoint: str, topic: str, group: str, count: int, timeout: float) -> list[dict[str, Any]]:
    rows = run_python(endpoint, [{"op": "simple", "group": group, "topic": topic},
                                 {"op": "receive", "count": count, "timeout": timeout, "invisible_s": 15}])
    return [r["recv"] for r in rows if "recv" in r]


async def test_a_restart_redelivers_only_what_was_not_acked(tmp_path: pathlib.Path) -> None:
    port = free_port()
    c = Cluster(tmp_path, brokers=1, container_extra={"enableGrpcProxy": "true", "grpcListenPort": port})
    await asyncio.to_thread(c.start)
    ep = f"127.0.0.1:{port}"
    topic, group = "Rec_restart", "G_restart"
    try:
        raw = Raw(ep)
        sent = await send_all(raw, topic, 10)
        got = await receive(raw, topic, group, 10)
        assert sorted(m.system_properties.message_id for m in got) == sorted(sent)
        assert await ack(raw, topic, group, got[:5]) == [Code.OK] * 5
        await raw.close()
        acked = {m.system_properties.message_id for m in got[:5]}
        assert await asyncio.to_thread(c.stop) == 0
        await asyncio.to_thread(c.start)
        again = await asyncio.to_thread(sdk_receive, ep, topic, group, 5, 40)
        ids = [r["id"] for r in again]
        assert set(ids) == set(sent) - acked and not acked & set(ids), (ids, acked)
        assert all(r["attempt"] == 2 for r in again)
    finally:
        await asyncio.to_thread(c.stop)


@pytest.fixture
def ha(tmp_path: pathlib.Path) -> Any:
    cl = HACluster(tmp_path, containers=2, replicas=2)
    cl.grpc = []  # type: ignore[attr-defined]
    for conf in cl.confs:
        port = free_port()
        conf.write_text(conf.read_text() + f"enableGrpcProxy=true\ngrpcListenPort={port}\n")
        cl.grpc.append(f"127.0.0.1:{port}")  # type: ignore[attr-defined]
    try:
        yield cl.start()
    finally:
        cl.stop()


@pytest.mark.slow
async def test_a_failover_in_the_middle_of_consumption(ha: HACluster) -> None:
    """Container 0 masters broker-a: SIGKILL it while messages are received and half are acked; container 1's
    endpoint serves broker-a's promoted master, and only the un-acked messages come back."""
    topic, group = "Rec_failover", "G_failover"
    survivor = ha.grpc[1]  # type: ignore[attr-defined]
    raw = Raw(survivor)
    sent = await send_all(raw, topic, 20)
    for c in (0, 1):  # the topic must be on broker-a's slave before its master dies (metadata sync)
        await asyncio.to_thread(wait_for, functools.partial(_has_topic, ha, c, topic), 20, f"the topic on container {c}")
    got = await receive(raw, topic, group, 20)
    assert sorted(m.system_properties.message_id for m in got) == sorted(sent)
    # both sets served through container 1's endpoint: broker-b in-process, broker-a (mastered in container 0) over
    # TCP after a route lookup (cluster mode)
    assert {m.system_properties.receipt_handle.split(" ")[5] for m in got} == {"broker-a", "broker-b"}
    acked_msgs = got[:10]
    assert await ack(raw, topic, group, acked_msgs) == [Code.OK] * 10
    acked = {m.system_properties.message_id for m in acked_msgs}
    in_flight = [m for m in got[10:]]
    old = await ha.amaster_of("broker-a")
    assert old is not None and ha.container_of(old) == 0
    t0 = time.monotonic()
    ha.kill_container(0)
    await asyncio.to_thread(ha.wait_master, "broker-a", old, 30)
    failover_s = time.monotonic() - t0
    # an in-flight receipt of the dead master: answered with a proto status (never a transport error)
    of_a = [m for m in in_flight if m.system_properties.receipt_handle.split(" ")[5] == "broker-a"]
    if of_a:
        codes = await ack(raw, topic, group, of_a[:1])
        assert codes[0] in (Code.OK, Code.INVALID_RECEIPT_HANDLE, Code.BAD_REQUEST, Code.PROXY_TIMEOUT,
                            Code.INTERNAL_SERVER_ERROR), codes
        if codes[0] == Code.OK:
            acked.add(of_a[0].system_properties.message_id)
    await raw.close()
    want = set(sent) - acked
    again = await asyncio.to_thread(sdk_receive, survivor, topic, group, len(want), 60)
    ids = {r["id"] for r in again}
    assert ids == want and not ids & acked, (sorted(ids), sorted(want))
    assert failover_s < 15


def _has_topic(ha: HACluster, c: int, topic: str) -> bool:
    from tests.support import topics
    return all(topic in topics(ha.broker_addr(name, cc)) for (name, cc) in ha.broker_ports if cc == c)
