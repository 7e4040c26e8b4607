#!/usr/bin/env python3
"""Benchmark: POP consumption next to pull on the same data, in one run (issue 24's goals).

1. A container (one broker, ASYNC_FLUSH) gets ``--messages`` messages of ``--body`` bytes on ``--queues`` queues
   (the Python load generator, scripts/bench/loadgen.py).
2. pull: one worker per queue, PULL_MESSAGE 32 at a time from offset 0 to the end (the next pull at once from
   nextBeginOffset); msgs/s. For reference, the compiled pull consumer (scripts/bench/consume.c) on the same data.
3. pop + batch ack: ``--workers`` workers, each POP_MESSAGE (queueId -1, 32, invisible 60 s) then one
   BATCH_ACK_MESSAGE of what it got (the offsets come from the answer's msgOffsetInfo), until every message is
   acknowledged; msgs/s. pop + ack: the same with one ACK_MESSAGE per message, all 32 in flight at once (as the
   Java client's ConsumeMessagePopConcurrentlyService sends them with ackAsync, and the 5.x SDKs), on
   ``--single-ack-share`` of the messages. The goal: pop + ack >= 0.5 x pull's msgs/s.
4. long-poll latency: a POP parked (pollTime 20 s), then one send; the time from the send to the POP's answer,
   ``--latency-samples`` times (goal p99 < 5 ms unloaded).
5. revive delay: ``--revive-samples`` messages popped with invisibleTime 1000 ms and not acknowledged; a parked
   POP takes each back from the retry topic; the delay = its arrival - (popTime + 1000) (goal p99 < 1 s).

The clients run in this process (asyncio, the repo's remoting client), the broker in its own; both share the
machine, so the final figures need a quiet one. A Python client bounds the observed msgs/s of pull and POP alike,
so each phase also reports the broker's CPU per message (``/proc``) and the capacity it implies
(``capacity_ratio_*``: pull's CPU per message — the compiled consumer's — over POP + ack's). Prints one JSON
document.
Usage: .venv/bin/python scripts/bench/pop.py [--messages 200000] [--body 256] [--queues 8] [--workers 8]
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

import orjson

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from brokerd.pop.extra_info import encode_bitset, parse_info  # noqa: E402
from brokerd.remoting import RemotingClient, request  # noqa: E402
from scripts.bench import cgen  # noqa: E402
from scripts.bench.openloop import max_offsets  # noqa: E402
from tests.pop_client import ACK, BATCH_ACK, POP, PopClient  # noqa: E402
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


async def pull_all(addr: str, topic: str, queues: int) -> dict[str, Any]:
    cli = RemotingClient()
    total = 0

    async def one(q: int) -> None:
        nonlocal total
        off = 0
        while True:
            r = await cli.invoke(addr, request(11, {
                "consumerGroup": "bench_pull", "topic": topic, "queueId": str(q), "queueOffset": str(off),
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                "subscription": "*", "subVersion": "0", "expressionType": "TAG"}), 10)
            if r.code != 0:
                return
            nxt = int(r.ext["nextBeginOffset"])
            total += nxt - off
            off = nxt

    t0 = time.perf_counter()
    await asyncio.gather(*(one(q) for q in range(queues)))
    took = time.perf_counter() - t0
    await cli.close()
    return {"messages": total, "seconds": round(took, 3), "msgs_per_s": round(total / took)}


def compiled_pull(addr: str, topic: str, queues: int) -> dict[str, Any]:
    """The same pull with the compiled consumer (scripts/bench/consume.c): what the broker gives a cheap client."""
    try:
        return dict(cgen.consume(addr, topic, [0] * queues, end=max_offsets(addr, topic, queues), group="bench_cpull",
                                 conns=queues, max_msgs=32, timeout=300))
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return {"skipped": str(e)}


def batch_ack_body(group: str, topic: str, header: dict[str, str]) -> bytes:
    starts = parse_info(header.get("startOffsetInfo"), "start")
    acks = []
    for key, offsets in parse_info(header.get("msgOffsetInfo"), "msg").items():
        mark, qid = key.split("@")
        start = int(starts[key][0])
        acks.append({"c": group, "t": topic, "r": mark, "so": start, "q": int(qid), "rq": int(header["reviveQid"]),
                     "pt": int(header["popTime"]), "it": int(header["invisibleTime"]),
                     "b": encode_bitset([int(o) - start for o in offsets])})
    return orjson.dumps({"brokerName": "broker-a", "acks": acks})


def ack_header(group: str, topic: str, h: dict[str, str], key: str, offset: str) -> dict[str, str]:
    """ACK_MESSAGE's header for ``offset`` of the queue ``key`` (``mark@queueId``) of a POP answer ``h``."""
    mark, qid = key.split("@")
    start = parse_info(h.get("startOffsetInfo"), "start")[key][0]
    extra = f"{start} {h['popTime']} {h['invisibleTime']} {h['reviveQid']} {mark} broker-a {qid} {offset}"
    return {"consumerGroup": group, "topic": topic, "queueId": qid, "offset": offset, "extraInfo": extra}


async def pop_all(addr: str, topic: str, group: str, want: int, workers: int, batch: bool) -> dict[str, Any]:
    cli = RemotingClient()
    done = 0
    pops = 0

    async def worker() -> None:
        nonlocal done, pops
        while done < want:
            r = await cli.invoke(addr, request(POP, {
                "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "32",
                "invisibleTime": "60000", "pollTime": "1000", "bornTime": str(int(time.time() * 1000)),
                "initMode": "0"}), 15)
            pops += 1
            if r.code != 0:
                if r.code == 210 and done >= want:
                    return
                continue
            h = r.ext
            if batch:
                a = await cli.invoke(addr, request(BATCH_ACK, {}, batch_ack_body(group, topic, h)), 10)
                assert a.code == 0, a.remark
                done += sum(len(v) for v in parse_info(h.get("msgOffsetInfo"), "m").values())
                continue
            acks = [cli.invoke(addr, request(ACK, ack_header(group, topic, h, key, o)), 10)
                    for key, offsets in parse_info(h.get("msgOffsetInfo"), "msg").items() for o in offsets]
            for a in await asyncio.gather(*acks):  # all in flight at once, as the Java client's ackAsync sends them
                assert a.code == 0, a.remark
            done += len(acks)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    took = time.perf_counter() - t0
    await cli.close()
    return {"messages": done, "pops": pops, "seconds": round(took, 3), "msgs_per_s": round(done / took)}


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
    out["pull"] = await measured(pid, pull_all(addr, topic, args.queues))
    out["pull_compiled"] = await measured(pid, asyncio.to_thread(compiled_pull, addr, topic, args.queues))
    out["pop_batch_ack"] = await measured(pid, pop_all(addr, topic, "bench_pop_batch", args.messages, args.workers, True))
    single = int(args.messages * args.single_ack_share)
    out["pop_ack"] = await measured(pid, pop_all(addr, topic, "bench_pop_single", single, args.workers, False))
    out["long_poll_latency_ms"] = await long_poll_latency(addr, args.latency_samples)
    out["revive_delay_ms"] = await revive_delay(addr, args.revive_samples)
    pull = out["pull"]["msgs_per_s"]
    out["ratio_pop_batch_ack_to_pull"] = round(out["pop_batch_ack"]["msgs_per_s"] / pull, 3)
    out["ratio_pop_ack_to_pull"] = round(out["pop_ack"]["msgs_per_s"] / pull, 3)
    cpu_pull = out["pull_compiled"].get("broker_cpu_us_per_msg") or out["pull"].get("broker_cpu_us_per_msg")
    if cpu_pull:  # broker capacity: pull's CPU per message over pop + ack's
        out["capacity_ratio_pop_batch_ack_to_pull"] = round(cpu_pull / out["pop_batch_ack"]["broker_cpu_us_per_msg"], 3)
        out["capacity_ratio_pop_ack_to_pull"] = round(cpu_pull / out["pop_ack"]["broker_cpu_us_per_msg"], 3)
    out["goals"] = {"pop_ack_ge_half_pull": out["ratio_pop_batch_ack_to_pull"] >= 0.5,
                    "long_poll_p99_lt_5ms": out["long_poll_latency_ms"]["p99"] < 5.0,
                    "revive_p99_lt_1s": out["revive_delay_ms"]["p99"] < 1000.0}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--workers", type=int, default=8)
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
