#!/usr/bin/env python3
"""Benchmark: the store's batch append (``MessageStore.append_messages``) and the timer burst it serves. Prints one
JSON document.

1. append: CPU µs per message (the calling thread's, best of ``--repeats``) of appending batches of 1, 32 and 1024
   messages (``--body`` bytes, 8 properties as a timer delivery carries them, 8 topics x 4 queues, key index on,
   ASYNC_FLUSH, 1 GiB segments) with the C run (brokerd/csrc/store_batch.c) and with the Python reference
   (``MessageStore.use_native_batch(False)``), a fresh store per case.
2. prepare: CPU µs per due timer of the firing's preparation from the parked record's bytes (``deliver.prepare``)
   against the reference (``decode_record`` + ``delivery``).
3. burst: ``--burst`` timers due within one second (timerPrecisionMs=100, ``--burst-body`` bytes) sent to a broker
   process ahead of time; once its ``timerFired`` counter (GET_BROKER_RUNTIME_INFO) shows them all, each one's store
   time in its real topic minus its due time (p50 / p99 / max) and the broker's CPU during the firing. The messages
   are read back only after the firing: reading them while it fires would load the broker.

The clients and the broker share the machine: final figures need a quiet one (the machine's load is printed).
Usage: .venv/bin/python scripts/bench/append.py [--messages 50000] [--body 1024] [--burst 100000] [--repeats 3]
Short validation run: --messages 5000 --burst 10000 --repeats 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import time
import urllib.request
from typing import Any

import orjson

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from brokerd import message as m  # noqa: E402
from brokerd.logging_setup import configure  # noqa: E402
from brokerd.message import MessageInner, decode_record, encode_record, new_uniq_id, tags_code_of  # noqa: E402
from brokerd.store.config import StoreConfig  # noqa: E402
from brokerd.store.message_store import MessageStore  # noqa: E402
from brokerd.timer import deliver  # noqa: E402
from brokerd.timer.core import TIMER_TOPIC  # noqa: E402
from scripts.bench.timer import QUEUES, cpu_seconds, dist, lateness, now_ms, runtime, send_all, timer_send  # noqa: E402
from tests.support import Cluster, free_port, wait_for  # noqa: E402

STORE_HOST = ("127.0.0.1", 10911)
BATCH_SIZES = (1, 32, 1024)


def delivery(i: int, body: bytes) -> MessageInner:
    """A message as the timer firing stores it."""
    props = {m.UNIQ_KEY: new_uniq_id(), m.KEYS: f"order-{i}", m.TAGS: "TagA", "CLUSTER": "DefaultCluster",
             m.TIMER_OUT_MS: "1700000000000", m.TIMER_ENQUEUE_MS: "1699999990000",
             m.TIMER_DEQUEUE_MS: "1700000000001"}
    return MessageInner(f"Topic{i % 8}", i % 4, body, 0, props, 0, 1_700_000_000_000, ("10.0.0.7", 40000), STORE_HOST,
                        tags_code=tags_code_of("TagA"))  # fmt: skip


async def append_case(root: pathlib.Path, native: bool, size: int, msgs: list[MessageInner]) -> float:
    """CPU µs per message of appending ``msgs`` in batches of ``size`` into a fresh store."""
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 30, max_hash_slot_num=5_000_000,
                      max_index_num=20_000_000, disk_space_warning_level_ratio=1.0,
                      disk_space_clean_forcibly_ratio=1.0)  # fmt: skip
    store = MessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    try:
        store.use_native_batch(native)
        if store.batch_stats()["native"] != native:
            return -1.0  # the C module is not built
        batches = [msgs[i : i + size] for i in range(0, len(msgs), size)]
        store.append_messages(batches[0])  # files created, caches warm
        t0 = time.thread_time()
        for b in batches[1:]:
            store.append_messages(b)
        took = time.thread_time() - t0
        return took * 1e6 / max(1, len(msgs) - len(batches[0]))
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def append_figures(args: argparse.Namespace) -> dict[str, Any]:
    body = b"x" * args.body
    msgs = [delivery(i, body) for i in range(args.messages)]
    out: dict[str, Any] = {"messages": args.messages, "body": args.body}
    for impl in ("native", "python"):
        row = {}
        for size in BATCH_SIZES:
            best = min(asyncio.run(append_case(pathlib.Path(tempfile.mkdtemp(prefix="bench-append-")),
                                               impl == "native", size, msgs)) for _ in range(args.repeats))  # fmt: skip
            row[f"batch_{size}"] = round(best, 2) if best >= 0 else None
        out[f"{impl}_us_per_msg"] = row
    return out


def prepare_figures(args: argparse.Namespace) -> dict[str, Any]:
    props = {m.UNIQ_KEY: new_uniq_id(), m.TIMER_DELIVER_MS: "1700000000000", m.TIMER_OUT_MS: "1700000000000",
             m.REAL_TOPIC: "BenchBurst", m.REAL_QID: "3", "CLUSTER": "DefaultCluster", m.KEYS: "order-1"}  # fmt: skip
    parked = MessageInner(TIMER_TOPIC, 0, b"t" * args.burst_body, 0, props, 0, 1, ("10.0.0.1", 5000), STORE_HOST)
    raw = encode_record(parked, queue_offset=5, phys_offset=1000, store_timestamp=1_699_999_990_000)
    n = 50_000

    def reference() -> None:
        ext, _ = decode_record(raw)
        deliver.delivery(ext, False, 1_700_000_000_001)

    def fast() -> None:
        deliver.prepare(raw, 5, 1_700_000_000_000, False, 1_700_000_000_001)

    out = {}
    for name, fn in (("prepare_us", fast), ("reference_us", reference)):
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.thread_time()
            for _ in range(n):
                fn()
            best = min(best, time.thread_time() - t0)
        out[name] = round(best * 1e6 / n, 2)
    return out


def burst_figures(args: argparse.Namespace) -> dict[str, Any]:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-append-burst-"))
    metrics = free_port()
    cl = Cluster(tmp, brokers=1, container_extra={"metricsPort": metrics}, timerPrecisionMs=100,
                 mappedFileSizeCommitLog=1 << 30, maxHashSlotNum=5_000_000, maxIndexNum=20_000_000,
                 brokerFastFailureEnable="false")  # fmt: skip
    cl.start(timeout=120)
    try:
        assert cl.daemon is not None and cl.daemon.proc is not None
        pid, addr, n = cl.daemon.proc.pid, cl.broker_addr(), args.burst
        payload = b"t" * args.burst_body
        start = now_ms() + 10_000 + n // 2  # sending 100k took 12-18 s here on a busy machine
        reqs = [timer_send("BenchBurst", i % QUEUES, f"burst-{i}", start + (i * 1000) // n, payload) for i in range(n)]
        took = asyncio.run(send_all(addr, reqs))
        if now_ms() >= start - 2500:
            return {"error": f"sending took {took:.1f} s, past the read-ahead of the first due time: raise the lead"}
        fired0 = int(asyncio.run(runtime(addr)).get("timerFired", "0"))
        while now_ms() < start - 2500:  # the firing reads 2 s ahead: its CPU counts from then
            time.sleep(0.05)  # sleep-ok: waiting for a wall-clock time
        c0 = cpu_seconds(pid)
        wait_for(lambda: int(asyncio.run(runtime(addr)).get("timerFired", "0")) - fired0 >= n, 120, "the burst fired",
                 interval=0.2)  # fmt: skip
        used = cpu_seconds(pid) - c0
        loop = loop_figures(metrics)
        late, stored = asyncio.run(lateness(addr, "BenchBurst", n, now_ms() + 60_000))
        return {"timers": n, "body": args.burst_body, "sent_in_s": round(took, 1), "fired": len(late),
                "lateness_ms": dist(late), "early": sum(1 for v in late if v < 0),
                "last_fired_after_window_ms": max(stored) - (start + 1000) if stored else None,
                "broker_cpu_s_during_firing": round(used, 2),
                "broker_cpu_us_per_timer": round(used * 1e6 / n, 1), "broker_loop": loop}  # fmt: skip
    finally:
        cl.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def loop_figures(port: int) -> dict[str, float]:
    """The broker process's event-loop stalls and garbage-collector pauses since it started (its /metrics)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == "rocketmq_loop_stall_max_seconds":
            out["stall_max_ms"] = round(float(value) * 1000, 1)
        elif name.startswith("rocketmq_loop_stall_seconds_sum"):
            out["stalls_ms"] = round(float(value) * 1000, 1)
        elif name.startswith("rocketmq_gc_pause_seconds_sum"):
            gen = name.split('generation="')[1][0]
            out[f"gc_gen{gen}_ms"] = round(float(value) * 1000, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--burst", type=int, default=100_000, help="0: no burst")
    ap.add_argument("--burst-body", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    configure("WARNING")
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
                    "loadavg_at_start": os.getloadavg()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args)}  # fmt: skip
    result["append"] = append_figures(args)
    result["prepare"] = prepare_figures(args)
    if args.burst:
        result["burst"] = burst_figures(args)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
