"""Controller benchmark (not a test): three `mqcontroller` processes on loopback, Raft log fsync on.

Sections (all by default; pick with --sections):
  writes     write throughput + p50/p99 latency at 1, 16, 256 concurrent clients, new vs legacy design
  reads      consistent-read throughput: log read vs ReadIndex vs lease (leader) vs follower read
  heartbeat  how many broker sets (2 brokers each, heartbeating all 3 controllers every second) one group
             carries with heartbeat p99 < 50 ms and no false elections
  election   time to a new serving leader after SIGKILL of the leader (500 ms election timeout)
  failover   broker master failure -> new master elected, new (3 s timeout, timer wheel) vs legacy (10 s + 5 s scan)

Prints one JSON document on stdout; progress goes to stderr.
  .venv/bin/python scripts/bench/controller.py [--quick] [--sections writes,reads,...]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
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

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from brokerd.remoting.codec import FrameDecoder, encode  # noqa: E402
from brokerd.remoting.codes import RequestCode as Q  # noqa: E402
from brokerd.remoting.command import RemotingCommand, request  # noqa: E402
from controller.client import ControllerClient  # noqa: E402
from tests.integration.controller.cluster import ControllerProcs  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- a lean closed-loop client connection (the remoting client is too heavy to measure the server) -------------

class FastConn(asyncio.Protocol):
    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.waiters: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.opaque = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport is not a subclass

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            fut = self.waiters.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        for f in self.waiters.values():
            if not f.done():
                f.set_exception(ConnectionError("closed"))

    async def call(self, cmd: RemotingCommand) -> RemotingCommand:
        self.opaque += 1
        cmd.opaque = self.opaque
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.waiters[cmd.opaque] = fut
        assert self.transport is not None
        self.transport.write(encode(cmd))
        return await fut

    def send_raw(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(addr: str) -> FastConn:
    host, port = addr.rsplit(":", 1)
    _, proto = await asyncio.get_running_loop().create_connection(FastConn, host, int(port))
    return proto


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


MakeReq = Callable[[int, int], RemotingCommand]


async def closed_loop(addrs: list[str], clients: int, duration: float, make: MakeReq) -> dict[str, Any]:
    """`clients` connections, each with one request outstanding; client c talks to addrs[c % len(addrs)]."""
    conns = [await connect(addrs[c % len(addrs)]) for c in range(clients)]
    lat: list[float] = []
    errors: dict[int, int] = {}
    remarks: dict[int, str] = {}
    start = time.perf_counter()
    end = start + duration

    async def run(c: int) -> None:
        conn, k = conns[c], 0
        while time.perf_counter() < end:
            t = time.perf_counter()
            resp = await conn.call(make(c, k))
            if resp.code == 0:
                lat.append(time.perf_counter() - t)
            else:
                errors[resp.code] = errors.get(resp.code, 0) + 1
                remarks.setdefault(resp.code, resp.remark or "")
            k += 1

    await asyncio.gather(*(run(c) for c in range(clients)))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return {"clients": clients, "ops": len(lat), "ops_per_s": round(len(lat) / elapsed),
            "p50_ms": round(pct(lat, 0.5) * 1000, 2), "p99_ms": round(pct(lat, 0.99) * 1000, 2),
            "errors": {str(k): v for k, v in errors.items()}, "error_remarks": {str(k): v for k, v in remarks.items()}}


# -- cluster helpers --------------------------------------------------------------------------------------------

KEEP_LOGS = False
BROKER_ADDR = "127.0.0.1:1"  # replaced by the address of a sink that swallows role-change pushes (start_sink)


class _Sink(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        pass


async def start_sink() -> asyncio.AbstractServer:
    """The simulated brokers' listen address: accepts NOTIFY_BROKER_ROLE_CHANGED pushes and drops them."""
    global BROKER_ADDR
    server = await asyncio.get_running_loop().create_server(_Sink, "127.0.0.1", 0)
    BROKER_ADDR = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    return server


class Cluster:
    def __init__(self, extra: dict[str, str]) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="ctlbench-")
        self.procs = ControllerProcs(pathlib.Path(self.tmp.name), extra={"raftFsync": "true", **extra})
        self.client = ControllerClient(self.procs.addrs, timeout=3.0)

    async def __aenter__(self) -> Cluster:
        self.procs.start_all()
        await self.procs.leader(self.client, timeout=30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        self.procs.stop_all()
        if KEEP_LOGS:
            log(f"cluster logs kept in {self.tmp.name}")
            self.tmp._finalizer.detach()  # type: ignore[attr-defined]
        else:
            self.tmp.cleanup()

    async def leader_addr(self) -> str:
        return self.procs.addrs[await self.procs.leader(self.client, timeout=30)]

    async def set_all(self, props: dict[str, str]) -> None:
        for i, addr in enumerate(self.procs.addrs):
            if self.procs.alive(i):
                await self.client.update_config(addr, props)


def apply_id(name: str, bid: int = 1) -> RemotingCommand:
    return request(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "bench", "brokerName": name,
                                                  "appliedBrokerId": str(bid), "registerCheckCode": f"{BROKER_ADDR};{bid}"})


async def create_sets(cl: Cluster, names: list[str], brokers: int = 2, elect: bool = True) -> None:
    """Register `brokers` brokers per set and elect broker 1 (first election), 256 sets in parallel."""
    it = iter(names)
    leader = await cl.leader_addr()

    async def call(conn: FastConn, cmd: RemotingCommand, ok: tuple[int, ...] = (0,)) -> FastConn:
        nonlocal leader
        while True:
            r = await conn.call(cmd)
            if r.code in ok:
                return conn
            if r.code == 1:  # timed out, outcome unknown: the setup requests are safe to repeat
                continue
            if r.code != 2007:
                raise RuntimeError(f"setup request {cmd.code} failed: {r.code} {r.remark}")
            conn.close()  # leader changed: follow it
            leader = await cl.leader_addr()
            conn = await connect(leader)

    async def worker() -> None:
        conn = await connect(leader)
        for name in it:
            for bid in range(1, brokers + 1):
                conn = await call(conn, apply_id(name, bid))
            if elect:
                cmd = request(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "bench", "brokerName": name, "brokerId": "1"})
                conn = await call(conn, cmd, ok=(0, 2011))  # 2011: a retried election that had already won
        conn.close()

    await asyncio.gather(*(worker() for _ in range(min(256, len(names)))))


# -- sections -----------------------------------------------------------------------------------------------------

async def bench_writes(duration: float, concurrency: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, extra in (("new", {}), ("legacy", {"controllerLegacyMode": "true"})):
        async with Cluster(extra) as cl:
            addr = await cl.leader_addr()
            rows = []
            for n in concurrency:
                def make(c: int, k: int, run_id: str = f"{mode}{n}") -> RemotingCommand:
                    return apply_id(f"w-{run_id}-{c}-{k}")

                res = await closed_loop([addr], n, duration, make)
                log(f"writes {mode} clients={n}: {res}")
                rows.append(res)
            out[mode] = rows
    new256 = out["new"][-1]["ops_per_s"]
    old256 = out["legacy"][-1]["ops_per_s"]
    out["speedup_at_max_clients"] = round(new256 / max(1, old256), 1)
    return out


async def bench_reads(duration: float, clients: int) -> dict[str, Any]:
    out: dict[str, Any] = {"clients": clients}
    async with Cluster({}) as cl:
        addr = await cl.leader_addr()
        names = [f"r-{i}" for i in range(200)]
        await create_sets(cl, names, brokers=1)

        def read(c: int, k: int) -> RemotingCommand:
            return request(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": names[(c * 7 + k) % len(names)]})

        for mode in ("log", "read_index", "lease"):
            await cl.set_all({"controllerReadMode": mode})
            out[f"leader_{mode}"] = res = await closed_loop([addr], clients, duration, read)
            log(f"reads {mode}: {res}")
        await cl.set_all({"controllerReadMode": "read_index"})
        followers = [a for a in cl.procs.addrs if a != addr]
        out["follower_read"] = res = await closed_loop(followers, clients, duration, read)
        log(f"reads follower: {res}")
        out["all_members_read_index_plus_follower_read"] = res = await closed_loop(
            cl.procs.addrs, clients, duration, read)
        log(f"reads all members: {res}")
    return out


def heartbeat_frame(name: str, bid: int, oneway: bool) -> RemotingCommand:
    return request(Q.BROKER_HEARTBEAT, {
        "clusterName": "bench", "brokerName": name, "brokerId": str(bid), "brokerAddr": BROKER_ADDR,
        "epoch": "1", "maxOffset": "1000", "confirmOffset": "1000", "heartbeatTimeoutMills": "10000",
        "electionPriority": "0"}, oneway=oneway)


async def sync_state(addr: str, names: list[str]) -> dict[str, int]:
    """brokerName -> masterEpoch, from the leader (unsafe read, chunked)."""
    conn = await connect(addr)
    epochs: dict[str, int] = {}
    for i in range(0, len(names), 2000):
        r = await conn.call(request(Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, orjson.dumps(names[i:i + 2000])))
        table = orjson.loads(r.body or b"{}").get("replicasInfoTable", {})
        epochs.update({n: int(v["masterEpoch"]) for n, v in table.items()})
    conn.close()
    return epochs


class HeartbeatLoad:
    """Every broker (2 per set) heartbeats every controller once a second, spread over 10 ms ticks, one-way,
    over 16 connections per controller; `probe` brokers send two-way heartbeats whose latency is measured."""

    CONNS = 16

    def __init__(self, addrs: list[str], probe_names: list[str]) -> None:
        self.addrs = addrs
        self.probe_names = probe_names
        self.batches: list[list[bytes]] = [[b""] * self.CONNS for _ in range(100)]
        self.lat: list[float] = []
        self.measuring = False
        self.running = True
        self.tasks: list[asyncio.Task[None]] = []
        self.conns: dict[str, list[FastConn]] = {}

    def set_names(self, names: list[str]) -> None:
        frames: list[list[bytes]] = [[] for _ in range(100)]
        for i, name in enumerate(names):
            for bid in (1, 2):
                frames[(i * 2 + bid) % 100].append(encode(heartbeat_frame(name, bid, True)))
        self.batches = [[b"".join(f[j::self.CONNS]) for j in range(self.CONNS)] for f in frames]

    async def start(self) -> None:
        for a in self.addrs:
            self.conns[a] = [await connect(a) for _ in range(self.CONNS)]
        probe_conns = {a: await connect(a) for a in self.addrs}
        self.tasks.append(asyncio.ensure_future(self._beat()))
        for a in self.addrs:
            for i, n in enumerate(self.probe_names):
                for b in (1, 2):
                    self.tasks.append(asyncio.ensure_future(self._probe(probe_conns[a], n, b, (i % 100) / 100)))

    async def _beat(self) -> None:
        tick, t0 = 0, time.perf_counter()
        while self.running:
            slot = self.batches[tick % 100]
            for a in self.addrs:
                for j, c in enumerate(self.conns[a]):
                    if slot[j]:
                        c.send_raw(slot[j])
            tick += 1
            await asyncio.sleep(max(0.0, t0 + tick * 0.01 - time.perf_counter()))

    async def _probe(self, conn: FastConn, name: str, bid: int, offset: float) -> None:
        await asyncio.sleep(offset)
        while self.running:
            t = time.perf_counter()
            await conn.call(heartbeat_frame(name, bid, False))
            if self.measuring:
                self.lat.append(time.perf_counter() - t)
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t)))

    async def stop(self) -> None:
        self.running = False
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for cs in self.conns.values():
            for c in cs:
                c.close()


async def bench_heartbeat(steps: list[int], seconds: float) -> dict[str, Any]:
    rows = []
    probes = [f"hb-{i}" for i in range(50)]
    async with Cluster({}) as cl:
        load = HeartbeatLoad(cl.procs.addrs, probes)
        await load.start()
        names: list[str] = []
        try:
            for target in steps:
                new = [f"hb-{i}" for i in range(len(names), target)]
                load.set_names(names + new)  # heartbeats start before registration, as a broker does
                t = time.perf_counter()
                await create_sets(cl, new)
                names += new
                log(f"heartbeat: registered {len(names)} sets ({len(new) * 3} writes in {time.perf_counter() - t:.1f}s)")
                await asyncio.sleep(4.0)  # settle: every broker has heartbeated several times
                leader = await cl.leader_addr()
                before = await sync_state(leader, names)
                load.lat.clear()
                load.measuring = True
                await asyncio.sleep(seconds)
                load.measuring = False
                after = await sync_state(leader, names)
                false_elections = sum(1 for n in names if after.get(n) != before.get(n))
                row = {"broker_sets": len(names), "heartbeats_per_s_per_controller": 2 * len(names),
                       "probe_p50_ms": round(pct(load.lat, 0.5) * 1000, 2),
                       "probe_p99_ms": round(pct(load.lat, 0.99) * 1000, 2), "probes": len(load.lat),
                       "false_elections": false_elections}
                row["ok"] = row["probe_p99_ms"] < 50 and false_elections == 0
                log(f"heartbeat step: {row}")
                rows.append(row)
                if not row["ok"]:
                    break
        finally:
            await load.stop()
    ok = [r["broker_sets"] for r in rows if r["ok"]]
    return {"steps": rows, "max_broker_sets_ok": max(ok) if ok else 0,
            "setup": "2 brokers per set, each heartbeating all 3 controllers every 1 s (one-way); 100 probe "
                     "brokers send two-way heartbeats whose latency is the p50/p99; brokerHeartbeatTimeoutMs=3000"}


async def bench_election(trials: int) -> dict[str, Any]:
    leader_ms: list[float] = []
    serve_ms: list[float] = []
    async with Cluster({}) as cl:
        for trial in range(trials):
            li = await cl.procs.leader(cl.client, timeout=30)
            for i in range(cl.procs.n):  # everyone up and caught up before the kill
                await cl.client.metadata(cl.procs.addrs[i])
            t0 = time.perf_counter()
            cl.procs.kill(li)
            ni = await cl.procs.leader(cl.client, timeout=30, exclude=li)
            t1 = time.perf_counter()
            conn = await connect(cl.procs.addrs[ni])
            while (await conn.call(apply_id(f"el-{trial}"))).code != 0:
                await asyncio.sleep(0.005)
            t2 = time.perf_counter()
            conn.close()
            leader_ms.append((t1 - t0) * 1000)
            serve_ms.append((t2 - t0) * 1000)
            log(f"election trial {trial}: leader after {leader_ms[-1]:.0f} ms, first write after {serve_ms[-1]:.0f} ms")
            cl.procs.start(li)
            await asyncio.sleep(3)  # let the restarted member rejoin before the next kill
    return {"election_timeout_ms": 500, "trials": trials,
            "new_leader_ms": [round(x) for x in leader_ms], "first_write_ms": [round(x) for x in serve_ms],
            "median_first_write_ms": round(statistics.median(serve_ms)), "max_first_write_ms": round(max(serve_ms))}


async def broker_failover(extra: dict[str, str]) -> float:
    async with Cluster(extra) as cl:
        addr = await cl.leader_addr()
        await create_sets(cl, ["fo"], brokers=2)
        conns = {a: await connect(a) for a in cl.procs.addrs}
        beating = {1: True, 2: True}
        done = False

        async def beat() -> None:
            while not done:
                for bid in (1, 2):
                    if beating[bid]:
                        for c in conns.values():
                            c.send_raw(encode(heartbeat_frame("fo", bid, True)))
                await asyncio.sleep(1.0)  # the broker heartbeat period

        task = asyncio.ensure_future(beat())
        await asyncio.sleep(1.5)
        lc = await connect(addr)
        r = await lc.call(request(Q.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "fo", "masterBrokerId": "1",
                                                                       "masterEpoch": "1"},
                                  orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1})))
        assert r.code == 0, (r.code, r.remark)
        beating[1] = False  # the master hangs (its channel stays open)
        t0 = time.perf_counter()
        while True:
            r = await lc.call(request(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "fo"}))
            if r.ext.get("masterBrokerId") == "2":
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - t0
        done = True
        await task
        return round(elapsed * 1000)


async def bench_failover() -> dict[str, Any]:
    new = await broker_failover({})
    log(f"broker failover new: {new} ms")
    old = await broker_failover({"controllerLegacyMode": "true"})
    log(f"broker failover legacy: {old} ms")
    return {"new_ms": new, "legacy_ms": old,
            "note": "from the master's last heartbeat to the new master visible in GET_REPLICA_INFO"}


def cpu_pressure() -> str:
    """Linux PSI for CPU (share of time some task waited for a CPU): other load on the machine shows up here."""
    try:
        return open("/proc/pressure/cpu").readline().strip()
    except OSError:
        return "n/a"


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
            "cpu_pressure_at_start": cpu_pressure(), "python": platform.python_version(),
            "platform": platform.platform(), "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="writes,reads,heartbeat,election,failover")
    ap.add_argument("--quick", action="store_true", help="short runs (smoke test of the script)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per throughput run")
    ap.add_argument("--hb-steps", default="2000,5000,10000,15000,20000")
    ap.add_argument("--keep-logs", action="store_true", help="keep each cluster's directory (logs) for inspection")
    args = ap.parse_args()
    global KEEP_LOGS
    KEEP_LOGS = args.keep_logs
    dur = args.duration or (2.0 if args.quick else 8.0)
    sections = set(args.sections.split(","))
    sink = await start_sink()
    result: dict[str, Any] = {"machine": machine(), "fsync": True}
    steps = [int(x) for x in args.hb_steps.split(",")]
    plan: list[tuple[str, str, Callable[[], Any]]] = [
        ("writes", "writes", lambda: bench_writes(dur, [1, 16, 256])),
        ("reads", "reads", lambda: bench_reads(dur, 64)),
        ("heartbeat", "heartbeat",
         lambda: bench_heartbeat(steps[:2] if args.quick else steps, 5.0 if args.quick else 15.0)),
        ("election", "election", lambda: bench_election(2 if args.quick else 7)),
        ("failover", "broker_failover", bench_failover),
    ]
    for section, key, run in plan:
        if section not in sections:
            continue
        try:
            result[key] = await run()
        except Exception as e:  # noqa: BLE001 - report the failure, keep the other sections
            log(f"section {section} failed: {e!r}")
            result[key] = {"error": repr(e)}
    result["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["machine"]["cpu_pressure_at_end"] = cpu_pressure()
    sink.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
