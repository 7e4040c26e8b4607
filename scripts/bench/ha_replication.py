"""Replication costs (part of scripts/bench/ha.py): produce throughput of one broker set with 0, 1 and 2 SYNC
slaves (scripts/bench/loadgen.py against the master) with the replication lag sampled during the load, and the
catch-up of an empty slave."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import resource
import shutil
import sys
import time
from typing import Any

from brokerd.remoting.client import RemotingClient
from controller.client import ControllerClient
from scripts.bench.ha_common import (
    create_topic,
    max_offset,
    pct,
    pid_of,
    process_cpu_s,
    runtime,
    send_command,
    stop_cluster,
    wait_until,
)
from tests.ha_cluster import HACluster
from tests.support import ROOT

SET = "broker-a"


def loadgen_cmd(addr: str, topic: str, total: int, body: int, conns: int, inflight: int, queues: int) -> list[str]:
    return [sys.executable, "-m", "scripts.bench.loadgen", "produce", "--addr", addr, "--topic", topic,
            "--total", str(total), "--body", str(body), "--conns", str(conns), "--inflight", str(inflight),
            "--queues", str(queues)]  # fmt: skip


async def loadgen(cmd: list[str]) -> dict[str, Any]:
    p = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE)  # fmt: skip
    try:
        out, err = await asyncio.wait_for(p.communicate(), 1800)
    finally:
        if p.returncode is None:
            p.kill()
            await p.wait()
    if p.returncode != 0:
        raise RuntimeError(f"loadgen failed ({p.returncode}): {err.decode(errors='replace')[-2000:]}")
    res: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return res


async def full_sync_state_set(cl: HACluster, replicas: int, timeout: float = 60) -> None:
    ctl = ControllerClient(cl.ctl.addrs)
    try:
        async def full() -> bool:
            try:
                info = (await ctl.sync_state_data([SET])).get(SET, {})
            except Exception:  # noqa: BLE001 - controller leader change
                return False
            return len([r for r in info.get("inSyncReplicas", []) if r.get("alive")]) >= replicas

        await wait_until(full, timeout, f"{replicas} replicas in the sync state set", 0.1)
    finally:
        await ctl.close()


# ---------------------------------------------------------------------- throughput with replication


Sample = tuple[float, int, int, int, list[int]]  # t, master max before, master max after, confirm, slaves' max


async def sample_lag(cli: RemotingClient, master: str, slaves: list[str], done: asyncio.Event, rows: list[Sample],
                     period: float) -> None:
    """Every `period`: the master's max offset, then every slave's (concurrently), then the master's again (with
    its confirm offset): the slave's lag lies between the two master readings minus its own."""
    while not done.is_set():
        before = await runtime(cli, master)
        got = await asyncio.gather(*(runtime(cli, a) for a in slaves))
        after = await runtime(cli, master)
        if before is not None and after is not None and all(g is not None for g in got):
            rows.append((time.monotonic(), int(before["commitLogMaxOffset"]), int(after["commitLogMaxOffset"]),
                         int(after["confirmOffset"]), [int(g["commitLogMaxOffset"]) for g in got if g is not None]))
        await asyncio.sleep(period)  # sleep-ok: sampling period


def lag_stats(rows: list[Sample]) -> dict[str, Any]:
    """Lag in bytes per sample and slave (upper bound: the later master reading; lower: the earlier one), and
    in ms at the run's average append rate; the master's own unconfirmed bytes (max - confirm offset)."""
    if len(rows) < 2:
        return {"samples": len(rows)}
    rate = (rows[-1][2] - rows[0][2]) / max(1e-9, rows[-1][0] - rows[0][0])  # bytes/s appended
    upper = [r[2] - s for r in rows for s in r[4]]
    lower = [max(0, r[1] - s) for r in rows for s in r[4]]
    out: dict[str, Any] = {"samples": len(rows), "append_rate_mb_s": round(rate / 1e6, 1)}
    if upper:
        out["slave_lag_bytes_upper"] = pct(upper)
        out["slave_lag_bytes_lower"] = pct(lower)
        out["slave_lag_ms_upper_at_append_rate"] = {k: v if k == "n" else round(v / rate * 1000, 2)
                                                    for k, v in pct(upper).items()}  # fmt: skip
    out["master_unconfirmed_bytes"] = pct(r[2] - r[3] for r in rows)
    out["master_unconfirmed_ms_at_append_rate"] = {k: v if k == "n" else round(v / rate * 1000, 2)
                                                   for k, v in out["master_unconfirmed_bytes"].items()}  # fmt: skip
    return out


async def throughput_one(cl: HACluster, replicas: int, a: Any) -> dict[str, Any]:
    await full_sync_state_set(cl, replicas)
    master = cl.broker_addr(SET, 0)
    slaves = [cl.broker_addr(SET, c) for c in range(1, replicas)]
    cli = RemotingClient()
    try:
        await create_topic(cli, master, "BenchHA", 8)
        await loadgen(loadgen_cmd(master, "BenchHA", a.warmup, 1024, a.conns, a.inflight, 8))
        os.sync()  # the warm-up's dirty pages written back before the measured load
        rows: list[Sample] = []
        done = asyncio.Event()
        sampler = asyncio.create_task(sample_lag(cli, master, slaves, done, rows, a.lag_period))
        cpu0 = cpu_seconds(cl)
        try:
            res = await loadgen(loadgen_cmd(master, "BenchHA", a.total, 1024, a.conns, a.inflight, 8))
        finally:
            done.set()
            await sampler
        cpu = {k: round(v - cpu0[k], 2) for k, v in cpu_seconds(cl).items()}
        caught = await wait_until(lambda: _same_offsets(cli, master, slaves), 60, "slaves caught up after the load")
        return {"replicas": replicas, "sync_slaves": replicas - 1, "produce": res, "lag": lag_stats(rows),
                "cpu_s": cpu, "cpu_us_per_msg": {k: round(v / a.total * 1e6, 1) for k, v in cpu.items()},
                "slaves_equal_master_after": bool(caught)}  # fmt: skip
    finally:
        await cli.close()


def cpu_seconds(cl: HACluster) -> dict[str, float]:
    """CPU time (user + system) of each container process so far, and of the bench's finished children (the
    load generators: waited for, so counted in RUSAGE_CHILDREN)."""
    out: dict[str, float] = {}
    for c in sorted(cl.daemons):
        out["master_container" if c == 0 else f"slave_container_{c}"] = process_cpu_s(pid_of(cl, c))
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["loadgen"] = ru.ru_utime + ru.ru_stime
    return out


async def _same_offsets(cli: RemotingClient, master: str, slaves: list[str]) -> bool:
    got = await asyncio.gather(*(runtime(cli, x) for x in [master, *slaves]))
    return all(g is not None for g in got) and len({g["commitLogMaxOffset"] for g in got if g is not None}) == 1


def throughput(tmp: pathlib.Path, replicas: int, a: Any) -> dict[str, Any]:
    os.sync()
    tmp.mkdir(parents=True, exist_ok=True)
    cl = HACluster(tmp, containers=replicas, replicas=replicas, sets=1)
    try:
        cl.start()
        return asyncio.run(throughput_one(cl, replicas, a))
    finally:
        stop_cluster(cl)


# ---------------------------------------------------------------------- catch-up of an empty slave


def wipe_store(root: pathlib.Path) -> list[str]:
    """Delete a broker's store, keeping its controller identity (a replaced disk, same broker)."""
    removed = []
    for p in root.iterdir():
        if p.name.startswith("brokerIdentity"):
            continue
        removed.append(p.name)
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return removed


async def fill(cli: RemotingClient, master: str, a: Any) -> dict[str, Any]:
    """With the slave gone, wait until the master accepts sends again, then write `catchup_mib` of 16 KiB sends."""
    async def accepts() -> bool:
        try:
            r = await cli.invoke(master, send_command("CatchUp", 0, 8, f"fill-probe-{time.monotonic()}", b"x"), 6.0)
        except Exception:  # noqa: BLE001 - a timeout while the set shrinks
            return False
        return r.code == 0

    await wait_until(accepts, 60, "the master accepting sends without its slave", 0.2)
    n = a.catchup_mib * 1024 * 1024 // a.catchup_body + 1
    return await loadgen(loadgen_cmd(master, "CatchUp", n, a.catchup_body, 4, 8, 8))


async def catchup_run(cl: HACluster, a: Any) -> dict[str, Any]:
    await full_sync_state_set(cl, 2)
    master, slave = cl.broker_addr(SET, 0), cl.broker_addr(SET, 1)
    cli = RemotingClient(connect_timeout=0.5)
    try:
        await create_topic(cli, master, "CatchUp", 8)
        cl.daemons[1].stop()
        removed = wipe_store(cl.tmp / "c1" / SET)
        produced = await fill(cli, master, a)
        m = await runtime(cli, master)
        assert m is not None
        target = int(m["commitLogMaxOffset"])
        queues = {q: await max_offset(cli, master, "CatchUp", q) for q in range(8)}
        os.sync()
        t0 = time.monotonic()
        cl.start_container(1)
        marks: dict[str, float] = {}
        await wait_until(lambda: catchup_marks(cli, slave, target, t0, marks), 300, "the slave caught up", 0.02)

        async def queues_done() -> bool:
            return all([await max_offset(cli, slave, "CatchUp", q) == v for q, v in queues.items()])

        await wait_until(queues_done, 300, "the slave's consume queues", 0.02)
        marks["consume_queues_complete_s"] = round(time.monotonic() - t0, 3)
        copy_s = marks["caught_up_s"] - marks["broker_up_s"]
        return {"bytes": target, "mib": round(target / 2**20, 1), "fill": produced, "wiped": removed, **marks,
                "mb_per_s_from_broker_up": round(target / copy_s / 1e6, 1),
                "mb_per_s_from_container_start": round(target / marks["caught_up_s"] / 1e6, 1),
                "mb_per_s_to_consume_queues_complete": round(
                    target / (marks["consume_queues_complete_s"] - marks["broker_up_s"]) / 1e6, 1)}  # fmt: skip
    finally:
        await cli.close()


async def catchup_marks(cli: RemotingClient, slave: str, target: int, t0: float, marks: dict[str, float]) -> bool:
    rt = await runtime(cli, slave, 0.5)
    if rt is None:
        return False
    now = round(time.monotonic() - t0, 3)
    marks.setdefault("broker_up_s", now)
    off = int(rt["commitLogMaxOffset"])
    if off > 0:
        marks.setdefault("first_bytes_s", now)
    if off >= target:
        marks["caught_up_s"] = now
        return True
    return False


def catchup(tmp: pathlib.Path, a: Any) -> dict[str, Any]:
    os.sync()
    tmp.mkdir(parents=True, exist_ok=True)
    cl = HACluster(tmp, containers=2, replicas=2, sets=1)
    try:
        cl.start()
        return asyncio.run(catchup_run(cl, a))
    finally:
        stop_cluster(cl)
