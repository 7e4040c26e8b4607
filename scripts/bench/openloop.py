#!/usr/bin/env python3
"""Open-loop latency benchmark: sends issued on a fixed schedule, latency measured from the scheduled time.

A closed-loop generator (a new send when an answer arrives) slows down with the broker and hides the waits it
does not issue (coordinated omission). Here every send i of a generator at rate r is due at start + i/r; a
generator that falls behind sends the late ones at once, and their latency still counts from when they were due.
The send latency is answer time - due time; the end-to-end latency is when a long-polling consumer (its own
process) receives the message - due time (carried in the first 8 bytes of the body). Every latency is kept
(no bucketing) and the report gives the percentile distribution to p99.99 and the max, per rate and flush type,
as JSON, plus one HdrHistogram-style percentile plot (PNG) per flush type.

The sends come from the compiled generator (scripts/bench/gen.c, one process, --gens x --conns connections;
``--gen c``, the default when it builds) or from --gens Python generator processes (``--gen python``, which
run late by tens of ms at p99 near 50k msg/s); the report names the generator and how late it sent.

Usage: .venv/bin/python scripts/bench/openloop.py [--rates 10000,50000] [--seconds 10] [--gens 2]
       [--flush ASYNC_FLUSH,SYNC_FLUSH] [--plot-dir docs/img] [--gen c|python]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import pathlib
import platform
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen  # noqa: E402
from scripts.bench.loadgen import Conn, frame  # noqa: E402

PY = sys.executable
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
_BE32 = struct.Struct(">i")
_TS = struct.Struct(">q")
BODY_AT = 88  # a stored record's body (IPv4 hosts): after the fixed fields and the body length


# ------------------------------------------------------------------ the generator process


async def generate(addr: str, topic: str, rate: float, seconds: float, start_epoch: float, conns: int,
                   body_size: int, queues: int, out: pathlib.Path) -> dict[str, object]:
    host, port = addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    due_at: dict[int, float] = {}
    lat = array.array("d")
    lag = array.array("d")  # how late the generator itself sent (its own share of the latency)
    codes: dict[str, int] = {}
    total = int(rate * seconds)
    done = asyncio.Event()
    protos: list[Conn] = []
    pad = b"x" * max(0, body_size - 8)

    def on_response(h: dict, blen: int) -> None:  # type: ignore[type-arg]
        lat.append(time.perf_counter() - due_at.pop(h["opaque"]))
        codes[str(h["code"])] = codes.get(str(h["code"]), 0) + 1
        if len(lat) >= total:
            done.set()

    for _ in range(conns):
        _, p = await loop.create_connection(lambda: Conn(on_response), host, int(port))
        protos.append(p)
    base = time.perf_counter() + (start_epoch - time.time())  # the schedule's start on this clock
    epoch_ns = int(start_epoch * 1e9)
    while time.perf_counter() < base:
        await asyncio.sleep(0.001)
    issued = 0
    while issued < total:
        now = time.perf_counter()
        due = min(total, int((now - base) * rate) + 1)
        batches: list[list[bytes]] = [[] for _ in protos]
        while issued < due:
            t_due = base + issued / rate
            op = issued + 1
            body = _TS.pack(epoch_ns + int(issued * 1e9 / rate)) + pad
            ext = {"a": "ol_pg", "b": topic, "c": "TBW102", "d": str(queues), "e": str(op % queues), "f": "0",
                   "g": str(int(time.time() * 1000)), "h": "0", "i": f"TAGS\x01ol\x02UNIQ_KEY\x01OL{os.getpid():08X}{op:022X}\x02",
                   "j": "0", "k": "false", "m": "false"}  # fmt: skip
            due_at[op] = t_due
            lag.append(now - t_due)
            batches[op % len(protos)].append(frame(310, op, ext, body))
            issued += 1
        for p, b in zip(protos, batches, strict=True):
            if b and p.transport is not None:
                p.transport.writelines(b)
        await asyncio.sleep(0.0005)
    await asyncio.wait_for(done.wait(), 120)
    for p in protos:
        assert p.transport is not None
        p.transport.close()
    with out.open("wb") as f:
        lat.tofile(f)
    lag_sorted = sorted(lag)
    return {"sent": total, "codes": codes, "generator_lag_p99_ms": round(lag_sorted[int(len(lag_sorted) * 0.99)] * 1e3, 3)}


# ------------------------------------------------------------------ the end-to-end consumer process


def body_due_times(buf: bytes) -> list[int]:
    out, pos, n = [], 0, len(buf)
    while pos + BODY_AT + 8 <= n:
        size = _BE32.unpack_from(buf, pos)[0]
        if size <= 0:
            break
        out.append(_TS.unpack_from(buf, pos + BODY_AT)[0])
        pos += size
    return out


async def consume(addr: str, topic: str, queues: int, start: list[int], out: pathlib.Path,
                  ready: pathlib.Path) -> dict[str, object]:
    """Long-polls every queue from ``start`` until as many messages arrived as the file ``ready`` + ".expect"
    says (written by the driver once the generators know how many sends were stored); latency = arrival - due."""
    host, port = addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    offsets = dict(enumerate(start))
    lat = array.array("d")
    pending: dict[int, int] = {}
    proto: list[Conn] = []
    opq = [0]

    def pull(q: int) -> None:
        opq[0] += 1
        pending[opq[0]] = q
        ext = {"consumerGroup": "ol_cg", "topic": topic, "queueId": str(q), "queueOffset": str(offsets[q]),
               "maxMsgNums": "64", "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "15000",
               "subscription": "*", "subVersion": "0"}  # fmt: skip
        t = proto[0].transport
        assert t is not None
        t.write(frame(11, opq[0], ext))

    def on_response(h: dict, blen: int, body: bytes = b"") -> None:  # type: ignore[type-arg]
        q = pending.pop(h["opaque"])
        now = time.time_ns()
        ext = h.get("extFields") or {}
        if h["code"] == 0:
            for due in body_due_times(body):
                lat.append((now - due) / 1e9)
        offsets[q] = int(ext.get("nextBeginOffset", offsets[q]))
        pull(q)

    _, p = await loop.create_connection(lambda: BodyConn(on_response), host, int(port))
    proto.append(p)
    for q in range(queues):
        pull(q)
    ready.write_text("ready")
    expect_file = ready.with_suffix(".expect")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if expect_file.exists() and len(lat) >= int(expect_file.read_text() or "0"):
            break
        await asyncio.sleep(0.1)
    p.transport.close()  # type: ignore[union-attr]
    with out.open("wb") as f:
        lat.tofile(f)
    return {"received": len(lat)}


class BodyConn(Conn):
    """A ``Conn`` that also hands each response's body to the callback."""

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        while n - pos >= 8:
            total, hword = struct.unpack_from(">ii", buf, pos)
            if n - pos - 4 < total:
                break
            hlen = hword & 0xFFFFFF
            header = json.loads(bytes(buf[pos + 8:pos + 8 + hlen]))
            self.on_response(header, total - 4 - hlen, bytes(buf[pos + 8 + hlen:pos + 4 + total]))
            pos += 4 + total
        del buf[:pos]


# ------------------------------------------------------------------ the driver


def distribution(values: array.array) -> dict[str, float]:  # type: ignore[type-arg]
    xs = sorted(values)
    if not xs:
        return {}
    out = {f"p{p:g}_ms": round(xs[min(len(xs) - 1, int(len(xs) * p / 100))] * 1e3, 3) for p in PERCENTILES}
    out["max_ms"] = round(xs[-1] * 1e3, 3)
    out["count"] = len(xs)
    return out


def read_lat(path: pathlib.Path) -> array.array:  # type: ignore[type-arg]
    a = array.array("d")
    a.frombytes(path.read_bytes())
    return a


def max_offsets(addr: str, topic: str, queues: int) -> list[int]:
    from tests.support import rpc

    return [int(rpc(addr, 30, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(queues)]


def py_generators(addr: str, args: argparse.Namespace, rate: int, start_epoch: float,
                  tmp: pathlib.Path) -> tuple[array.array, list[dict[str, object]]]:  # type: ignore[type-arg]
    """--gens Python generator processes, rate/gens each: (every send latency, their reports)."""
    gens = [subprocess.Popen([PY, "-m", "scripts.bench.openloop", "gen", "--addr", addr, "--topic", "OpenLoop",
                              "--rate", str(rate / args.gens), "--seconds", str(args.seconds), "--start",
                              str(start_epoch), "--conns", str(args.conns), "--body", str(args.body),
                              "--out", str(tmp / f"send-{rate}-{g}.bin")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
            for g in range(args.gens)]  # fmt: skip
    gen_out = [json.loads(g.communicate(timeout=args.seconds + 200)[0].strip().splitlines()[-1]) for g in gens]
    send_lat = array.array("d")
    for g in range(args.gens):
        send_lat.extend(read_lat(tmp / f"send-{rate}-{g}.bin"))
    return send_lat, gen_out


def c_generator(addr: str, args: argparse.Namespace, rate: int, start_epoch: float,
                tmp: pathlib.Path) -> tuple[array.array, list[dict[str, object]]]:  # type: ignore[type-arg]
    """One compiled generator process with --gens x --conns connections: (every send latency, its report in
    the Python generators' terms plus its own)."""
    out = tmp / f"send-{rate}-c.bin"
    r = cgen.run(addr, "OpenLoop", timeout=args.seconds + 200, conns=args.conns * args.gens, body=args.body,
                 rate=rate, seconds=args.seconds, start=start_epoch, lat_out=out)
    late = r["gen_late"]
    assert isinstance(late, dict) and isinstance(r["errors"], dict)
    rep = {"gen": "c", "sent": r["sent"], "codes": {"0": r["acked"], **r["errors"]},
           "generator_lag_p99_ms": late["p99_ms"], "generator_lag_max_ms": late["max_ms"]}
    return read_lat(out), [rep]


def one_rate(addr: str, args: argparse.Namespace, rate: int, tmp: pathlib.Path, e2e: bool) -> dict[str, object]:
    topic, queues = "OpenLoop", 8
    consumer = None
    ready = tmp / f"ready-{rate}"
    if e2e:
        start = ",".join(map(str, max_offsets(addr, topic, queues)))
        consumer = subprocess.Popen([PY, "-m", "scripts.bench.openloop", "consume", "--addr", addr, "--topic", topic,
                                     "--start", start,
                                     "--out", str(tmp / f"e2e-{rate}.bin"), "--ready", str(ready)],
                                    cwd=ROOT, stdout=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.time() + 30
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)  # sleep-ok: a benchmark driver waiting for its consumer process
    start_epoch = time.time() + 1.5
    send_lat, gen_out = (c_generator if args.gen == "c" else py_generators)(addr, args, rate, start_epoch, tmp)
    res: dict[str, object] = {"rate": rate, "send": distribution(send_lat), "generators": gen_out}
    curves = {"send": send_lat}
    if consumer is not None:  # it waits for every stored send (a refused one is never consumed)
        ready.with_suffix(".expect").write_text(str(sum(g["codes"].get("0", 0) for g in gen_out)))  # type: ignore[attr-defined]
        consumer.communicate(timeout=700)
        e2e_lat = read_lat(tmp / f"e2e-{rate}.bin")
        res["e2e"] = distribution(e2e_lat)
        curves["e2e"] = e2e_lat
    res["_curves"] = curves
    return res


def plot(flush: str, results: list[dict[str, object]], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        for kind, values in r["_curves"].items():  # type: ignore[attr-defined]
            xs = sorted(values)
            n = len(xs)
            if not n:
                continue
            ps = [p for p in (0, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999) if p < 100]
            x = [1 / (1 - p / 100) for p in ps] + [n]
            y = [xs[min(n - 1, int(n * p / 100))] * 1e3 for p in ps] + [xs[-1] * 1e3]
            ax.plot(x, y, marker="o", markersize=3, label=f"{r['rate']} msg/s {kind}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 10, 100, 1000, 10000, 100000])
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency from the scheduled send time (ms)")
    ax.set_title(f"open-loop latency, {flush} (1 KiB sends, {platform.node()})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def drive(args: argparse.Namespace) -> int:
    from tests.support import Cluster, rpc

    plot_dir = pathlib.Path(args.plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {"bench": "openloop", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "machine": platform.machine(), "cpus": os.cpu_count(),
                                 "load_before": os.getloadavg()[0], "generator": args.gen,
                                 "params": {"seconds": args.seconds, "gens": args.gens, "conns_per_gen": args.conns,
                                            "body": args.body}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="openloop-") as d:
        tmp = pathlib.Path(d)
        for flush in args.flush.split(","):
            (tmp / flush).mkdir()
            os.sync()
            c = Cluster(tmp / flush, brokers=1, flushDiskType=flush).start()
            try:
                addr = c.broker_addr()
                assert rpc(addr, 17, {"topic": "OpenLoop", "readQueueNums": "8", "writeQueueNums": "8"}).code == 0
                warm = argparse.Namespace(**{**vars(args), "seconds": 2.0})  # files created, caches warm: not measured
                one_rate(addr, warm, int(args.rates.split(",")[0]), tmp / flush, False)
                results = [one_rate(addr, args, int(r), tmp / flush, args.e2e) for r in args.rates.split(",")]
            finally:
                c.stop()
            png = plot_dir / f"openloop-{flush.lower()}.png"
            plot(flush, results, png)
            for r in results:
                del r["_curves"]
            report[flush.lower()] = {"runs": results, "plot": str(png.relative_to(ROOT) if png.is_relative_to(ROOT)
                                                                    else png)}  # fmt: skip
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", default="drive", choices=["drive", "gen", "consume"])
    ap.add_argument("--addr")
    ap.add_argument("--topic", default="OpenLoop")
    ap.add_argument("--rates", default="10000,50000")
    ap.add_argument("--rate", type=float)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--gens", type=int, default=2, help="generator processes (each takes rate/gens)")
    ap.add_argument("--conns", type=int, default=4, help="connections per generator")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--flush", default="ASYNC_FLUSH,SYNC_FLUSH")
    ap.add_argument("--no-e2e", dest="e2e", action="store_false")
    ap.add_argument("--plot-dir", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--gen", choices=["c", "python"], help="the load generator (default: c when it builds)")
    ap.add_argument("--start")
    ap.add_argument("--out")
    ap.add_argument("--ready")
    a = ap.parse_args()
    if a.mode == "drive":
        if a.gen is None:
            a.gen = "c" if cgen.build() is not None else "python"
        return drive(a)
    import uvloop

    uvloop.install()
    if a.mode == "gen":
        res = asyncio.run(generate(a.addr, a.topic, a.rate, a.seconds, float(a.start), a.conns, a.body, 8,
                                   pathlib.Path(a.out)))  # fmt: skip
    else:
        res = asyncio.run(consume(a.addr, a.topic, 8, [int(x) for x in a.start.split(",")],
                                  pathlib.Path(a.out), pathlib.Path(a.ready)))  # fmt: skip
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
