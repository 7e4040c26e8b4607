#!/usr/bin/env python3
"""Latency as a client sees it, next to a bare echo server in the same run: open loop at fractions of the echo
server's capacity, every send shape, ASYNC_FLUSH and SYNC_FLUSH, with and without a SYNC slave, end to end.

1. The bare echo server (echo_server.py: uvloop, no remoting stack) is started and its capacity measured: the
   compiled generator (build/mqgen) closed loop, ``--conns`` connections x 64 in flight, ``--capacity-seconds``.
2. Each rate is ``--factors`` (0.3, 0.6) x that capacity. The echo server answers each rate's schedule first
   (its p50 .. max are the reference of that rate).
3. For each ``--setups`` (async: ASYNC_FLUSH; sync: SYNC_FLUSH; async_slave / sync_slave: the same with
   brokerRole=SYNC_MASTER and one slave container, so every send waits for the slave's ack), a new container;
   every shape (``--shapes``: shapes.SHAPES and the real clients' captures) at every rate, open loop: send i due at
   start + i / rate, its latency counted from its due time (a late send still counts from then); batch16 at
   rate / 16 frames (the same messages per second). Then end to end (json_uniq): the compiled long-polling
   consumer's arrival - due time. Around every run the container's /metrics are read: the loop stalls of 5 ms or
   more during the run (``rocketmq_loop_stall_seconds``), where the loop thread's time went over them (ran, waited
   for a CPU, slept: ``rocketmq_loop_stall_thread_seconds_total``) and what the collector did.
4. The goals of issue 28 are checked per run: ASYNC without a slave p99 <= 2 x and p99.9 <= 4 x the echo
   server's at the same rate; with a SYNC slave p99 <= the echo server's + 3 ms; end to end p99 <= 5 ms at
   0.3 x; no loop stall over 5 ms under steady load.

Prints one JSON document (and a table on stderr). Both processes share the machine: the final figures need a quiet
one. Usage: .venv/bin/python scripts/bench/latency.py [--seconds 10] [--factors 0.3,0.6]
       [--setups async,sync,async_slave,sync_slave] [--shapes all|json_uniq,binary,...] [--conns 8] [--no-e2e]
"""

from __future__ import annotations

import argparse
import array
import json
import os
import pathlib
import re
import sys
import tempfile
import time
import urllib.request
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen, openloop  # noqa: E402
from scripts.bench.shapes import SHAPES, capture_shapes  # noqa: E402
from tests.support import (  # noqa: E402
    Cluster,
    Daemon,
    broker_port,
    can_connect,
    container_cmd,
    free_port,
    rpc,
    wait_for,
    write_broker_conf,
)

PY = sys.executable
QUEUES = 8
SETUPS = {"async": ("ASYNC_FLUSH", False), "sync": ("SYNC_FLUSH", False), "async_slave": ("ASYNC_FLUSH", True),
          "sync_slave": ("SYNC_FLUSH", True)}
SEND = {"a": "pg", "b": "Probe", "c": "TBW102", "d": "8", "e": "0", "f": "0", "g": "0", "h": "0", "i": ""}


def topic_of(shape: str) -> str:
    name = "".join(ch for ch in shape if ch.isalnum())[:40]
    return f"%RETRY%{name}" if shape == "retry_topic" else "Lat" + name


def open_loop(addr: str, topic: str, shape: str, rate: float, args: argparse.Namespace,
              tmp: pathlib.Path) -> dict[str, Any]:  # fmt: skip
    """One open-loop run: every send's latency from its due time (exact percentiles), codes, the generator's lag."""
    per = 16 if shape == "batch16" else 1
    out = tmp / "lat.bin"
    r = cgen.run(addr, topic, timeout=args.seconds + 200, shape=shape, conns=args.conns, body=args.body,
                 rate=rate / per, seconds=args.seconds, start=time.time() + 0.5, tick_us=args.tick_us, lat_out=out)
    lat = array.array("d")
    lat.frombytes(out.read_bytes())
    late = r["gen_late"]
    assert isinstance(late, dict) and isinstance(r["errors"], dict)
    return {"send": openloop.distribution(lat), "codes": {"0": r["acked"], **r["errors"]}, "busy": r["busy"],
            "generator_lag_p99_ms": late["p99_ms"]}


def metrics_port(c: Cluster) -> int:
    out = c.daemon.output() if c.daemon else ""
    return int(out.split("metrics port ")[1].split()[0].strip(","))


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    got: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("rocketmq_loop_stall", "rocketmq_gc_pause_seconds_count", "rocketmq_gc_pause_seconds_sum",
                            "rocketmq_send_refused_total")):
            key, value = line.rsplit(" ", 1)
            got[key] = float(value)
    return got


def stall_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The loop stalls and collections between two scrapes: stalls per bucket, the longest's bucket."""
    buckets: list[tuple[float, int]] = []
    for key, v in after.items():
        m = re.match(r'rocketmq_loop_stall_seconds_bucket\{le="([^"]+)"\}', key)
        if m and m.group(1) != "+Inf":
            buckets.append((float(m.group(1)), int(v - before.get(key, 0.0))))
    buckets.sort()
    total = int(after.get("rocketmq_loop_stall_seconds_count", 0) - before.get("rocketmq_loop_stall_seconds_count", 0))
    over_5ms = total - next((n for le, n in buckets if le == 0.005), 0)
    longest_le = next((le for le, n in buckets if n == total), float("inf")) if total else 0.0  # cumulative counts
    gc_ms = sum(after.get(k, 0.0) - before.get(k, 0.0) for k in after if k.startswith("rocketmq_gc_pause_seconds_sum"))
    split = {}
    for key, v in after.items():
        m = re.match(r'rocketmq_loop_stall_thread_seconds_total\{state="([a-z_]+)"\}', key)
        if m:
            split[m.group(1)] = round((v - before.get(key, 0.0)) * 1000, 1)
    return {"stalls": total, "stalls_over_5ms": over_5ms, "longest_stall_ms_at_most": round(longest_le * 1000, 1),
            "gc_ms": round(gc_ms * 1000, 2), "stall_thread_ms": split}


def start_slave(master: Cluster, tmp: pathlib.Path) -> Daemon:
    """One slave container for broker-a (brokerId 1): it finds its master through the name server."""
    port = broker_port()
    conf = write_broker_conf(tmp / "slave.conf", name="broker-a", port=port, store=tmp / "slave-store",
                             brokerRole="SLAVE", brokerId=1, flushDiskType="ASYNC_FLUSH")
    cconf = tmp / "slave-container.conf"
    cconf.write_text(f"listenPort={free_port()}\nembeddedNamesrvEnable=false\nnamesrvAddr={master.namesrv}\n"
                     f"brokerConfigPaths={conf}\n"
                     f"metricsPort=-1\ncontainerStateFile={tmp / 'slave-state.json'}\nlogsRoot={tmp / 'slave-logs'}\n")
    d = Daemon(container_cmd(cconf), tmp / "slave.log").start()
    try:
        wait_for(lambda: can_connect(port), 30, "the slave's port")
        wait_for(lambda: rpc(master.broker_addr(), 310, SEND, b"probe").code == 0, 60,
                 "the master's sends acked by the slave")
    except BaseException:
        d.stop()
        raise
    return d


def setup_run(name: str, rates: list[int], shapes: list[str], args: argparse.Namespace,
              tmp: pathlib.Path) -> dict[str, Any]:  # fmt: skip
    flush, slave = SETUPS[name]
    root = tmp / name
    root.mkdir()
    os.sync()
    role: dict[str, Any] = {"brokerRole": "SYNC_MASTER"} if slave else {}
    c = Cluster(root, brokers=1, flushDiskType=flush, waitTimeMillsInSendQueue=200, **role).start()  # RocketMQ's
    slave_d = None
    try:
        addr = c.broker_addr()
        for t in [topic_of(s) for s in shapes] + ["Probe", openloop.TOPIC]:
            assert rpc(addr, 17, {"topic": t, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES)}).code == 0
        if slave:
            slave_d = start_slave(c, root)
        mport = metrics_port(c)
        open_loop(addr, topic_of("json_uniq"), "json_uniq", rates[0], argparse.Namespace(**{**vars(args), "seconds": 2.0}),
                  root)  # warm-up: files created, caches warm
        runs: dict[str, Any] = {}
        for rate in rates:
            for shape in shapes:
                before = scrape(mport)
                r = open_loop(addr, topic_of(shape), shape, rate, args, root)
                r["loop"] = stall_delta(before, scrape(mport))
                runs[f"{shape}@{rate:.0f}"] = r
                print(f"{name} {shape} {rate:.0f}/s: p99 {r['send'].get('p99_ms')} ms, p99.9 "
                      f"{r['send'].get('p99.9_ms')} ms, stalls>5ms {r['loop']['stalls_over_5ms']}", file=sys.stderr)
            if args.e2e:
                before = scrape(mport)
                e = openloop.one_rate(addr, argparse.Namespace(**{**vars(args)}), int(rate), root, True)
                e.pop("_curves", None)
                e["loop"] = stall_delta(before, scrape(mport))
                runs[f"e2e@{rate:.0f}"] = e
        return {"flush": flush, "sync_slave": slave, "runs": runs}
    finally:
        if slave_d is not None:
            slave_d.stop()
        c.stop()


def goals(report: dict[str, Any], factors: list[float]) -> list[str]:
    """Issue 28's goals, one line each: met or not, with the figures."""
    out = []
    echo = report["echo"]["runs"]
    for setup, res in report["setups"].items():
        for key, r in res["runs"].items():
            what, rate = key.rsplit("@", 1)
            ref = echo.get(rate)
            if ref is None:
                continue
            d = r["e2e"] if what == "e2e" else r["send"]
            p99, p999, e99, e999 = d["p99_ms"], d["p99.9_ms"], ref["send"]["p99_ms"], ref["send"]["p99.9_ms"]
            if what == "e2e":
                if float(rate) == report["rates"][0]:
                    out.append(f"{'met' if p99 <= 5 else 'NOT'}: {setup} e2e@{rate} p99 {p99} ms <= 5 ms")
            elif setup == "async":
                ok = p99 <= 2 * e99 and p999 <= 4 * e999
                out.append(f"{'met' if ok else 'NOT'}: {setup} {key} p99 {p99} <= 2 x {e99}, p99.9 {p999} <= 4 x {e999}")
            elif res["sync_slave"]:
                out.append(f"{'met' if p99 <= e99 + 3 else 'NOT'}: {setup} {key} p99 {p99} <= {e99} + 3 ms")
            stalls = r["loop"]["stalls_over_5ms"]
            if stalls:
                out.append(f"NOT: {setup} {key} {stalls} loop stalls over 5 ms "
                           f"(longest <= {r['loop']['longest_stall_ms_at_most']} ms; the thread over them, ms: "
                           f"{r['loop']['stall_thread_ms']})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--factors", default="0.3,0.6")
    ap.add_argument("--setups", default="async,sync,async_slave,sync_slave")
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--tick-us", type=float, default=100.0)
    ap.add_argument("--capacity-seconds", type=float, default=5.0)
    ap.add_argument("--no-e2e", dest="e2e", action="store_false")
    args = ap.parse_args()
    os.environ["BROKERD_LOOPMON_INTERVAL_MS"] = "1"  # the containers' stall figures to the millisecond
    shapes = [*SHAPES, *capture_shapes()] if args.shapes == "all" else args.shapes.split(",")
    factors = [float(x) for x in args.factors.split(",")]
    report: dict[str, Any] = {"bench": "latency", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "load_before": os.getloadavg()[0], "cpus": os.cpu_count(),
                              "params": {"seconds": args.seconds, "conns": args.conns, "body": args.body,
                                         "factors": factors, "shapes": shapes}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="latency-") as d:
        tmp = pathlib.Path(d)
        port = free_port()
        echo = Daemon([PY, str(ROOT / "scripts/bench/echo_server.py"), str(port)], tmp / "echo.log").start()
        try:
            wait_for(lambda: can_connect(port), 20, "the echo server")
            eaddr = f"127.0.0.1:{port}"
            cap = cgen.run(eaddr, "Echo", conns=args.conns, inflight=64, seconds=args.capacity_seconds,
                           body=args.body, timeout=args.capacity_seconds + 120)
            capacity = float(cap["msg_per_s"])  # type: ignore[arg-type]
            rates = [round(f * capacity) for f in factors]
            report["echo"] = {"capacity_msg_per_s": round(capacity), "runs": {
                f"{r}": open_loop(eaddr, "Echo", "json_uniq", r, args, tmp) for r in rates}}
        finally:
            echo.stop()
        report["rates"] = rates
        report["setups"] = {s: setup_run(s, rates, shapes, args, tmp) for s in args.setups.split(",")}
    report["goals"] = goals(report, factors)
    report["load_after"] = os.getloadavg()[0]
    print("\n".join(report["goals"]), file=sys.stderr)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
