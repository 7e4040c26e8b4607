"""Helpers shared by scripts/bench/ha.py and its parts: requests to name servers and brokers, percentiles,
reading a queue back, and process clean-up."""

from __future__ import annotations

import asyncio
import math
import os
import platform
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson

from brokerd.message import decode_records
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import RemotingCommand, request
from tests.ha_cluster import HACluster

SEND_V2 = 310
PULL = 11
RUNTIME = 28
MAX_OFFSET = 30
CREATE_TOPIC = 17
ROUTE = 105


def send_command(topic: str, qid: int, queues: int, uniq: str, body: bytes) -> RemotingCommand:
    """SEND_MESSAGE_V2 as a client sends it (UNIQ_KEY + WAIT properties)."""
    ext = {"a": "ha_bench_pg", "b": topic, "c": "TBW102", "d": str(queues), "e": str(qid), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02", "j": "0",
           "k": "false", "m": "false"}  # fmt: skip
    return request(SEND_V2, ext, body)


def pct(values: Iterable[float]) -> dict[str, Any]:
    """min / p50 / p90 / p99 / max by the nearest-rank method (with fewer than 100 samples p99 is the max)."""
    v = sorted(values)
    if not v:
        return {"n": 0}

    def rank(p: float) -> float:
        return round(v[max(0, math.ceil(p * len(v)) - 1)], 1)

    return {"n": len(v), "min": round(v[0], 1), "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99),
            "max": round(v[-1], 1)}  # fmt: skip


def ms_since(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


async def route_masters(cli: RemotingClient, namesrv: str, topic: str, timeout: float = 0.5) -> dict[str, str]:
    """{set: id-0 address} in one name server's route of `topic` ({} if it does not answer)."""
    try:
        r = await cli.invoke(namesrv, request(ROUTE, {"topic": topic}), timeout)
    except Exception:  # noqa: BLE001 - a name server that does not answer names nobody
        return {}
    if r.code != 0 or not r.body:
        return {}
    out: dict[str, str] = {}
    for bd in orjson.loads(r.body).get("brokerDatas", []):
        addr = bd.get("brokerAddrs", {}).get("0")
        if addr:
            out[str(bd["brokerName"])] = str(addr)
    return out


async def route_replicas(cli: RemotingClient, namesrv: str, topic: str) -> dict[str, int]:
    """{set: number of brokers (master + slaves) routed for `topic`} from one name server."""
    r = await cli.invoke(namesrv, request(ROUTE, {"topic": topic}), 1.0)
    if r.code != 0 or not r.body:
        return {}
    return {str(bd["brokerName"]): len(bd.get("brokerAddrs", {})) for bd in orjson.loads(r.body).get("brokerDatas", [])}


async def all_masters(cli: RemotingClient, namesrvs: list[str], topic: str) -> list[dict[str, str]]:
    """Every name server's view, asked concurrently."""
    return list(await asyncio.gather(*(route_masters(cli, ns, topic) for ns in namesrvs)))


async def runtime(cli: RemotingClient, addr: str, timeout: float = 1.0) -> dict[str, str] | None:
    """GET_BROKER_RUNTIME_INFO's table, None when the broker does not answer."""
    try:
        r = await cli.invoke(addr, request(RUNTIME, {}), timeout)
    except Exception:  # noqa: BLE001 - down, hung or restarting
        return None
    if r.code != 0 or not r.body:
        return None
    return {str(k): str(v) for k, v in orjson.loads(r.body).get("table", {}).items()}


async def max_offset(cli: RemotingClient, addr: str, topic: str, qid: int) -> int:
    r = await cli.invoke(addr, request(MAX_OFFSET, {"topic": topic, "queueId": str(qid)}), 2.0)
    return int(r.ext.get("offset", "-1")) if r.code == 0 else -1


async def create_topic(cli: RemotingClient, addr: str, topic: str, queues: int) -> None:
    ext = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6",
           "topicFilterType": "SINGLE_TAG", "defaultTopic": "TBW102"}  # fmt: skip
    r = await cli.invoke(addr, request(CREATE_TOPIC, ext), 5.0)
    if r.code != 0:
        raise RuntimeError(f"create topic {topic} on {addr}: {r.code} {r.remark}")


async def read_queue(cli: RemotingClient, addr: str, topic: str, qid: int) -> dict[int, str]:
    """{queue offset: UNIQ_KEY} of every message a consumer can pull from one queue, from offset 0."""
    out: dict[int, str] = {}
    offset = 0
    while True:
        ext = {"consumerGroup": "ha_bench_check", "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
               "maxMsgNums": "256", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
               "subscription": "*", "subVersion": "0", "maxMsgBytes": str(4 << 20)}  # fmt: skip
        r = await cli.invoke(addr, request(PULL, ext), 10.0)
        if r.code != 0 or not r.body:
            return out
        for m in decode_records(r.body):
            out[m.queue_offset] = m.properties.get("UNIQ_KEY", "")
        nxt = int(r.ext["nextBeginOffset"])
        if nxt <= offset:
            return out
        offset = nxt


async def wait_until(cond: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll an async condition until it returns something truthy; raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        v = await cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_of(cl: HACluster, c: int) -> int:
    proc = cl.daemons[c].proc
    assert proc is not None
    return proc.pid


def resume_all(cl: HACluster) -> None:
    """SIGCONT every container still alive (a stopped one would ignore the SIGTERM of ``HACluster.stop``)."""
    for d in cl.daemons.values():
        if d.alive() and d.proc is not None:
            try:
                os.kill(d.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def stop_cluster(cl: HACluster) -> None:
    resume_all(cl)
    cl.stop()


def machine() -> dict[str, Any]:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    return {"cpu_model": model, "nproc": os.cpu_count(), "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "note": "shared 2-core VM: other work ran alongside"}
