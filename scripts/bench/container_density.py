#!/usr/bin/env python3
"""Benchmark: N brokers in one container vs N single-broker processes (N = 1, 4, 16).

Reports total RSS (idle, after load), time from start to all ports serving, time from `addBroker` to serving,
and aggregate produce throughput with load spread over all brokers: a first (cold: every broker still creates
its segment, index and queue files) and then `--steady` steady-state loads of the same size (their median is
the steady figure; the brokers roll into new segments during them). One shared mqnamesrv serves both layouts.
Usage: .venv/bin/python scripts/bench/container_density.py [--sizes 1,4,16] [--total 60000] [--steady 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support import VENV_BIN, Daemon, broker_port, can_connect, free_port, rpc, wait_for, write_broker_conf  # noqa: E402

PY = sys.executable


def rss_kib(pid: int) -> int:
    total = 0
    for p in [pid] + [int(c) for c in _children(pid)]:
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []


def container_conf(d: pathlib.Path, name: str, namesrv: str, brokers: list[pathlib.Path]) -> pathlib.Path:
    conf = d / f"{name}.conf"
    conf.write_text(f"listenPort={free_port()}\nembeddedNamesrvEnable=false\nnamesrvAddr={namesrv}\n"
                    f"metricsPort=-1\ncontainerStateFile={d / (name + '.state')}\nlogsRoot={d / 'logs'}\n"
                    f"brokerConfigPaths={':'.join(str(b) for b in brokers)}\n")
    return conf


def make_brokers(d: pathlib.Path, n: int, tag: str) -> tuple[list[pathlib.Path], list[int]]:
    confs, ports = [], []
    for i in range(n):
        port = broker_port()
        ports.append(port)
        confs.append(write_broker_conf(d / f"{tag}-{i}.conf", name=f"{tag}-{i}", port=port,
                                       store=d / "store" / f"{tag}-{i}", registerNameServerPeriod=30000))
    return confs, ports


def settle(d: pathlib.Path) -> None:
    """Every layout starts from the same state: the previous layout's stores deleted and the page cache's dirty
    pages written back (otherwise the kernel's writeback of earlier runs lands in the later runs' numbers)."""
    shutil.rmtree(d / "store", ignore_errors=True)
    os.sync()


def serving(ports: list[int]) -> bool:
    return all(can_connect(p) and rpc(f"127.0.0.1:{p}", 30, {"topic": "TBW102", "queueId": "0"}).code == 0
               for p in ports)


def load(ports: list[int], total: int) -> dict[str, Any]:
    """The same load shape for every N (16 connections x 16 in flight), spread round-robin over the brokers."""
    addrs = ",".join(f"127.0.0.1:{p}" for p in ports)
    out = subprocess.run([PY, "-m", "scripts.bench.loadgen", "produce", "--addr", addrs, "--conns", "16",
                          "--inflight", "16", "--total", str(total), "--topic", "DensityTopic"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def loads(ports: list[int], total: int, steady: int) -> dict[str, object]:
    """The cold load, then ``steady`` loads: their median is the steady-state figure."""
    cold = load(ports, total)
    runs = [load(ports, total) for _ in range(steady)]
    mid = sorted(runs, key=lambda r: float(r["msg_per_s"]))[len(runs) // 2]
    return {"produce_cold": cold, "produce": mid, "steady_msg_per_s": [r["msg_per_s"] for r in runs]}


def one_container(d: pathlib.Path, n: int, namesrv: str, total: int, steady: int) -> dict[str, object]:
    confs, ports = make_brokers(d, n, f"c{n}")
    conf = container_conf(d, f"container{n}", namesrv, confs)
    t0 = time.monotonic()
    dm = Daemon([str(VENV_BIN / "mqbrokercontainer"), "-c", str(conf)], d / f"container{n}.log").start()
    try:
        wait_for(lambda: serving(ports), 120, "all brokers serving", interval=0.01)
        start_s = time.monotonic() - t0
        assert dm.proc is not None
        idle = rss_kib(dm.proc.pid)
        extra_conf, extra_ports = make_brokers(d, 1, f"x{n}")
        admin = int(conf.read_text().split("listenPort=")[1].split()[0])
        t1 = time.monotonic()
        subprocess.run([str(VENV_BIN / "mqadmin"), "addBroker", "-c", f"127.0.0.1:{admin}", "-b", str(extra_conf[0])],
                       check=True, capture_output=True)
        wait_for(lambda: serving(extra_ports), 30, "added broker serving", interval=0.005)
        add_ms = (time.monotonic() - t1) * 1000
        subprocess.run([str(VENV_BIN / "mqadmin"), "removeBroker", "-c", f"127.0.0.1:{admin}", "-b",
                        f"DefaultCluster:x{n}-0:0"], check=True, capture_output=True)
        produced = loads(ports, total, steady)
        return {"rss_idle_mib": round(idle / 1024, 1), "rss_loaded_mib": round(rss_kib(dm.proc.pid) / 1024, 1),
                "start_to_serving_s": round(start_s, 3), "add_broker_to_serving_ms": round(add_ms, 1), **produced}
    finally:
        dm.stop()


def separate(d: pathlib.Path, n: int, namesrv: str, total: int, steady: int) -> dict[str, object]:
    confs, ports = make_brokers(d, n, f"s{n}")
    t0 = time.monotonic()
    daemons = [Daemon([str(VENV_BIN / "mqbrokercontainer"), "-c",
                       str(container_conf(d, f"single{n}-{i}", namesrv, [c]))], d / f"single{n}-{i}.log").start()
               for i, c in enumerate(confs)]
    try:
        wait_for(lambda: serving(ports), 300, "all single-broker processes serving", interval=0.01)
        start_s = time.monotonic() - t0
        idle = sum(rss_kib(dm.proc.pid) for dm in daemons if dm.proc)
        produced = loads(ports, total, steady)
        loaded = sum(rss_kib(dm.proc.pid) for dm in daemons if dm.proc)
        return {"rss_idle_mib": round(idle / 1024, 1), "rss_loaded_mib": round(loaded / 1024, 1),
                "start_to_serving_s": round(start_s, 3), **produced}
    finally:
        for dm in daemons:
            dm.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--total", type=int, default=60_000)
    ap.add_argument("--steady", type=int, default=3, help="steady-state loads after the cold one (median reported)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="density-") as tmp:
        d = pathlib.Path(tmp)
        ns_port = free_port()
        (d / "ns.conf").write_text(f"listenPort={ns_port}\n")
        ns = Daemon([str(VENV_BIN / "mqnamesrv"), "-c", str(d / "ns.conf")], d / "ns.log").start()
        try:
            wait_for(lambda: can_connect(ns_port), 30, "name server")
            namesrv = f"127.0.0.1:{ns_port}"
            for n in sizes:
                settle(d)
                results[f"container_n{n}"] = one_container(d, n, namesrv, args.total, args.steady)
                settle(d)
                results[f"separate_n{n}"] = separate(d, n, namesrv, args.total, args.steady)
        finally:
            ns.stop()
    summary: dict[str, object] = {}
    if 1 in sizes and max(sizes) > 1:
        big = max(sizes)
        c1, cn = results["container_n1"], results[f"container_n{big}"]
        sn = results[f"separate_n{big}"]
        summary = {
            f"container_rss_vs_separate_n{big}": round(cn["rss_idle_mib"] / sn["rss_idle_mib"], 3),
            "extra_idle_broker_mib": round((cn["rss_idle_mib"] - c1["rss_idle_mib"]) / (big - 1), 2),
            f"throughput_n{big}_vs_n1": round(cn["produce"]["msg_per_s"] / c1["produce"]["msg_per_s"], 3),
            f"throughput_n{big}_vs_n1_cold": round(cn["produce_cold"]["msg_per_s"] / c1["produce_cold"]["msg_per_s"], 3),
        }
    print(json.dumps({"bench": "container_density", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                      "machine": platform.machine(), "cpus": os.cpu_count(), "results": results,
                      "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
