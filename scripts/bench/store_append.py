"""Store append benchmark: prints one JSON object.

  .venv/bin/python scripts/bench/store_append.py [--messages N] [--sync-messages N] [--body 1024] [--dir PATH]

* async_flush: one task puts N pre-built 1 KiB messages (UNIQ_KEY, TAGS, WAIT, KEYS properties; index on)
  with ASYNC_FLUSH; reports msg/s for the puts alone and for puts plus MessageInner construction.
* sync_flush: 256 concurrent tasks put with SYNC_FLUSH (group commit: each put returns after fsync);
  reports msg/s, fsync count and put latency percentiles.
Runs on uvloop (the broker's loop). Store files go to a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import structlog
import uvloop

from brokerd.message import MessageInner, new_uniq_id, tags_code_of
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore

STORE_HOST = ("127.0.0.1", 10911)
BORN_HOST = ("127.0.0.1", 50000)


def make_msg(i: int, body: bytes, queues: int) -> MessageInner:
    props = {"UNIQ_KEY": new_uniq_id(), "TAGS": "TagA", "WAIT": "true", "KEYS": f"order-{i}"}
    return MessageInner(topic="BenchTopic", queue_id=i % queues, body=body, flag=0, properties=props, sys_flag=0,
                        born_timestamp=int(time.time() * 1000), born_host=BORN_HOST, store_host=STORE_HOST,
                        tags_code=tags_code_of("TagA"))  # fmt: skip


async def bench_async(root: str, n: int, body: bytes) -> dict[str, object]:
    store = MessageStore(StoreConfig(store_path_root_dir=root), store_host=STORE_HOST)
    await store.start()
    msgs = [make_msg(i, body, 8) for i in range(n)]
    gc.freeze()  # keep the pre-built messages out of GC scans: measure the store, not this list
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    for m in msgs:
        await store.put_message(m)
    puts_s = time.perf_counter() - t0
    thread_cpu, process_cpu = time.thread_time() - c0, time.process_time() - p0
    t1 = time.perf_counter()
    for i in range(n // 4):
        await store.put_message(make_msg(i, body, 8))
    built_s = time.perf_counter() - t1
    await store.shutdown()
    del msgs
    gc.unfreeze()
    return {"messages": n, "seconds": round(puts_s, 3), "msg_per_s": round(n / puts_s),
            "mib_per_s": round(n * len(body) / puts_s / 2**20, 1),
            "loop_thread_cpu_us_per_msg": round(thread_cpu / n * 1e6, 2),
            "msg_per_loop_thread_cpu_s": round(n / thread_cpu),
            "process_cpu_us_per_msg": round(process_cpu / n * 1e6, 2),
            "msg_per_s_including_construction": round((n // 4) / built_s),
            "load_average_1m": round(os.getloadavg()[0], 2)}  # fmt: skip


async def bench_sync(root: str, n: int, body: bytes, concurrency: int) -> dict[str, object]:
    store = MessageStore(StoreConfig(store_path_root_dir=root, flush_disk_type="SYNC_FLUSH"), store_host=STORE_HOST)
    await store.start()
    per_task = n // concurrency
    latencies: list[float] = []
    statuses: dict[str, int] = {}

    async def worker(w: int) -> None:
        for i in range(per_task):
            m = make_msg(w * per_task + i, body, 8)
            t = time.perf_counter()
            r = await store.put_message(m)
            latencies.append(time.perf_counter() - t)
            statuses[r.status.name] = statuses.get(r.status.name, 0) + 1

    fsyncs_before = _fsync_count(store)
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    process_cpu = time.process_time() - c0
    fsyncs = _fsync_count(store) - fsyncs_before
    await store.shutdown()
    latencies.sort()
    total = per_task * concurrency
    return {"messages": total, "concurrency": concurrency, "seconds": round(elapsed, 3),
            "msg_per_s": round(total / elapsed), "group_commits": fsyncs,
            "latency_ms_p50": round(statistics.median(latencies) * 1000, 2),
            "latency_ms_p99": round(latencies[int(len(latencies) * 0.99)] * 1000, 2), "statuses": statuses,
            "process_cpu_us_per_msg": round(process_cpu / total * 1e6, 2),
            "load_average_1m": round(os.getloadavg()[0], 2)}  # fmt: skip


def _fsync_count(store: MessageStore) -> int:
    return store.flush_count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--sync-messages", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--dir", default=None, help="parent directory for the temporary store")
    args = ap.parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    body = os.urandom(args.body)
    out: dict[str, object] = {"cpus": os.cpu_count(), "body_bytes": args.body}
    for name in ("async_flush", "sync_flush"):
        root = tempfile.mkdtemp(prefix=f"store-bench-{name}-", dir=args.dir)
        try:
            if name == "async_flush":
                out[name] = uvloop.run(bench_async(root, args.messages, body))
            else:
                out[name] = uvloop.run(bench_sync(root, args.sync_messages, body, args.concurrency))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
