"""The gRPC benchmark's compiled load client (scripts/bench/grpcload, Go, raw protobuf) against a real container:
every SendMessage it reports is stored, its receive + ack loops take exactly what was stored and ack all of it (a
receive afterwards finds nothing), and it drives the bare grpc.aio floor server in both shapes (scripts/bench/
grpc_floor.py) with the server's CPU sampled around the run."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from brokerd.proxy import pb
from brokerd.proxy.codes import Code
from scripts.bench.grpc_floor import floor
from scripts.bench.grpcload_build import grpcload_binary, run_synced
from tests.integration.test_grpc_endpoint import Raw
from tests.support import Cluster, free_port, rpc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow,  # builds and drives the Go load generator (~1 min)
              pytest.mark.skipif(shutil.which("go") is None and not os.path.exists("/usr/local/go/bin/go"),
                                 reason="no go toolchain to build scripts/bench/grpcload")]

TOPIC, QUEUES = "GrpcBench", 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = free_port()
    c = Cluster(tmp_path_factory.mktemp("grpcbench"), brokers=1,
                container_extra={"enableGrpcProxy": "true", "grpcListenPort": port}).start()
    c.grpc = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    assert rpc(c.broker_addr(), 17, {"topic": TOPIC, "readQueueNums": str(QUEUES),
                                     "writeQueueNums": str(QUEUES)}).code == 0
    wait_for(lambda: rpc(c.namesrv, 105, {"topic": TOPIC}).code == 0, 10, "the topic routable")
    yield c
    c.stop()


def stored(c: Cluster) -> int:
    return sum(int(rpc(c.broker_addr(), 30, {"topic": TOPIC, "queueId": str(q)}).ext["offset"])
               for q in range(QUEUES))


def cpu_of(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_sends_are_stored_and_receive_ack_takes_them_all(cluster: Cluster) -> None:
    assert cluster.daemon is not None and cluster.daemon.proc is not None
    pid, endpoint = cluster.daemon.proc.pid, cluster.grpc  # type: ignore[attr-defined]
    sent = run_synced(grpcload_binary(), ["-mode", "send", "-addr", endpoint, "-topic", TOPIC, "-total", "400",
                                          "-conns", "2", "-inflight", "4", "-body", "100"], lambda: cpu_of(pid))
    assert (sent["msgs"], sent["rpcs"], sent["errors"]) == (400, 400, 0), sent
    assert sent["server_cpu_s"] > 0 and sent["p50_ms"] > 0
    assert stored(cluster) == 400
    got = run_synced(grpcload_binary(), ["-mode", "receive", "-addr", endpoint, "-topic", TOPIC, "-group", "gBench",
                                         "-total", "400", "-batch", "16", "-conns", "2", "-inflight", "2"],
                     lambda: cpu_of(pid))
    assert (got["msgs"], got["errors"]) == (400, 0), got

    async def nothing_left() -> list[Any]:
        raw = Raw(endpoint)
        try:
            return await raw.stream("ReceiveMessage", pb.request_class("ReceiveMessage")(
                group=pb.Resource(name="gBench"), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
                filter_expression={"type": 1, "expression": "*"}, batch_size=32,
                invisible_duration=pb.duration(30_000), long_polling_timeout=pb.duration(5_000)))
        finally:
            await raw.close()
    left = asyncio.run(nothing_left())
    assert left[0].status.code == Code.MESSAGE_NOT_FOUND, left[0]


def test_the_grpcio_floor_server_is_driven_in_both_shapes() -> None:
    unary = floor("uvloop", "raw", "unary", 2, 4, rpcs=300, body=64)
    assert (unary["errors"], unary["msg_per_s"] > 0, unary["server_cpu_us_per_rpc"] > 0) == (0, True, True)
    stream = floor("asyncio", "proto", "stream", 1, 2, rpcs=40, body=64, stream_len=6)
    assert stream["errors"] == 0 and stream["msg_per_s"] == pytest.approx(stream["rpc_per_s"] * 6, rel=0.01)
