"""The gRPC endpoint's worker processes (grpcWorkers): they serve the container's gRPC port beside its own endpoint
(the kernel spreads connections), reach the brokers over TCP remoting (cluster mode), and are counted in the
container's /metrics and dashboard; a killed worker is restarted with its counts kept; the container's stop stops
them and its death ends them; and one worker alone serves a real 5.x SDK (Go) through every step: sends of each
kind, the transaction check-back over Telemetry, receive / change invisible duration / ack."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from brokerd.proxy import GrpcProxyConfig, pb
from brokerd.proxy.codes import Code
from brokerd.proxy.workers import config_to_wire
from tests.integration.test_grpc_endpoint import Raw, message, metrics_port
from tests.integration.test_grpc_sdk import create_topics, pop_served, run_sdk
from tests.support import Cluster, free_port, rpc, wait_for

pytestmark = pytest.mark.integration

WORKERS = 2


def children(pid: int) -> list[int]:
    out = []
    for p in pathlib.Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def worker_pids(c: Cluster) -> list[int]:
    assert c.daemon is not None and c.daemon.proc is not None
    return [p for p in children(c.daemon.proc.pid)
            if b"brokerd.proxy.worker" in pathlib.Path(f"/proc/{p}/cmdline").read_bytes()]


def sends_ok(c: Cluster) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(c)}/metrics", timeout=5).read().decode()
    m = re.search(r'rocketmq_grpc_requests_total\{rpc="SendMessage",code="OK"\} (\d+)', text)
    return int(m.group(1)) if m else 0


def stored(c: Cluster, topic: str) -> int:
    return sum(int(rpc(c.broker_addr(), 30, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(4))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = free_port()
    c = Cluster(tmp_path_factory.mktemp("grpcworkers"), brokers=1,
                container_extra={"enableGrpcProxy": "true", "grpcListenPort": port, "grpcListenHost": "127.0.0.1",
                                 "grpcWorkers": WORKERS}).start()
    c.grpc = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    wait_for(lambda: len(worker_pids(c)) == WORKERS and "boot success" in c.daemon.output(),  # type: ignore[union-attr]
             30, "the gRPC workers running and the container started")
    yield c
    pids = worker_pids(c)
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")], "the container's stop left workers running"


async def send_from_clients(endpoint: str, topic: str, clients: int, each: int) -> list[int]:
    """``clients`` clients, each on its own connection, ``each`` sends; every answer's status code."""
    async def one(i: int) -> list[int]:
        raw = Raw(endpoint, client_id=f"worker-test-{i}@{time.time_ns()}")
        try:
            return [int((await raw.call("SendMessage", pb.request_class("SendMessage")(
                messages=[message(topic, i * 100 + k)]))).status.code) for k in range(each)]
        finally:
            await raw.close()
    return [code for codes in await asyncio.gather(*(one(i) for i in range(clients))) for code in codes]


def served_by(c: Cluster) -> set[int]:
    """The processes serving the test clients connected now (0: the container, n: worker n)."""
    dash = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(c)}/api/grpc", timeout=5).read())
    assert dash["workers"] == WORKERS
    return {int(x.get("worker", 0)) for x in dash["clients"] if x["clientId"].startswith("worker-test-")}


def test_workers_share_the_port_and_the_container_counts_their_requests(cluster: Cluster) -> None:
    topic = "GrpcWorkersShare"
    create_topic(cluster, topic)
    before = sends_ok(cluster)
    sent = 0
    # the kernel spreads new connections over the port's listeners (for a moment after a listener starts, it
    # may give the others all of them): rounds of 12 new clients until one reached a worker
    deadline = time.monotonic() + 30
    while True:
        codes = asyncio.run(send_from_clients(cluster.grpc, topic, 12, 5))  # type: ignore[attr-defined]
        assert codes == [Code.OK] * 60
        sent += 60
        assert stored(cluster, topic) == sent
        # each worker reports its counters once a second: the container's /metrics adds them to its own
        wait_for(lambda: sends_ok(cluster) - before == sent, 10, "every send counted in /metrics")  # noqa: B023
        if served_by(cluster) - {0} or time.monotonic() > deadline:
            break
    assert served_by(cluster) - {0}, "no connection reached a worker"


def test_a_killed_worker_is_restarted_and_its_counts_kept(cluster: Cluster) -> None:
    topic = "GrpcWorkersRestart"
    create_topic(cluster, topic)
    asyncio.run(send_from_clients(cluster.grpc, topic, 12, 2))  # type: ignore[attr-defined]
    wait_for(lambda: sends_ok(cluster) >= 24, 10, "the sends counted")
    counted = sends_ok(cluster)
    old = worker_pids(cluster)
    os.kill(old[0], signal.SIGKILL)
    wait_for(lambda: len(set(worker_pids(cluster)) - set(old)) == 1 and len(worker_pids(cluster)) == WORKERS, 20,
             "the killed worker replaced")
    assert sends_ok(cluster) >= counted  # a worker's last report stays in the totals
    codes = asyncio.run(send_from_clients(cluster.grpc, topic, 12, 2))  # type: ignore[attr-defined]
    assert codes == [Code.OK] * 24 and stored(cluster, topic) == 48
    assert "grpc_worker_exited" in cluster.daemon.output()  # type: ignore[union-attr]


def create_topic(c: Cluster, topic: str) -> None:
    assert rpc(c.broker_addr(), 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4"}).code == 0
    wait_for(lambda: rpc(c.namesrv, 105, {"topic": topic}).code == 0, 10, f"{topic} routable")


@pytest.fixture
def lone_worker(tmp_path: pathlib.Path) -> Iterator[tuple[Cluster, str]]:
    """A container without an endpoint of its own and one worker process on a port of its own: every call goes
    through the worker (cluster mode: the container's broker over TCP)."""
    c = Cluster(tmp_path, brokers=2, transactionTimeOut=1000, transactionCheckInterval=1000).start()
    port = free_port()
    spec = config_to_wire(GrpcProxyConfig(listen_host="127.0.0.1", listen_port=port), [c.namesrv], 1, 1.0)
    w = subprocess.Popen([sys.executable, "-m", "brokerd.proxy.worker", spec], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert w.stdout is not None
        first = w.stdout.readline()
        assert json.loads(first).get("ready") == port, (first, w.stderr.read() if w.stderr else "")
        yield c, f"127.0.0.1:{port}"
    finally:
        assert w.stdin is not None
        w.stdin.close()  # the pool's way to stop a worker
        assert w.wait(20) == 0
        c.stop()


@pytest.mark.slow
def test_the_go_sdk_through_a_worker_alone(lone_worker: tuple[Cluster, str]) -> None:
    c, endpoint = lone_worker
    if not pop_served(c):
        pytest.skip("the brokers do not serve POP_MESSAGE")
    send, simple = "WorkerSdkSend", "WorkerSdkSimple"
    create_topics(c, send, simple)
    steps: list[dict[str, Any]] = [
        {"op": "producer", "topics": [send, simple], "checker": "commit"},
        {"op": "send", "topic": send, "count": 4, "tag": "N"},
        {"op": "send", "topic": send, "count": 4, "start": 10, "group": "order-1", "tag": "F"},
        {"op": "txn", "topic": send, "count": 2, "start": 20, "resolution": "commit"},
        {"op": "txn", "topic": send, "count": 2, "start": 40, "resolution": "none"},
        {"op": "checks", "count": 2, "timeout": 30},
        {"op": "send", "topic": simple, "count": 6, "start": 50},
        {"op": "simple", "group": "G_worker_simple", "topic": simple},
        {"op": "receive", "count": 6, "timeout": 60, "invisible_s": 15, "change_ms": 1000},
        {"op": "receive", "count": 1, "timeout": 2}]
    rows = run_sdk("go", endpoint, steps)
    assert sum(1 for r in rows if "sent" in r) == 8 + 6
    txn_ids = {r["txn"]: r["id"] for r in rows if "txn" in r}
    assert set(next(r["checked"] for r in rows if "checked" in r)) == {txn_ids[40], txn_ids[41]}
    recv = [r["recv"] for r in rows if "recv" in r]
    ids = {r["id"] for r in recv}
    assert len(ids) == 6 and ids <= {r["acked"] for r in rows if "acked" in r}
    for i in ids:  # delivered, made visible again after 1 s, delivered again, acked, never again
        assert sorted(r["attempt"] for r in recv if r["id"] == i) == [1, 2]


def test_workers_exit_when_the_container_dies(tmp_path: pathlib.Path) -> None:
    """A worker's stdin is the container's pipe: killed, the container leaves no worker behind."""
    port = free_port()
    c = Cluster(tmp_path, brokers=1, container_extra={"enableGrpcProxy": "true", "grpcListenPort": port,
                                                     "grpcWorkers": 1}).start()
    try:
        wait_for(lambda: len(worker_pids(c)) == 1, 20, "the worker running")
        pid = worker_pids(c)[0]
        assert c.daemon is not None and c.daemon.proc is not None
        c.daemon.proc.kill()
        c.daemon.proc.wait(10)
        wait_for(lambda: not running(pid), 15, "the worker gone")
    finally:
        c.stop()


def running(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
