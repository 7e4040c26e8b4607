#!/usr/bin/env python3
"""Benchmark: incremental metadata sync (RIP-81) against the 4.x full-sync baseline, in one run.

For each mode (allowMetadataIncrementalSync=true / false) it starts a 2-container HA deployment (3 controllers +
one broker set, master and slave) and measures:
  * visibility lag on the slave: a topic / group created (admin code, acknowledged) or an offset committed on the
    master -> the slave answers it (polled every ~2 ms), p50/p99/max;
  * bytes replicated for metadata at a steady offset-commit load (10k commits/s over 1,000 queues, 10 s);
  * what a failover loses under that load: the master's container is SIGKILLed; per queue, the last commit the
    master acknowledged vs the promoted slave's offset;
and, incremental only, the bootstrap of an empty slave holding 10,000 topics, 5,000 groups and 100,000 offsets.
Prints one JSON document. Usage: .venv/bin/python scripts/bench/metadata_sync.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import random
import shutil
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from brokerd.remoting.client import RemotingClient  # noqa: E402
from brokerd.remoting.command import request  # noqa: E402
from scripts.bench.ha_common import machine, pct  # noqa: E402
from tests.ha_cluster import HACluster  # noqa: E402

CREATE_TOPIC, GET_TOPIC, CREATE_GROUP, ALL_GROUPS, ALL_TOPICS = 17, 351, 200, 201, 21
UPDATE_OFFSET, QUERY_OFFSET, ALL_OFFSETS, ALL_DELAY, RUNTIME = 15, 14, 43, 45, 28


async def call(cli: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
               body: bytes | None = None, timeout: float = 5.0) -> Any:  # fmt: skip
    return await cli.invoke(addr, request(code, ext or {}, body), timeout)


async def until(cond: Any, timeout: float = 30.0, every: float = 0.002) -> float:
    """Seconds until the async predicate holds (inf when it never does)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await cond():
            return time.monotonic() - t0
        await asyncio.sleep(every)  # sleep-ok: polling another process
    return float("inf")


async def slave_has(cli: RemotingClient, slave: str, kind: str, name: str, value: int = 0) -> bool:
    if kind == "topic":
        return bool((await call(cli, slave, GET_TOPIC, {"topic": name})).code == 0)
    if kind == "group":
        return name in orjson.loads((await call(cli, slave, ALL_GROUPS)).body)["subscriptionGroupTable"]
    r = await call(cli, slave, QUERY_OFFSET, {"consumerGroup": "VisC", "topic": name, "queueId": "0"})
    return bool(r.code == 0 and r.ext.get("offset") == str(value))


async def visibility(cli: RemotingClient, master: str, slave: str, n: int) -> dict[str, Any]:
    """Each change acknowledged by the master, then the time until the slave answers it."""
    lags: dict[str, list[float]] = {"topic": [], "group": [], "offset": []}
    for i in range(n):
        name, group = f"VisT{i}", f"VisG{i}"
        ext = {"topic": name, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
        assert (await call(cli, master, CREATE_TOPIC, ext)).code == 0
        lags["topic"].append(await until(lambda: slave_has(cli, slave, "topic", name)) * 1000)  # noqa: B023
        assert (await call(cli, master, CREATE_GROUP, {}, orjson.dumps({"groupName": group}))).code == 0
        lags["group"].append(await until(lambda: slave_has(cli, slave, "group", group)) * 1000)  # noqa: B023
        off = {"consumerGroup": "VisC", "topic": name, "queueId": "0", "commitOffset": str(i + 1)}
        assert (await call(cli, master, UPDATE_OFFSET, off)).code == 0
        lags["offset"].append(await until(lambda: slave_has(cli, slave, "offset", name, i + 1)) * 1000)  # noqa: B023
    return {k: pct(v) for k, v in lags.items()}


async def commit_load(cli: RemotingClient, master: str, rate: int, seconds: float, queues: int,
                      acked: dict[tuple[str, int], tuple[int, float]], stop: asyncio.Event, start: int = 0) -> int:  # fmt: skip
    """Commit offsets at `rate`/s over `queues` queues (10 topics x queues/10), every commit a larger offset than
    the queue's previous one; records the last acknowledged. Returns the commits sent (the next start)."""
    sent = start
    t0 = time.monotonic()
    per_tick = max(1, rate // 100)
    while time.monotonic() - t0 < seconds and not stop.is_set():
        batch = []
        for _ in range(per_tick):
            q = sent % queues
            topic, qid = f"LoadT{q % 10}", q // 10
            batch.append((topic, qid, sent + 1))
            sent += 1
        answers = await asyncio.gather(*(call(cli, master, UPDATE_OFFSET, {"consumerGroup": "LoadC", "topic": t,
                                                                            "queueId": str(qid), "commitOffset": str(o)},
                                              timeout=1.0) for t, qid, o in batch), return_exceptions=True)
        now = time.monotonic()
        for (t, qid, o), a in zip(batch, answers, strict=True):
            if not isinstance(a, BaseException) and a.code == 0:
                acked[(t, qid)] = (o, now)
        await asyncio.sleep(max(0.0, t0 + (sent - start) / rate - time.monotonic()))  # sleep-ok: pacing the load
    return sent


async def offsets_of(cli: RemotingClient, addr: str) -> dict[tuple[str, int], int]:
    table = orjson.loads((await call(cli, addr, ALL_OFFSETS)).body)["offsetTable"]
    return {(k.split("@")[0], int(q)): int(o) for k, v in table.items() if k.endswith("@LoadC") for q, o in v.items()}


async def full_pull_bytes(cli: RemotingClient, master: str) -> int:
    """What one 4.x full sync transfers: the four GET_ALL_* answers."""
    codes = (ALL_TOPICS, ALL_OFFSETS, ALL_DELAY, ALL_GROUPS)
    answers = [await call(cli, master, code, timeout=30.0) for code in codes]
    return sum(len(a.body or b"") for a in answers)


async def runtime(cli: RemotingClient, addr: str) -> dict[str, str]:
    return dict(orjson.loads((await call(cli, addr, RUNTIME)).body)["table"])


async def load_and_failover(cl: HACluster, cli: RemotingClient, master: str, slave: str, args: Any) -> dict[str, Any]:
    for t in range(10):
        ext = {"topic": f"LoadT{t}", "readQueueNums": "128", "writeQueueNums": "128", "perm": "6"}
        assert (await call(cli, master, CREATE_TOPIC, ext)).code == 0
    acked: dict[tuple[str, int], tuple[int, float]] = {}
    before = await runtime(cli, master)
    stop = asyncio.Event()
    sent = await commit_load(cli, master, args.rate, args.seconds, 1000, acked, stop)
    after = await runtime(cli, master)
    written = int(after.get("metadataRecordBytesWritten", 0)) - int(before.get("metadataRecordBytesWritten", 0))
    full_pull = await full_pull_bytes(cli, master)
    load = asyncio.create_task(commit_load(cli, master, args.rate, 30, 1000, acked, stop, start=sent))
    # the kill lands at a random phase of the slave's 3 s full-sync period (seeded): a fixed delay from the start
    # would always hit the same phase and report the same loss window
    await asyncio.sleep(2.0 + args.rng.uniform(0.0, 3.0))  # sleep-ok: the load runs a while before the kill
    kill_t = time.monotonic()
    cl.kill_container(cl.container_of(master))
    stop.set()
    await load
    new = await asyncio.to_thread(cl.wait_master, "broker-a", master, 30)
    got = await offsets_of(cli, new)
    lost = {k: v for k, v in acked.items() if got.get(k, 0) < v[0]}
    # offsets are one global sequence at `rate` commits/s: how much older than the last acknowledged commit is
    # the offset the promoted slave kept for each queue (the window of commits a failover loses)
    windows = [(o - got.get(k, 0)) / args.rate * 1000 for k, (o, _t) in lost.items()]
    lost_commits = sum((o - got.get(k, 0)) // 1000 for k, (o, _t) in lost.items())  # a queue's commits are 1000 apart
    return {"commits": sent, "seconds": args.seconds,  # the steady phase (before the failover phase)
            "incremental_bytes_per_commit": round(written / max(1, sent), 2),
            "incremental_bytes_per_s": round(written / args.seconds),
            "full_sync_bytes_per_pull": full_pull, "full_sync_bytes_per_s_at_3s": round(full_pull / 3),
            "failover": {"queues_committed": len(acked), "queues_behind": len(lost),
                         "kept_offset_age_ms": pct(windows) if windows else {"n": 0},
                         "commits_lost": lost_commits, "commits_lost_ms": round(lost_commits / args.rate * 1000, 1),
                         "last_ack_ms_before_kill": round((kill_t - max(t for _o, t in acked.values())) * 1000, 1)}}  # fmt: skip


async def bootstrap(cl: HACluster, cli: RemotingClient, master: str, args: Any) -> dict[str, Any]:
    """An empty slave catches up with a master holding the big image."""
    c = 1 - cl.container_of(master)
    slave = cl.broker_addr("broker-a", c)
    cl.kill_container(c)
    shutil.rmtree(cl.tmp / f"c{c}")
    sem = asyncio.Semaphore(64)

    async def one(code: int, ext: dict[str, str], body: bytes | None = None) -> None:
        async with sem:
            await call(cli, master, code, ext, body, timeout=30.0)

    await asyncio.gather(*(one(CREATE_TOPIC, {"topic": f"BootT{i}", "readQueueNums": "4", "writeQueueNums": "4"})
                           for i in range(args.topics)))  # fmt: skip
    await asyncio.gather(*(one(CREATE_GROUP, {}, orjson.dumps({"groupName": f"BootG{i}"})) for i in range(args.groups)))
    await asyncio.gather(*(one(UPDATE_OFFSET, {"consumerGroup": f"BootG{i % args.groups}",
                                               "topic": f"BootT{i % args.topics}", "queueId": str(i % 4),
                                               "commitOffset": str(i)}) for i in range(args.offsets)))  # fmt: skip
    await asyncio.sleep(0.5)  # sleep-ok: the last coalesced offsets reach the log
    want = len(orjson.loads((await call(cli, master, ALL_OFFSETS)).body)["offsetTable"])
    cl.start_container(c)

    async def complete() -> bool:
        try:
            topics = orjson.loads((await call(cli, slave, ALL_TOPICS)).body)["topicConfigTable"]
            offs = orjson.loads((await call(cli, slave, ALL_OFFSETS)).body)["offsetTable"]
        except Exception:  # noqa: BLE001 - still starting
            return False
        return f"BootT{args.topics - 1}" in topics and len(offs) >= want

    secs = await until(complete, 120, 0.05)
    return {"topics": args.topics, "groups": args.groups, "offsets": args.offsets,
            "seconds_from_container_start": round(secs, 2),
            "full_sync_bytes_per_pull": await full_pull_bytes(cli, master)}  # the 4.x pull of this image, per period


async def run_mode(incremental: bool, args: Any) -> dict[str, Any]:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="msync-bench-"))
    cl = HACluster(tmp, containers=2, replicas=2, sets=1,
                   broker_extra={"allowMetadataIncrementalSync": str(incremental).lower()})
    cli = RemotingClient()
    try:
        await asyncio.to_thread(cl.start)
        master = await cl.amaster_of("broker-a")
        assert master is not None
        slave = next(cl.broker_addr("broker-a", c) for c in range(2) if cl.broker_addr("broker-a", c) != master)
        await asyncio.sleep(1.0)  # sleep-ok: the slave bootstrapped and joined the sync state set
        n = args.changes if incremental else args.baseline_changes  # each baseline sample takes up to one 3 s pull
        out: dict[str, Any] = {"visibility_ms": await visibility(cli, master, slave, n)}
        out["load"] = await load_and_failover(cl, cli, master, slave, args)
        if incremental and args.topics:
            new = await cl.amaster_of("broker-a")
            assert new is not None
            out["bootstrap"] = await bootstrap(cl, cli, new, args)
        return out
    finally:
        await cli.close()
        cl.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--baseline-changes", type=int, default=30)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=5_000)
    ap.add_argument("--offsets", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    args = ap.parse_args()
    args.rng = random.Random(args.seed)
    if args.quick:
        args.changes, args.seconds, args.topics, args.groups, args.offsets = 30, 3.0, 1000, 500, 10_000
        args.baseline_changes = 10
    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": args.seed,
              "incremental": asyncio.run(run_mode(True, args)), "full_sync": asyncio.run(run_mode(False, args))}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
