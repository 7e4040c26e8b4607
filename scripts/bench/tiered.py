#!/usr/bin/env python3
"""Benchmark: tiered storage (docs/tiered.md) with real processes, prints one JSON document.

Sections, each side by side in one run:
  produce    loadgen produce (1 KiB, 4 conns x 64 in flight) against a broker with tiering off and one with a POSIX
             tier on, rounds interleaved; the tier's upload MB/s during the load and the produce cost (on / off)
  reads      cold consume (page cache dropped) of the same data: all local (tiering off) vs from the tier (the
             tiered broker's local segments expired); msg/s, MB/s, pull p50/p99
  bootstrap  an empty slave (store wiped) of a master holding --bootstrap-mib: from the tier (tieredBootstrapFromTier)
             vs full replication from the master; seconds to caught up, and the master container's CPU meanwhile

Usage: .venv/bin/python scripts/bench/tiered.py [--total N] [--bootstrap-mib M] [--sections produce,reads,...]
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from brokerd.remoting.client import RemotingClient  # noqa: E402
from scripts.bench.ha_common import (  # noqa: E402
    create_topic,
    machine,
    pid_of,
    process_cpu_s,
    runtime,
    stop_cluster,
    wait_until,
)
from scripts.bench.ha_replication import catchup_marks, fill, full_sync_state_set  # noqa: E402
from scripts.bench.produce_consume import loadgen  # noqa: E402
from tests.ha_cluster import HACluster  # noqa: E402
from tests.support import Cluster, rpc, wait_for  # noqa: E402

SECTIONS = ("produce", "reads", "bootstrap")
SEGMENT = 64 * 1024 * 1024


def log(msg: str) -> None:
    print(f"[tiered-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tier_keys(path: pathlib.Path) -> dict[str, Any]:
    return {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix", "tieredStoreFilePath": str(path),
            "mappedFileSizeCommitLog": SEGMENT}  # fmt: skip


def table(addr: str) -> dict[str, str]:
    out: dict[str, str] = json.loads(rpc(addr, 28).body)["table"]
    return out


def drop_caches() -> bool:
    os.sync()
    try:
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def produce_and_reads(a: argparse.Namespace, tmp: pathlib.Path) -> dict[str, Any]:
    for sub in ("off", "on"):
        (tmp / sub).mkdir()
    off = Cluster(tmp / "off", 1, mappedFileSizeCommitLog=SEGMENT).start()
    on = Cluster(tmp / "on", 1, **tier_keys(tmp / "tier"), cleanResourceInterval=200).start()
    out: dict[str, Any] = {"rounds": []}
    try:
        for c in (off, on):
            assert rpc(c.broker_addr(), 17, {"topic": "BenchTopic", "readQueueNums": "8", "writeQueueNums": "8"}).code == 0
        for r in range(a.rounds):
            for name, c in (("off", off), ("on", on)):
                os.sync()
                before = int(table(c.broker_addr()).get("tieredUploadedBytes", 0))
                t0 = time.monotonic()
                res = loadgen("produce", c.broker_addr(), a, "BenchTopic", a.total)
                dt = time.monotonic() - t0
                row: dict[str, Any] = {"round": r, "tier": name, "msg_per_s": res["msg_per_s"], "p99_ms": res["p99_ms"]}
                if name == "on":
                    up = int(table(c.broker_addr())["tieredUploadedBytes"]) - before
                    row["uploaded_mb_during_load"] = round(up / 1e6, 1)
                    row["upload_mb_per_s_during_load"] = round(up / dt / 1e6, 1)
                out["rounds"].append(row)
                log(f"produce round {r} tier {name}: {row}")
        ons = [x["msg_per_s"] for x in out["rounds"] if x["tier"] == "on"]
        offs = [x["msg_per_s"] for x in out["rounds"] if x["tier"] == "off"]
        out["produce_ratio_on_to_off"] = round(sum(ons) / sum(offs), 3)
        t0 = time.monotonic()
        wait_for(lambda: int(table(on.broker_addr())["tieredEnd"]) >= int(table(on.broker_addr())["commitLogMaxOffset"])
                 - SEGMENT, 300, "the tier caught up with the sealed segments")  # fmt: skip
        out["tier_drain_after_load_s"] = round(time.monotonic() - t0, 2)
        out["reads"] = reads(a, off, on)
    finally:
        off.stop()
        on.stop()
    return out


def reads(a: argparse.Namespace, off: Cluster, on: Cluster) -> dict[str, Any]:
    # expire the tiered broker's local segments (space pressure: only what the tier holds may go)
    assert rpc(on.broker_addr(), 25, body=b"diskSpaceCleanForciblyRatio=0.000001").code == 0
    store = on.tmp / "store" / "broker-a" / "commitlog"
    wait_for(lambda: len([p for p in store.iterdir() if p.name.isdigit()]) <= 2, 120, "local segments expired")
    total = a.total * a.rounds
    res: dict[str, Any] = {"page_cache_dropped": drop_caches()}
    res["local_cold"] = loadgen("consume", off.broker_addr(), a, "BenchTopic", total)
    drop_caches()
    res["tier_cold"] = loadgen("consume", on.broker_addr(), a, "BenchTopic", total)
    res["tier_reader"] = {k: v for k, v in table(on.broker_addr()).items() if k.startswith("tiered")}
    res["tier_to_local_msg_per_s"] = round(res["tier_cold"]["msg_per_s"] / res["local_cold"]["msg_per_s"], 3)
    log(f"reads: {res}")
    return res


async def bootstrap_one(cl: HACluster, a: argparse.Namespace) -> dict[str, Any]:
    await full_sync_state_set(cl, 2)
    master, slave = cl.broker_addr("broker-a", 0), cl.broker_addr("broker-a", 1)
    cli = RemotingClient(connect_timeout=0.5)
    try:
        await create_topic(cli, master, "CatchUp", 8)
        cl.daemons[1].stop()
        shutil.rmtree(cl.tmp / "c1" / "broker-a", ignore_errors=True)
        produced = await fill(cli, master, a)
        m = await runtime(cli, master)
        assert m is not None
        target = int(m["commitLogMaxOffset"])

        async def tier_done() -> bool:
            t = await runtime(cli, master)
            return t is not None and int(t["tieredEnd"]) >= target - target % SEGMENT

        await wait_until(tier_done, 600, "the tier holding the sealed segments", 0.1)
        drop_caches()
        cpu0 = process_cpu_s(pid_of(cl, 0))
        t0 = time.monotonic()
        cl.start_container(1)
        marks: dict[str, float] = {}
        await wait_until(lambda: catchup_marks(cli, slave, target, t0, marks), 900, "the slave caught up", 0.05)
        cpu1 = process_cpu_s(pid_of(cl, 0))
        st = await runtime(cli, slave)
        assert st is not None
        secs = marks["caught_up_s"]
        master_cpu = cpu1 - cpu0
        return {"bytes": target, "mib": round(target / 2**20), "fill_msg_per_s": produced.get("msg_per_s"), **marks,
                "mb_per_s": round(target / secs / 1e6, 1), "master_cpu_s": round(master_cpu, 2),
                "master_cpu_share": round(master_cpu / secs, 3),
                "bootstrapped_from_tier_mib": round(int(st.get("tieredBootstrappedBytes", 0)) / 2**20)}  # fmt: skip
    finally:
        await cli.close()


def bootstrap(a: argparse.Namespace, tmp: pathlib.Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, from_tier in (("via_tier", "true"), ("via_replication", "false")):
        d = tmp / f"boot-{name}"
        d.mkdir()
        extra = {**tier_keys(d / "tier"), "tieredBootstrapFromTier": from_tier, "haMaxTimeSlaveNotCatchup": 60_000}
        cl = HACluster(d, containers=2, replicas=2, sets=1, broker_extra=extra)
        try:
            cl.start()
            out[name] = asyncio.run(bootstrap_one(cl, a))
            log(f"bootstrap {name}: {out[name]}")
        finally:
            stop_cluster(cl)
            shutil.rmtree(d, ignore_errors=True)
    out["speedup_tier_over_replication"] = round(out["via_replication"]["caught_up_s"] / out["via_tier"]["caught_up_s"], 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=300_000, help="messages per produce round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--bootstrap-mib", dest="catchup_mib", type=int, default=5 * 1024)
    ap.add_argument("--bootstrap-body", dest="catchup_body", type=int, default=16 * 1024)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--tmp", default=None, help="directory for stores and tier (default: a new temp dir)")
    a = ap.parse_args()
    sections = a.sections.split(",")
    out: dict[str, Any] = {"bench": "tiered", "date": time.strftime("%Y-%m-%d %H:%M:%S"), **machine(),
                           "params": vars(a)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tiered-bench-", dir=a.tmp) as d:
        tmp = pathlib.Path(d)
        if "produce" in sections or "reads" in sections:
            out["produce"] = produce_and_reads(a, tmp)
        if "bootstrap" in sections:
            out["bootstrap"] = bootstrap(a, tmp)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
