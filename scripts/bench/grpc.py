#!/usr/bin/env python3
"""Benchmark: the container's gRPC endpoint (RocketMQ 5.x SDK protocol) next to remoting, on the same payloads, in
one run, one JSON document.

One container (one ASYNC_FLUSH broker, enableGrpcProxy) per ``--grpc-workers`` value (the endpoint's worker
processes besides its own, brokerd/proxy/workers.py). Every client is compiled, in its own process, and costs a
small part of what the container spends per message, so the container is what each phase measures:
  * remoting send: scripts/bench/gen.c (SEND_MESSAGE_V2 as the Java client sends it, UNIQ_KEY), closed loop
  * gRPC send: scripts/bench/grpcload (Go, raw protobuf) SendMessage, one message per call, same bodies,
    connections and calls in flight
  * remoting pull: scripts/bench/consume.c (PULL_MESSAGE, 32 a pull) of everything the remoting send stored
  * gRPC receive + ack: grpcload ReceiveMessage (batch 32, POP in the broker) then one AckMessage of the batch,
    ``--receivers`` loops over the same connections, of everything the gRPC send stored
  * the grpcio floor: a bare grpc.aio server (uvloop, generic handler, bytes in and out, scripts/bench/grpc_floor.py)
    driven by the same client: an empty unary call, and a server stream of batch + 2 answers (a ReceiveMessage's
    shape): what grpcio alone costs per call on this machine.
Each phase reports msg/s, the latency p50/p99 of one request (a send; a receive+ack round), the CPU per message
of the container process and of its gRPC workers (/proc, sampled around exactly the measured run), the client's,
and the load average when it started. The remoting phases run with the first container only. ``--repeat`` runs
the sequence again (the machine is shared: the medians are reported with every run kept).
``bounds`` splits the gRPC phases' CPU per message: what grpcio costs (the floor) and what is left (the endpoint's
Python, the in-process remoting and the broker's store).

Usage: .venv/bin/python scripts/bench/grpc.py [--messages N] [--remoting-messages N] [--body B] [--conns C]
                                               [--inflight K] [--receivers R] [--batch B] [--repeat R]
                                               [--grpc-workers 0,1] [--no-floor] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
# run as a script, this file's directory comes first on sys.path, and this file would shadow the grpc package
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen  # noqa: E402
from scripts.bench.grpc_floor import floor  # noqa: E402
from scripts.bench.grpcload_build import grpcload_binary, run_synced  # noqa: E402
from scripts.bench.openloop import max_offsets  # noqa: E402

QUEUES = 8


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


class Processes:
    """The container's process and its gRPC workers (its children): CPU seconds of each, sampled together."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.workers = children(pid)

    def cpu(self) -> tuple[float, float]:
        return cpu_seconds(self.pid), sum(cpu_seconds(w) for w in self.workers)


def measured(procs: Processes, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a C client phase with the container's CPU sampled around it."""
    load = os.getloadavg()[0]
    c0, w0 = procs.cpu()
    res = fn()
    c1, w1 = procs.cpu()
    return {**res, "container_cpu_s": c1 - c0, "workers_cpu_s": w1 - w0, "load1": round(load, 2)}


def grpc_phase(procs: Processes, args: list[str]) -> dict[str, Any]:
    load = os.getloadavg()[0]
    before = procs.cpu()
    res = run_synced(grpcload_binary(), args, lambda: cpu_seconds(procs.pid))
    after = procs.cpu()  # the workers are sampled after the run (the client reports at once when it ends)
    res["container_cpu_s"] = res.pop("server_cpu_s")
    res["workers_cpu_s"] = after[1] - before[1]
    res["load1"] = round(load, 2)
    return res


def row(res: dict[str, Any], msgs: int, p50: float, p99: float) -> dict[str, Any]:
    n = max(1, msgs)
    out = {"msgs": msgs, "seconds": round(float(res["seconds"]), 3),
           "msg_per_s": round(msgs / max(1e-9, float(res["seconds"]))), "p50_ms": p50, "p99_ms": p99,
           "container_cpu_us_per_msg": round(res["container_cpu_s"] * 1e6 / n, 1), "load1": res["load1"]}
    if res.get("workers_cpu_s"):
        out["workers_cpu_us_per_msg"] = round(res["workers_cpu_s"] * 1e6 / n, 1)
    out["cpu_us_per_msg"] = round((res["container_cpu_s"] + res.get("workers_cpu_s", 0.0)) * 1e6 / n, 1)
    if "client_cpu_us_per_msg" in res:
        out["client_cpu_us_per_msg"] = round(float(res["client_cpu_us_per_msg"]), 1)
    if res.get("errors"):
        out["errors"] = res["errors"]
    return out


def one_round(a: argparse.Namespace, procs: Processes, broker: str, endpoint: str, n: int,
              remoting: bool) -> dict[str, Any]:
    """The phases once, on topics of their own (``n``: the round); the remoting ones when ``remoting``."""
    from tests.support import rpc

    rt, gt = f"BenchRemoting{n}", f"BenchGrpc{n}"
    for t in (rt, gt):
        rpc(broker, 17, {"topic": t, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES)})
    common = ["-addr", endpoint, "-conns", str(a.conns), "-body", str(a.body)]
    out: dict[str, Any] = {}
    if remoting:
        r = measured(procs, lambda: cgen.run(broker, rt, shape="json_uniq", queues=QUEUES, body=a.body,
                                             conns=a.conns, inflight=a.inflight, total=a.remoting_messages))
        out["remoting_send"] = row(r, int(r["msgs"]), r["ok_latency"]["p50_ms"], r["ok_latency"]["p99_ms"])
    g = grpc_phase(procs, ["-mode", "send", "-topic", gt, "-total", str(a.messages), "-inflight", str(a.inflight),
                           *common])
    out["grpc_send"] = row(g, int(g["msgs"]), g["p50_ms"], g["p99_ms"])
    if remoting:
        end = max_offsets(broker, rt, QUEUES)
        r = measured(procs, lambda: cgen.consume(broker, rt, [0] * QUEUES, end=end, group=f"benchPull{n}",
                                                 max_msgs=a.batch, timeout=600))
        lat = r["pull_latency"]
        out["remoting_pull"] = row(r, int(r["msgs"]), lat["p50_ms"], lat["p99_ms"])
    stored = sum(max_offsets(broker, gt, QUEUES))
    g = grpc_phase(procs, ["-mode", "receive", "-topic", gt, "-group", f"benchGroup{n}", "-total", str(stored),
                           "-batch", str(a.batch), "-inflight", str(max(1, a.receivers // a.conns)), *common])
    out["grpc_receive_ack"] = row(g, int(g["msgs"]), g["p50_ms"], g["p99_ms"])
    return out


def floors(a: argparse.Namespace) -> dict[str, Any]:
    """The grpcio floor, driven like the send and receive phases."""
    unary = floor("uvloop", "raw", "unary", a.conns, a.inflight, rpcs=a.messages, body=a.body)
    stream = floor("uvloop", "raw", "stream", a.conns, max(1, a.receivers // a.conns),
                   rpcs=max(100, a.messages // a.batch), body=a.body, stream_len=a.batch + 2)
    return {"unary": unary, "stream": stream}


def median_rows(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase in rounds[0]:
        rows = [r[phase] for r in rounds]
        out[phase] = {k: statistics.median(x[k] for x in rows) if isinstance(rows[0][k], (int, float)) else rows[0][k]
                      for k in rows[0] if all(k in x for x in rows)}
    return out


def bounds(med: dict[str, Any], fl: dict[str, Any], batch: int, workers: int) -> dict[str, Any]:
    """The gRPC phases' CPU per message (the container and its workers) split into grpcio's floor and the rest:
    the endpoint's Python, the remoting to the broker (in-process, or TCP from a worker) and the broker's own work
    (the remoting phases' CPU per message is that share when a client sends it directly)."""
    send = med[f"grpc_send_w{workers}"]["cpu_us_per_msg"]
    floor_send = fl["unary"]["server_cpu_us_per_rpc"]
    recv = med[f"grpc_receive_ack_w{workers}"]["cpu_us_per_msg"]
    floor_recv = (fl["stream"]["server_cpu_us_per_rpc"] + fl["unary"]["server_cpu_us_per_rpc"]) / batch
    return {
        "send": {"cpu_us_per_msg": send, "grpcio_floor_us": floor_send,
                 "endpoint_and_broker_us": round(send - floor_send, 1),
                 "remoting_send_us": med["remoting_send"]["cpu_us_per_msg"]},
        "receive_ack": {"cpu_us_per_msg": recv, "grpcio_floor_us": round(floor_recv, 1),
                        "endpoint_and_broker_us": round(recv - floor_recv, 1),
                        "remoting_pull_us": med["remoting_pull"]["cpu_us_per_msg"]},
    }


def run_config(a: argparse.Namespace, tmp: pathlib.Path, workers: int, remoting: bool) -> list[dict[str, Any]]:
    """A container with ``workers`` gRPC workers: the rounds of phases."""
    from tests.support import Cluster, free_port, rpc

    port = free_port()
    c = Cluster(tmp, brokers=1, container_extra={"enableGrpcProxy": "true", "grpcListenPort": port,
                                                 "grpcWorkers": workers}).start()
    try:
        assert c.daemon is not None and c.daemon.proc is not None
        endpoint = f"127.0.0.1:{port}"
        time.sleep(2 if workers else 0)  # sleep-ok: the workers' listeners take new connections after a moment
        procs = Processes(c.daemon.proc.pid)
        # warm-up: the endpoint's routes, sessions and channels, the lane's topic table
        rpc(c.broker_addr(), 17, {"topic": "BenchWarm", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES)})
        grpc_phase(procs, ["-mode", "send", "-addr", endpoint, "-topic", "BenchWarm", "-total", "3000", "-conns",
                           str(a.conns), "-inflight", "8", "-body", str(a.body)])
        return [one_round(a, procs, c.broker_addr(), endpoint, n, remoting) for n in range(a.repeat)]
    finally:
        c.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000, help="gRPC sends (and receives)")
    ap.add_argument("--remoting-messages", type=int, default=300_000,
                    help="remoting sends (and pulls): as many as make a run of seconds (/proc counts 10 ms ticks)")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--inflight", type=int, default=16, help="calls in flight per connection (sends)")
    ap.add_argument("--receivers", type=int, default=16, help="concurrent receive+ack loops (over the connections)")
    ap.add_argument("--batch", type=int, default=32, help="messages per receive / pull")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--grpc-workers", default="0,1", help="grpcWorkers values, one container each")
    ap.add_argument("--no-floor", action="store_true", help="skip the grpcio floor runs")
    ap.add_argument("--quick", action="store_true", help="a short smoke run (small counts, one round, no workers)")
    a = ap.parse_args()
    if a.quick:
        a.messages, a.remoting_messages, a.repeat, a.grpc_workers = 3000, 50_000, 1, "0"
    load_start = os.getloadavg()[0]
    cgen.build("mqgen")
    cgen.build("mqconsume")
    grpcload_binary()
    configs = [int(x) for x in a.grpc_workers.split(",") if x.strip()]
    rounds: list[dict[str, Any]] = [{} for _ in range(a.repeat)]
    for i, workers in enumerate(configs):
        with tempfile.TemporaryDirectory(prefix="bench-grpc-") as tmp:
            for n, r in enumerate(run_config(a, pathlib.Path(tmp), workers, remoting=i == 0)):
                rounds[n].update({k if k.startswith("remoting") else f"{k}_w{workers}": v for k, v in r.items()})
    med = median_rows(rounds)
    res: dict[str, Any] = {"phases": med, "ratios": {}}
    for w in configs:
        res["ratios"][f"w{w}"] = {
            "send_grpc_over_remoting": round(med[f"grpc_send_w{w}"]["msg_per_s"]
                                             / max(1, med["remoting_send"]["msg_per_s"]), 4),
            "receive_ack_grpc_over_pull": round(med[f"grpc_receive_ack_w{w}"]["msg_per_s"]
                                                / max(1, med["remoting_pull"]["msg_per_s"]), 4)}
    if not a.no_floor:
        fl = floors(a)
        res["grpcio_floor"] = fl
        res["bounds"] = {f"w{w}": bounds(med, fl, a.batch, w) for w in configs}
    res["rounds"] = rounds
    res["config"] = {"messages": a.messages, "remoting_messages": a.remoting_messages, "body": a.body,
                     "conns": a.conns, "inflight": a.inflight, "receivers": a.receivers, "batch": a.batch,
                     "repeat": a.repeat, "grpc_workers": configs, "cpus": os.cpu_count(),
                     "machine": platform.machine(), "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d %H:%M"), "load_start": round(load_start, 2),
                     "load_end": round(os.getloadavg()[0], 2)}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
