#!/usr/bin/env python3
"""Open-loop latency benchmark: sends issued on a fixed schedule, latency measured from the scheduled time.

A closed-loop generator (a new send when an answer arrives) slows down with the broker and hides the waits it
does not issue (coordinated omission). Here every send i of a generator at rate r is due at start + i/r; a
generator that falls behind sends the late ones at once, and their latency still counts from when they were due.
The send latency is answer time - due time; the end-to-end latency is when a long-polling consumer (its own
process) receives the message - due time (carried in the first 8 bytes of the body). Every latency is kept
(no bucketing) and the report gives the percentile distribution to p99.99 and the max, per rate and flush type,
as JSON, plus one HdrHistogram-style percentile plot (PNG) per flush type.

The sends come from the compiled generator (scripts/bench/gen.c, one process, --conns connections, the json_uniq
shape). It wakes at most every --tick-us (100 µs) and then sends every send due by then, each counted from its own
due time, so the tick can only add to the figures. A wake per send (--tick-us 0) costs the generator 50,000 timer
wakes a second at 50k msg/s, and on a 2-vCPU machine each wake preempted the broker's loop thread (12,000
involuntary context switches a second, against ~100 with the tick); a real broker's clients run elsewhere. The
end-to-end consumer is the compiled consumer (scripts/bench/consume.c: long polling, one pull in flight per queue).
Both run on the same machine as the broker, and the report says how late the generator itself sent. Before each
flush type the disk's own fdatasync latency is probed (the floor under the SYNC_FLUSH figures).

Usage: .venv/bin/python scripts/bench/openloop.py [--rates 10000,50000] [--seconds 10] [--conns 8]
       [--flush ASYNC_FLUSH,SYNC_FLUSH] [--tick-us 100] [--plot-dir docs/img] [--no-e2e]
"""

from __future__ import annotations

import argparse
import array
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen  # noqa: E402

PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
TOPIC, QUEUES = "OpenLoop", 8


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
    """Each queue's max offset (GET_MAX_OFFSET, 30): where a consumer of what comes next starts, or ends."""
    from tests.support import rpc

    return [int(rpc(addr, 30, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(queues)]


def c_generator(addr: str, args: argparse.Namespace, rate: int, start_epoch: float,
                tmp: pathlib.Path) -> tuple[array.array, dict[str, object]]:  # type: ignore[type-arg]
    """The compiled generator at ``rate``: (every send latency, its report)."""
    out = tmp / f"send-{rate}.bin"
    r = cgen.run(addr, TOPIC, timeout=args.seconds + 200, conns=args.conns, body=args.body, rate=rate,
                 seconds=args.seconds, start=start_epoch, tick_us=args.tick_us, lat_out=out)
    late = r["gen_late"]
    assert isinstance(late, dict) and isinstance(r["errors"], dict)
    rep = {"sent": r["sent"], "codes": {"0": r["acked"], **r["errors"]}, "busy": r["busy"],
           "generator_lag_p99_ms": late["p99_ms"], "generator_lag_max_ms": late["max_ms"]}
    return read_lat(out), rep


def disk_probe(directory: pathlib.Path, n: int = 1000, chunk: int = 32 << 10) -> dict[str, float]:
    """This disk's own fdatasync latency right now (appends of ``chunk`` bytes to a preallocated file, as a
    group commit of ~30 sends writes): the floor under the SYNC_FLUSH figures of the same run."""
    path = directory / "disk-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, n * chunk)
        data, lat = b"x" * chunk, array.array("d")
        for i in range(n):
            os.pwrite(fd, data, i * chunk)
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return distribution(lat)


def one_rate(addr: str, args: argparse.Namespace, rate: int, tmp: pathlib.Path, e2e: bool) -> dict[str, object]:
    consumer = None
    expect = tmp / f"expect-{rate}"
    if e2e:  # long-polls every queue from its current end; stops once it got every stored send
        start = max_offsets(addr, TOPIC, QUEUES)
        consumer = subprocess.Popen(cgen.consume_command(addr, TOPIC, start, expect_file=expect, ts=True,
                                                         lat_out=tmp / f"e2e-{rate}.bin", timeout=args.seconds + 300),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    start_epoch = time.time() + 1.0
    send_lat, gen = c_generator(addr, args, rate, start_epoch, tmp)
    res: dict[str, object] = {"rate": rate, "send": distribution(send_lat), "generator": gen}
    curves = {"send": send_lat}
    if consumer is not None:
        expect.write_text(str(gen["codes"]["0"]))  # type: ignore[index]
        out, err = consumer.communicate(timeout=args.seconds + 400)
        rep = cgen.report(out)
        res["e2e"] = distribution(read_lat(tmp / f"e2e-{rate}.bin"))
        res["consumer"] = {k: rep[k] for k in ("msgs", "pulls", "timed_out")} | ({"stderr": err[-500:]} if err else {})
        curves["e2e"] = read_lat(tmp / f"e2e-{rate}.bin")
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
                                 "load_before": os.getloadavg()[0],
                                 "params": {"seconds": args.seconds, "conns": args.conns, "body": args.body,
                                            "queues": QUEUES}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="openloop-") as d:
        tmp = pathlib.Path(d)
        for flush in args.flush.split(","):
            (tmp / flush).mkdir()
            os.sync()
            probe = disk_probe(tmp / flush)
            c = Cluster(tmp / flush, brokers=1, flushDiskType=flush, waitTimeMillsInSendQueue=200).start()  # RocketMQ's
            try:
                addr = c.broker_addr()
                assert rpc(addr, 17, {"topic": TOPIC, "readQueueNums": str(QUEUES),
                                      "writeQueueNums": str(QUEUES)}).code == 0
                warm = argparse.Namespace(**{**vars(args), "seconds": 2.0})  # files created, caches warm: not measured
                one_rate(addr, warm, int(args.rates.split(",")[0]), tmp / flush, False)
                results = [one_rate(addr, args, int(r), tmp / flush, args.e2e) for r in args.rates.split(",")]
            finally:
                c.stop()
            png = plot_dir / f"openloop-{flush.lower()}.png"
            plot(flush, results, png)
            for r in results:
                del r["_curves"]
            report[flush.lower()] = {"disk_fdatasync_32k": probe, "runs": results, "plot": str(png.relative_to(ROOT) if png.is_relative_to(ROOT)
                                                                    else png)}  # fmt: skip
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10000,50000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--conns", type=int, default=8, help="the generator's connections")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--flush", default="ASYNC_FLUSH,SYNC_FLUSH")
    ap.add_argument("--tick-us", type=float, default=100.0,
                    help="the generator wakes at most this often; the sends due meanwhile go out together, their latency "
                         "counted from their due times (0: a wake per send)")
    ap.add_argument("--no-e2e", dest="e2e", action="store_false")
    ap.add_argument("--plot-dir", default=str(ROOT / "docs" / "img"))
    return drive(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
