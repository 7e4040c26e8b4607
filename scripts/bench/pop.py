#!/usr/bin/env python3
"""Benchmark: POP consumption next to pull on the same data, in one run (issue 24's goals).

1. A container (one broker, ASYNC_FLUSH) gets ``--messages`` messages of ``--body`` bytes on ``--queues`` queues
   (the Python load generator, scripts/bench/loadgen.py).
2. For each client shape (``SHAPES``: one connection with a request per queue in flight, as RocketMQ's Java pull
   and POP push consumers keep one connection per broker; and one connection per queue), compiled clients on the
   same data: pull (scripts/bench/consume.c: PULL_MESSAGE 32 at a time from offset 0 to the end, the next pull at
   once from nextBeginOffset) next to pop + batch ack (scripts/bench/pop.c: POP_MESSAGE queueId -1, 32, invisible
   60 s, each answer acknowledged at once by one BATCH_ACK_MESSAGE while the next pop goes out) until every
   message is acknowledged; msgs/s, and the broker's CPU per message (``/proc``). The goal: pop + ack >= 0.5 x
   pull's msgs/s. On the first shape also the pull with a commitOffset in every pull (``pull_commit``: the Java
   push consumer's pulls, which commit its offset so far; the plain pull commits nothing) and pop + one
   ACK_MESSAGE per message (the Java client's ConsumeMessagePopConcurrentlyService and the 5.x SDKs ack each
   message) on ``--single-ack-share`` of them.
3. long-poll latency: a POP parked (pollTime 20 s), then one send; the time from the send to the POP's answer,
   ``--latency-samples`` times (goal p99 < 5 ms unloaded).
4. revive delay: ``--revive-samples`` messages popped with invisibleTime 1000 ms and not acknowledged; a parked
   POP takes each back from the retry topic; the delay = its arrival - (popTime + 1000) (goal p99 < 1 s).

The clients and the broker share the machine, so the final figures need a quiet one. Prints one JSON document.
Usage: .venv/bin/python scripts/bench/pop.py [--messages 200000] [--body 256] [--queues 8]
       [--latency-samples 300] [--revive-samples 200] [--single-ack-share 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen  # noqa: E402
from scripts.bench.openloop import max_offsets  # noqa: E402
from tests.pop_client import PopClient  # noqa: E402
from tests.support import Cluster, arpc  # noqa: E402

PY = sys.executable


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else 0.0


def dist(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": pct(values, 0.5), "p90": pct(values, 0.9), "p99": pct(values, 0.99),
            "max": round(max(values), 3) if values else 0.0, "mean": round(statistics.fmean(values), 3) if values else 0.0}


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (/proc/<pid>/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measured(pid: int, coro: Any) -> dict[str, Any]:
    """``coro``'s result with the broker's CPU per message over it (what bounds the broker, whatever the client)."""
    c0 = cpu_seconds(pid)
    res: dict[str, Any] = await coro
    used = cpu_seconds(pid) - c0
    n = res.get("messages") or res.get("msgs") or 0
    if n:
        res["broker_cpu_us_per_msg"] = round(used * 1e6 / n, 2)
        res["broker_capacity_msgs_per_s"] = round(n / used) if used > 0 else None
    return res


def fill(addr: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [PY, "-m", "scripts.bench.loadgen", "produce", "--addr", addr, "--topic", topic, "--conns", "4",
           "--inflight", "64", "--total", str(args.messages), "--body", str(args.body), "--queues", str(args.queues)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=True)
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


SHAPES = ((1, 8), (8, 1))  # (connections, requests in flight on each): a client's one connection per broker with
# a request per queue in flight (the Java clients' pull and POP push consumers), and a connection per queue


def compiled_pull(addr: str, topic: str, queues: int, conns: int, commit: bool = False) -> dict[str, Any]:
    """Every queue read from offset 0 to its end by the compiled pull consumer (scripts/bench/consume.c): one pull
    (32) in flight per queue, queue q on connection q % conns; ``commit``: each pull commits the offset so far."""
    return dict(cgen.consume(addr, topic, [0] * queues, end=max_offsets(addr, topic, queues),
                             group=f"bench_pull{conns}{'_commit' if commit else ''}", conns=conns, max_msgs=32,
                             commit=commit, timeout=300))


def compiled_pop(addr: str, total: int, conns: int, inflight: int, ack: str) -> dict[str, Any]:
    """``total`` messages popped (queueId -1, 32, invisible 60 s) and acknowledged by the compiled POP consumer
    (scripts/bench/pop.c), a new group each time."""
    return dict(cgen.pop(addr, "BenchPop", total, group=f"bench_pop_{ack}_{conns}x{inflight}", conns=conns,
                         inflight=inflight, ack=ack, timeout=300))


async def long_poll_latency(addr: str, samples: int) -> dict[str, float]:
    topic = "BenchPopLatency"
    await arpc(addr, 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"})
    c, p = PopClient(addr, "bench_pop_lat"), PopClient(addr, "P")
    out: list[float] = []
    try:
        for i in range(samples):
            waiting = asyncio.ensure_future(c.pop(topic, 1, poll_ms=20_000, invisible=60_000))
            for _ in range(500):  # until the pop is parked
                if (await c.polling_info(topic, -1)).ext.get("pollingNum") == "1":
                    break
            t0 = time.perf_counter()
            await p.send(topic, b"x", qid=i % 4)
            got = await waiting
            out.append((time.perf_counter() - t0) * 1000)
            if got.msgs:
                await c.ack(got.msgs[0], topic)
    finally:
        await c.close()
        await p.close()
    return dist(out)


async def revive_delay(addr: str, samples: int) -> dict[str, float]:
    topic, group = "BenchPopRevive", "bench_pop_revive"
    await arpc(addr, 17, {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
    c = PopClient(addr, group)
    delays: list[float] = []
    try:
        for i in range(samples):
            await c.send(topic, f"r{i}".encode())
        due: dict[bytes, int] = {}
        while len(due) < samples:
            got = await c.pop(topic, 32, invisible=1000, poll_ms=1000)
            for m in got.msgs:
                due[m.body] = int(got.header["popTime"]) + 1000
        while len(delays) < samples:
            got = await c.pop(topic, 32, invisible=60_000, poll_ms=5000)
            now = time.time() * 1000
            for m in got.msgs:
                if m.reconsume_times == 1 and m.body in due:
                    delays.append(now - due.pop(m.body))
                await c.ack(m, topic)
            if got.code != 0 and not due:
                break
    finally:
        await c.close()
    return dist(delays)


async def drive(addr: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    topic = "BenchPop"
    await arpc(addr, 17, {"topic": topic, "readQueueNums": str(args.queues), "writeQueueNums": str(args.queues),
                          "perm": "6"})
    out: dict[str, Any] = {"fill": await asyncio.to_thread(fill, addr, topic, args)}
    goals: dict[str, bool] = {}
    for conns, inflight in SHAPES:
        name = f"{conns}x{inflight}"
        pull = await measured(pid, asyncio.to_thread(compiled_pull, addr, topic, args.queues, conns))
        pop = await measured(pid, asyncio.to_thread(compiled_pop, addr, args.messages, conns, inflight, "batch"))
        row = {"pull": pull, "pop_batch_ack": pop,
               "ratio_msgs_per_s": round(pop["msg_per_s"] / pull["msg_per_s"], 3),
               "ratio_broker_cpu": round(pull["broker_cpu_us_per_msg"] / pop["broker_cpu_us_per_msg"], 3)}
        if (conns, inflight) == SHAPES[0]:
            row["pull_commit"] = await measured(pid, asyncio.to_thread(compiled_pull, addr, topic, args.queues, conns,
                                                                       True))
            row["ratio_to_pull_commit_msgs_per_s"] = round(pop["msg_per_s"] / row["pull_commit"]["msg_per_s"], 3)
            single = int(args.messages * args.single_ack_share)
            row["pop_ack"] = await measured(pid, asyncio.to_thread(compiled_pop, addr, single, conns, inflight, "single"))
            row["ratio_pop_ack_msgs_per_s"] = round(row["pop_ack"]["msg_per_s"] / pull["msg_per_s"], 3)
        out[name] = row
        goals[f"pop_batch_ack_ge_half_pull_{name}"] = row["ratio_msgs_per_s"] >= 0.5
    out["long_poll_latency_ms"] = await long_poll_latency(addr, args.latency_samples)
    out["revive_delay_ms"] = await revive_delay(addr, args.revive_samples)
    goals["long_poll_p99_lt_5ms"] = out["long_poll_latency_ms"]["p99"] < 5.0
    goals["revive_p99_lt_1s"] = out["revive_delay_ms"]["p99"] < 1000.0
    out["goals"] = goals
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--latency-samples", type=int, default=300)
    ap.add_argument("--revive-samples", type=int, default=200)
    ap.add_argument("--single-ack-share", type=float, default=0.25)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pop-") as d:
        c = Cluster(pathlib.Path(d), brokers=1).start()
        try:
            assert c.daemon is not None and c.daemon.proc is not None
            res = asyncio.run(drive(c.broker_addr(), c.daemon.proc.pid, args))
        finally:
            c.stop()
    doc = {"benchmark": "pop", "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
           "date": time.strftime("%Y-%m-%d"), "args": vars(args), **res}
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
