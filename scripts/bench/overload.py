"""Overload: SYNC_FLUSH brokers flooded by the compiled generator (scripts/bench/gen.c, flood mode: each answer,
success or SYSTEM_BUSY, frees its slot for a new send at once), and what a RocketMQ producer next to a flooded broker
set sees. Prints one JSON document.

* ``sane``: the broker's rate at a sane window (closed loop, 8 connections x 128 in flight);
* ``flood``: 16 x 2,048 and 64 x 512 sends in flight (``--floods``) for ``--seconds``: every answer's latency from
  its send (success or SYSTEM_BUSY; how many took over 250 ms), successes per second against ``sane``, refusals by
  reason, then single sends right after. ``--compare``: the same floods with shedding off
  (brokerFastFailureEnable=false);
* ``--two-sets``: two broker sets in two containers (broker-a flooded 16 x 2,048, broker-b not), and RocketMQ's
  Java producer (tests/clients/java/remoting .../overload/RetryingProducer.java: synchronous sends, open loop at
  ``--java-rate``, SYSTEM_BUSY retried on the other set as the client does by default) on a topic of both sets:
  its latency with broker-a flooded against the same schedule with nothing flooded; ``--java-isolate``: also
  with the producer's sendLatencyFaultEnable=true (RocketMQ's client then avoids a set that failed or answered
  slowly for a while, instead of trying it first on every other send).

Usage: .venv/bin/python scripts/bench/overload.py [--floods 16x2048,64x512] [--seconds 8] [--compare]
       [--two-sets] [--java-rate 2000] [--java-isolate]
"""

from __future__ import annotations

import argparse
import array
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen, openloop  # noqa: E402
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

SEND = {"a": "pg", "b": "Flood", "c": "TBW102", "d": "8", "e": "0", "f": "0", "g": "0", "h": "0", "i": ""}
LIMIT_MS = 250.0


def flood(addr: str, conns: int, inflight: int, seconds: float, tmp: pathlib.Path) -> dict[str, Any]:
    """Every answer's latency (success or refusal) from its send, successes per second, refusals by reason."""
    out = tmp / f"flood-{conns}x{inflight}.bin"
    r = cgen.run(addr, "Flood", shape="json_no_uniq", conns=conns, inflight=inflight, seconds=seconds, body=1024,
                 timeout=seconds + 300, lat_out=out)
    lat = array.array("d")
    lat.frombytes(out.read_bytes())
    over = sum(1 for x in lat if x * 1000 > LIMIT_MS)
    assert isinstance(r["errors"], dict)
    return {"window": f"{conns}x{inflight}", "seconds": r["seconds"], "answers": r["answered"], "ok": r["acked"],
            "ok_per_s": r["msg_per_s"], "answers_per_s": r["answers_per_s"], "codes": {"0": r["acked"], **r["errors"]},
            "busy": r["busy"], "latency": openloop.distribution(lat), "over_250ms": over,
            "over_250ms_share": round(over / max(1, len(lat)), 6), "timed_out": r["timed_out"]}  # fmt: skip


def after(addr: str) -> dict[str, Any]:
    """Single sends right after a flood: codes and the median time."""
    got = []
    for _ in range(20):
        t = time.perf_counter()
        code = rpc(addr, 310, SEND, b"x").code
        got.append((code, round((time.perf_counter() - t) * 1000, 2)))
    return {"codes": sorted({c for c, _ in got}), "median_ms": sorted(t for _, t in got)[10]}


def create(addr: str, topic: str) -> None:
    assert rpc(addr, 17, {"topic": topic, "readQueueNums": "8", "writeQueueNums": "8"}).code == 0


def floods(tmp: pathlib.Path, args: argparse.Namespace, **cfg: Any) -> dict[str, Any]:
    c = Cluster(tmp, brokers=1, flushDiskType="SYNC_FLUSH", waitTimeMillsInSendQueue=200, **cfg).start()
    try:
        addr = c.broker_addr()
        create(addr, "Flood")
        sane = cgen.run(addr, "Flood", shape="json_no_uniq", conns=8, inflight=128, seconds=3.0, body=1024,
                        timeout=300)
        res: dict[str, Any] = {"sane_8x128_ok_per_s": sane["msg_per_s"]}
        for window in args.floods.split(","):
            conns, inflight = (int(x) for x in window.split("x"))
            os.sync()
            f = flood(addr, conns, inflight, args.seconds, tmp)
            f["ok_vs_sane"] = round(float(f["ok_per_s"]) / float(sane["msg_per_s"]), 3)  # type: ignore[arg-type]
            f["after"] = after(addr)
            res[window] = f
        return res
    finally:
        c.stop()


def second_set(master: Cluster, tmp: pathlib.Path) -> tuple[Daemon, str]:
    """broker-b in its own container (its own loop and core share), registered with broker-a's name server."""
    port = broker_port()
    conf = write_broker_conf(tmp / "broker-b.conf", name="broker-b", port=port, store=tmp / "store-b",
                             flushDiskType="SYNC_FLUSH", waitTimeMillsInSendQueue=200)
    cconf = tmp / "b-container.conf"
    cconf.write_text(f"listenPort={free_port()}\nnamesrvAddr={master.namesrv}\nbrokerConfigPaths={conf}\n"
                     f"metricsPort=-1\ncontainerStateFile={tmp / 'b-state.json'}\nlogsRoot={tmp / 'b-logs'}\n")
    d = Daemon(container_cmd(cconf), tmp / "b.log").start()
    wait_for(lambda: can_connect(port), 30, "broker-b's port")
    return d, f"127.0.0.1:{port}"


def java_producer(namesrv: str, rate: float, seconds: float, isolate: bool = False) -> dict[str, Any]:
    from tests.java_support import java_command

    cmd = java_command("remoting", "org.pyrmq.tests.overload.RetryingProducer",
                       [namesrv, "Shared", str(rate), str(seconds), "64", "true" if isolate else "false"])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 300)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines:
        raise RuntimeError(f"RetryingProducer failed ({out.returncode}): {out.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(lines[-1])
    return res


def two_sets(tmp: pathlib.Path, args: argparse.Namespace) -> dict[str, Any]:
    a = Cluster(tmp, brokers=1, flushDiskType="SYNC_FLUSH", waitTimeMillsInSendQueue=200).start()
    b = None
    try:
        b, b_addr = second_set(a, tmp)
        for addr in (a.broker_addr(), b_addr):
            create(addr, "Shared")
            create(addr, "Flood")
        wait_for(lambda: len(json.loads(rpc(a.namesrv, 105, {"topic": "Shared"}).body)["brokerDatas"]) == 2, 30,
                 "the topic routed to both sets")
        out = {"producer_alone": java_producer(a.namesrv, args.java_rate, args.seconds)}
        for isolate in (False, True) if args.java_isolate else (False,):
            flooded: dict[str, Any] = {}

            def run_flood(into: dict[str, Any] = flooded) -> None:
                into["flood"] = flood(a.broker_addr(), 16, 2048, args.seconds + 4, tmp)

            t = threading.Thread(target=run_flood)
            t.start()
            time.sleep(2.0)  # the flood under way (mqgen connects and fills its window)
            flooded["producer"] = java_producer(a.namesrv, args.java_rate, args.seconds, isolate)
            t.join()
            tail = "_latency_fault_on" if isolate else ""
            out[f"producer_with_broker_a_flooded{tail}"] = flooded["producer"]
            out[f"flood_on_broker_a{tail}"] = flooded["flood"]
        return out
    finally:
        if b is not None:
            b.stop()
        a.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--floods", default="16x2048,64x512")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--compare", action="store_true", help="also with shedding off")
    ap.add_argument("--two-sets", action="store_true", help="two broker sets and RocketMQ's Java producer")
    ap.add_argument("--java-rate", type=float, default=2000.0)
    ap.add_argument("--java-isolate", action="store_true",
                    help="also with the producer's sendLatencyFaultEnable=true (it avoids a broker that answered slowly "
                         "or SYSTEM_BUSY for a while)")
    args = ap.parse_args()
    res: dict[str, Any] = {"bench": "overload", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                           "load_before": os.getloadavg()[0],
                           "params": {"floods": args.floods, "seconds": args.seconds, "flush": "SYNC_FLUSH"}}
    with tempfile.TemporaryDirectory(prefix="overload-") as d:
        tmp = pathlib.Path(d)
        runs: list[tuple[str, dict[str, str]]] = [("shedding", {})]
        if args.compare:
            runs.append(("no_shedding", {"brokerFastFailureEnable": "false"}))
        for name, cfg in runs:
            (tmp / name).mkdir()
            res[name] = floods(tmp / name, args, **cfg)
        if args.two_sets:
            (tmp / "two").mkdir()
            res["two_sets"] = two_sets(tmp / "two", args)
    res["load_after"] = os.getloadavg()[0]
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
