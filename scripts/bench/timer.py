#!/usr/bin/env python3
"""Benchmark: timer messages (issue 24's goals), one container (one broker, ASYNC_FLUSH, timerPrecisionMs=100).

1. stored per second, side by side: ``--seconds`` of plain sends (SEND_MESSAGE_V2, the compiled generator
   scripts/bench/gen.c, closed loop: the C send lane), ``--seconds`` of plain sends through the Python send path (a
   timer property due long ago: the lane leaves it, the broker stores it at once), then ``--pending`` timer sends
   (TIMER_DELAY_SEC=86400); msgs/s and the broker's CPU per message of each.
2. resident memory per pending timer: the broker process's RSS (and its anonymous part) before and after the
   ``--pending`` timers are stored and indexed (``timerOffsetBehind`` 0), divided by their number (goal <= 100 B).
3. fire-time error, spread: ``--spread`` timers due over ``--spread-window-ms`` from a few seconds ahead; each one's
   store time in its real topic minus its due time (TIMER_OUT_MS): p50 / p99 / max (goal p99 < 150 ms; never < 0).
4. fire-time error, burst: ``--burst`` timers due within one second (goal p99 < 150 ms), and the firing rate.

In 3 and 4 the fired messages are read (PULL_MESSAGE) only once the broker's ``timerFired`` counter shows them all
fired: a reader pulling while they fire would load the broker and inflate the lateness it measures.

The timers of phases 3 and 4 are sent by this process (the repo's remoting client: each carries its own
TIMER_DELIVER_MS) ahead of their time; the clients and the broker share the machine, so the final figures need a
quiet one. Prints one JSON document.
Usage: .venv/bin/python scripts/bench/timer.py [--pending 1000000] [--spread 20000] [--burst 100000] [--body 128]
       [--seconds 10]
Short validation run: --pending 50000 --spread 2000 --burst 10000 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

import orjson

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from brokerd.message import decode_records, encode_properties  # noqa: E402
from brokerd.remoting import RemotingClient, RemotingCommand, request  # noqa: E402
from scripts.bench import cgen, shapes  # noqa: E402
from tests.support import Cluster, wait_for  # noqa: E402

QUEUES = 8
_U32 = struct.Struct(">I")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1) if s else 0.0


def dist(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "min": round(min(values), 1) if values else 0.0, "p50": pct(values, 0.5),
            "p90": pct(values, 0.9), "p99": pct(values, 0.99), "max": round(max(values), 1) if values else 0.0,
            "mean": round(statistics.fmean(values), 1) if values else 0.0}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int) -> dict[str, int]:
    """The process's resident memory (bytes): total, anonymous, file-backed (/proc/<pid>/status)."""
    out = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


async def runtime(addr: str) -> dict[str, str]:
    client = RemotingClient()
    try:
        r = await client.invoke(addr, request(28, {}), 5)
        return dict(orjson.loads(r.body).get("table", {})) if r.code == 0 and r.body else {}
    finally:
        await client.close()


# ---------------------------------------------------------------- 1 + 2: stored per second, memory per timer


def timer_frames(path: pathlib.Path, topic: str, body: int, timer: str = "TIMER_DELAY_SEC\x0186400") -> None:
    """gen.c's frames file (shapes.write_templates' format) for SEND_MESSAGE_V2 with a timer property (a delay of a
    day by default)."""
    pad = b"x" * max(0, body - 8)
    prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{int(time.time()) & 0xFFFFFFFF:08X}"

    def build(op: int, slot: int, tail: str, head: bytes) -> bytes:
        props = f"TAGS\x01bench\x02{timer}\x02UNIQ_KEY\x01{prefix}{tail}\x02"
        ext = {"a": "bench_pg", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(slot % QUEUES), "f": "0",
               "g": str(now_ms()), "h": "0", "i": props, "j": "0", "k": "false", "l": "16", "m": "false"}
        return shapes.frame(310, op, ext, head + pad)

    parts = [b"MQGF", _U32.pack(QUEUES), _U32.pack(1)]
    for slot in range(QUEUES):
        t = shapes.template(build, slot, 1)
        parts += [_U32.pack(len(t.frame)), _U32.pack(t.opaque_at), _U32.pack(int(t.opaque_binary)),
                  _U32.pack(t.ts_at & 0xFFFFFFFF), _U32.pack(len(t.uniq_at)), *map(_U32.pack, t.uniq_at), t.frame]
    path.write_bytes(b"".join(parts))


def stored_rates(addr: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cgen.run(addr, "BenchWarm", shape="json_uniq", queues=QUEUES, body=args.body, conns=4, inflight=256,
             total=20_000)  # fmt: skip  # routes, files and the lane's topic table warm
    c0, t0 = cpu_seconds(pid), time.monotonic()
    plain = cgen.run(addr, "BenchPlain", shape="json_uniq", queues=QUEUES, body=args.body, conns=4, inflight=256,
                     seconds=args.seconds)  # fmt: skip
    used, took = cpu_seconds(pid) - c0, time.monotonic() - t0
    n = int(str(plain.get("acked", 0)))
    out["plain"] = {"msgs_per_s": plain.get("msg_per_s"), "broker_cpu_us_per_msg": round(used * 1e6 / n, 2) if n
                    else None, "generator": {k: plain[k] for k in plain if k in ("sent", "acked", "errors", "busy")},
                    "seconds": round(took, 1)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mqgen-timer-") as d:
        frames = pathlib.Path(d) / "frames"  # a timer property due long ago: the Python send path, stored at once
        timer_frames(frames, "BenchPython", args.body, "TIMER_DELIVER_MS\x011")
        c0 = cpu_seconds(pid)
        res = cgen._run(cgen.command(addr, frames, conns=4, inflight=256, seconds=args.seconds), 600)
        used = cpu_seconds(pid) - c0
        n = int(str(res.get("acked", 0)))
        out["plain_python_path"] = {"msgs_per_s": res.get("msg_per_s"),
                                    "broker_cpu_us_per_msg": round(used * 1e6 / n, 2) if n else None}
    rss_before = memory(pid)
    with tempfile.TemporaryDirectory(prefix="mqgen-timer-") as d:
        frames = pathlib.Path(d) / "frames"
        timer_frames(frames, "BenchTimer", args.body)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        res = cgen._run(cgen.command(addr, frames, conns=4, inflight=256, total=args.pending), 3600)
        used, took = cpu_seconds(pid) - c0, time.monotonic() - t0
    wait_for(lambda: asyncio.run(runtime(addr)).get("timerOffsetBehind") == "0", 600, "every timer indexed")
    info = asyncio.run(runtime(addr))
    rss_after = memory(pid)
    pending = int(info.get("timerPending", "0"))
    out["timer"] = {"msgs_per_s": res.get("msg_per_s"), "broker_cpu_us_per_msg": round(used * 1e6 / args.pending, 2),
                    "generator": {k: res[k] for k in res if k in ("sent", "acked", "errors", "busy")},
                    "seconds": round(took, 1)}  # fmt: skip
    for base in ("plain", "plain_python_path"):
        if out[base]["msgs_per_s"] and out["timer"]["msgs_per_s"]:
            ratio = float(out["timer"]["msgs_per_s"]) / float(out[base]["msgs_per_s"])
            out[f"timer_over_{base}"] = round(ratio, 3)
    delta = {k: rss_after[k] - rss_before.get(k, 0) for k in rss_after}
    out["memory"] = {"pending_timers": pending, "rss_before": rss_before, "rss_after": rss_after,
                     "bytes_per_pending_timer": {k: round(v / max(pending, 1), 1) for k, v in delta.items()}}
    return out


# ---------------------------------------------------------------- 3 + 4: fire-time error


def timer_send(topic: str, q: int, uniq: str, due: int, body: bytes) -> RemotingCommand:
    props = encode_properties({"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": str(due)}).decode()
    return request(310, {"a": "bench_pg", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(q), "f": "0",
                         "g": str(now_ms()), "h": "0", "i": props, "j": "0", "k": "false"}, body)  # fmt: skip


async def send_all(addr: str, reqs: list[RemotingCommand], inflight: int = 256) -> float:
    """Send them (SYSTEM_BUSY resent); returns how long it took (s)."""
    client = RemotingClient()
    sem = asyncio.Semaphore(inflight)
    t0 = time.monotonic()

    async def one(r: RemotingCommand) -> None:
        async with sem:
            for _ in range(100):
                ans = await client.invoke(addr, r, 30)
                if ans.code != 2:
                    if ans.code != 0 or not ans.ext.get("recallHandle"):
                        raise RuntimeError(f"a timer send was not parked: {ans.code} {ans.remark}")
                    return
                await asyncio.sleep(0.01)

    try:
        await asyncio.gather(*(one(r) for r in reqs))
    finally:
        await client.close()
    return time.monotonic() - t0


async def fired(addr: str) -> int:
    """The broker's ``timerFired`` counter (GET_BROKER_RUNTIME_INFO): timers delivered since it started."""
    return int((await runtime(addr)).get("timerFired", "0"))


async def lateness(addr: str, topic: str, n: int, until_ms: int, *,
                   fired_before: int | None = None) -> tuple[list[float], list[int]]:  # fmt: skip
    """(store time - due time of each fired timer, their store times), once all ``n`` are there. With
    ``fired_before`` (the broker's ``timerFired`` before they fell due) nothing is read until the counter shows all
    ``n`` fired: reading them while they fire would load the broker and inflate the very lateness measured."""
    while fired_before is not None and await fired(addr) - fired_before < n and now_ms() < until_ms:
        await asyncio.sleep(0.2)  # sleep-ok: polling the broker's counter with a deadline
    client = RemotingClient()
    try:
        while True:
            late: list[float] = []
            stored: list[int] = []
            for q in range(QUEUES):
                offset = 0
                while True:
                    r = await client.invoke(addr, request(11, {
                        "consumerGroup": "bench_timer", "topic": topic, "queueId": str(q), "queueOffset": str(offset),
                        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": "*", "subVersion": "0"}), 30)  # fmt: skip
                    if r.code != 0:
                        break
                    for x in decode_records(r.body or b""):
                        late.append(float(x.store_timestamp - int(x.properties["TIMER_OUT_MS"])))
                        stored.append(x.store_timestamp)
                    offset = int(r.ext["nextBeginOffset"])
            if len(late) >= n or now_ms() > until_ms:
                return late, stored
            await asyncio.sleep(0.5)
    finally:
        await client.close()


def fire_error(addr: str, topic: str, n: int, window_ms: int, body: int, lead_ms: int) -> dict[str, Any]:
    """``n`` timers due uniformly over ``window_ms`` starting ``lead_ms`` from now."""
    start = now_ms() + lead_ms
    payload = b"t" * body
    reqs = [timer_send(topic, i % QUEUES, f"{topic}-{i}", start + (i * window_ms) // n, payload) for i in range(n)]
    took = asyncio.run(send_all(addr, reqs))
    if now_ms() >= start:
        return {"error": f"sending took {took:.1f} s, past the first due time: raise the lead"}
    before = asyncio.run(fired(addr))
    late, stored = asyncio.run(lateness(addr, topic, n, start + window_ms + 120_000, fired_before=before))
    out: dict[str, Any] = {"timers": n, "window_ms": window_ms, "sent_in_s": round(took, 1), "fired": len(late),
                           "lateness_ms": dist(late), "early": sum(1 for v in late if v < 0)}  # fmt: skip
    if stored:
        span = max(stored) - start
        out["fired_per_s"] = round(len(stored) / max(span / 1000, window_ms / 1000), 0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--spread", type=int, default=20_000)
    ap.add_argument("--spread-window-ms", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-timer-"))
    cl = Cluster(tmp, brokers=1, timerPrecisionMs=100, mappedFileSizeCommitLog=1 << 30, maxHashSlotNum=5_000_000,
                 maxIndexNum=20_000_000, brokerFastFailureEnable="false")  # fmt: skip
    cl.start(timeout=120)
    assert cl.daemon is not None and cl.daemon.proc is not None
    pid, addr = cl.daemon.proc.pid, cl.broker_addr()
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                          "kernel": platform.release()}, "timerPrecisionMs": 100,
                              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args)}  # fmt: skip
    try:
        result["stored"] = stored_rates(addr, pid, args)
        lead = 5000 + args.spread // 2
        result["spread"] = fire_error(addr, "BenchSpread", args.spread, args.spread_window_ms, args.body, lead)
        lead = 8000 + args.burst // 2
        result["burst_100k_in_1s" if args.burst == 100_000 else "burst"] = fire_error(
            addr, "BenchBurst", args.burst, 1000, args.body, lead)
        result["broker_runtime"] = {k: v for k, v in asyncio.run(runtime(addr)).items() if k.startswith("timer")}
    finally:
        cl.stop()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
