#!/usr/bin/env python3
"""Micro-benchmark of the Raft package: 3 RaftNodes on loopback with fsync on, proposals/s and latency.

Default: three processes (one node each, like a real deployment; proposers run inside the leader's
process). `--inproc` runs the three nodes in one event loop instead. Prints one JSON object:

    {"mode": ..., "fsync": true, "payload_bytes": 128, "results": [
        {"concurrency": 1, "proposals": N, "seconds": S, "proposals_per_s": X, "p50_ms": ..., "p99_ms": ...},
        ...]}

Usage: python scripts/bench/raft_local.py [--seconds 5] [--concurrency 1,16,256] [--inproc] [--no-fsync]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import shutil
import socket
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvloop  # noqa: E402

from controller.raft.api import RaftConfig, RaftNode  # noqa: E402


class CounterSM:
    """Minimal state machine: counts applies (the benchmark measures Raft, not the application)."""

    def __init__(self) -> None:
        self.count = 0

    def apply(self, index: int, data: bytes) -> object:
        self.count += 1
        return index

    def snapshot(self) -> bytes:
        return self.count.to_bytes(8, "big")

    def restore(self, data: bytes) -> None:
        self.count = int.from_bytes(data, "big")


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def make_cfgs(base: Path, fsync: bool) -> dict[str, RaftConfig]:
    ports = free_ports(3)
    peers = {f"n{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(ports)}
    return {nid: RaftConfig(group="bench", self_id=nid, peers=peers, data_dir=str(base / nid), fsync=fsync)
            for nid in peers}


async def run_load(node: RaftNode, concurrency: int, seconds: float, payload: bytes) -> dict[str, Any]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await node.propose(payload)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    latencies.sort()

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 3)

    return {
        "concurrency": concurrency, "proposals": len(latencies), "seconds": round(elapsed, 3),
        "proposals_per_s": round(len(latencies) / elapsed, 1), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
    }


async def wait_leader(nodes: list[RaftNode]) -> RaftNode:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for n in nodes:
            if n.is_leader and n.core.committed_in_term():
                return n
        await asyncio.sleep(0.01)
    raise SystemExit("no leader elected")


async def bench_inproc(cfgs: dict[str, RaftConfig], levels: list[int], seconds: float, payload: bytes) -> list[Any]:
    nodes = [RaftNode(cfg, CounterSM()) for cfg in cfgs.values()]
    for n in nodes:
        await n.start()
    try:
        leader = await wait_leader(nodes)
        await run_load(leader, 16, 0.5, payload)  # warm-up
        return [await run_load(leader, c, seconds, payload) for c in levels]
    finally:
        for n in nodes:
            await n.stop()


def child_main(cfg: RaftConfig, conn: Connection) -> None:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    uvloop.run(_child(cfg, conn))


async def _child(cfg: RaftConfig, conn: Connection) -> None:
    node = RaftNode(cfg, CounterSM())
    await node.start()
    loop = asyncio.get_running_loop()
    try:
        while True:
            cmd, arg = await loop.run_in_executor(None, conn.recv)
            if cmd == "is_leader":
                conn.send(node.is_leader and node.core.committed_in_term())
            elif cmd == "load":
                conn.send(await run_load(node, *arg))
            elif cmd == "stop":
                break
    finally:
        await node.stop()
        conn.send("stopped")


def bench_procs(cfgs: dict[str, RaftConfig], levels: list[int], seconds: float, payload: bytes) -> list[Any]:
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for cfg in cfgs.values():
        parent, child = ctx.Pipe()
        p = ctx.Process(target=child_main, args=(cfg, child), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    try:
        leader = None
        deadline = time.monotonic() + 30
        while leader is None and time.monotonic() < deadline:
            for pipe in pipes:
                pipe.send(("is_leader", None))
                if pipe.recv():
                    leader = pipe
                    break
            else:
                time.sleep(0.05)  # sleep-ok: polling child processes for an elected leader
        if leader is None:
            raise SystemExit("no leader elected")
        leader.send(("load", (16, 0.5, payload)))  # warm-up
        leader.recv()
        results = []
        for c in levels:
            leader.send(("load", (c, seconds, payload)))
            results.append(leader.recv())
        return results
    finally:
        for pipe in pipes:
            pipe.send(("stop", None))
        for pipe, p in zip(pipes, procs, strict=True):
            if pipe.poll(10):
                pipe.recv()
            p.join(10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="measurement time per concurrency level")
    ap.add_argument("--concurrency", default="1,16,256", help="comma-separated proposer counts")
    ap.add_argument("--payload-bytes", type=int, default=128)
    ap.add_argument("--inproc", action="store_true", help="all three nodes in one process / event loop")
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--data-dir", default=None, help="where the WALs go (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    try:
        levels = [int(x) for x in args.concurrency.split(",") if x]
    except ValueError:
        ap.error("--concurrency must be comma-separated integers")
    if not levels or min(levels) < 1 or args.seconds <= 0 or args.payload_bytes < 0:
        ap.error("concurrency levels and --seconds must be positive")
    base = Path(args.data_dir or tempfile.mkdtemp(prefix="raft-bench-"))
    payload = b"x" * args.payload_bytes
    cfgs = make_cfgs(base, fsync=not args.no_fsync)
    try:
        if args.inproc:
            import logging

            import structlog

            structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
            results = uvloop.run(bench_inproc(cfgs, levels, args.seconds, payload))
        else:
            results = bench_procs(cfgs, levels, args.seconds, payload)
    finally:
        if args.data_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    out = {"mode": "inproc" if args.inproc else "3 processes", "fsync": not args.no_fsync,
           "payload_bytes": args.payload_bytes, "results": results}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
