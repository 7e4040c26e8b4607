"""Overload: a SYNC_FLUSH broker flooded closed-loop (each answer, success or SYSTEM_BUSY, frees its slot for a
new send at once) with and without shedding (brokerFastFailureEnable), side by side in one run; plus the
unloaded rate (few sends in flight) and single sends right after the flood. The flood comes from the compiled
generator (scripts/bench/gen.c, flood mode), which offers far more than the broker takes. Prints one JSON document.

Usage: .venv/bin/python scripts/bench/overload.py [--conns 16] [--inflight 2048] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench import cgen  # noqa: E402
from tests.support import Cluster, rpc  # noqa: E402

SEND = {"a": "pg", "b": "Flood", "c": "TBW102", "d": "8", "e": "0", "f": "0", "g": "0", "h": "0", "i": ""}


def flood(addr: str, conns: int, inflight: int, seconds: float) -> dict[str, object]:
    """Every answer's latency (success or refusal), successes per second and per half second, refusals by the
    bracketed reason of their remark."""
    r = cgen.run(addr, "Flood", shape="json_no_uniq", conns=conns, inflight=inflight, seconds=seconds, body=1024,
                 timeout=seconds + 300)
    lat, ok_lat = r["latency"], r["ok_latency"]
    assert isinstance(lat, dict) and isinstance(ok_lat, dict) and isinstance(r["errors"], dict)
    return {"seconds": r["seconds"], "answers": r["answered"], "ok": r["acked"], "ok_per_s": r["msg_per_s"],
            "answers_per_s": r["answers_per_s"], "codes": {"0": r["acked"], **r["errors"]}, "busy": r["busy"],
            "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "p99.9_ms": lat["p99.9_ms"], "max_ms": lat["max_ms"],
            "ok_p99_ms": ok_lat["p99_ms"], "ok_per_half_s": r["ok_per_half_s"], "timed_out": r["timed_out"]}  # fmt: skip


def run(tmp: pathlib.Path, args: argparse.Namespace, **cfg: Any) -> dict[str, object]:
    c = Cluster(tmp, brokers=1, flushDiskType="SYNC_FLUSH", **cfg).start()
    try:
        addr = c.broker_addr()
        assert rpc(addr, 17, {"topic": "Flood", "readQueueNums": "8", "writeQueueNums": "8"}).code == 0
        unloaded = flood(addr, 4, 32, 3.0)
        loaded = flood(addr, args.conns, args.inflight, args.seconds)
        after = []
        for _ in range(20):
            t = time.perf_counter()
            code = rpc(addr, 310, SEND, b"x").code
            after.append((code, round((time.perf_counter() - t) * 1000, 2)))
        return {"unloaded": unloaded, "flood": loaded, "after_codes": sorted({c for c, _ in after}),
                "after_ms_median": sorted(t for _, t in after)[10],
                "ok_rate_vs_unloaded": round(float(loaded["ok_per_s"]) / float(unloaded["ok_per_s"]), 3)}  # type: ignore[arg-type]
    finally:
        c.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--inflight", type=int, default=2048)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    res: dict[str, object] = {"bench": "overload", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "load_before": os.getloadavg()[0],
                              "params": {"conns": args.conns, "inflight_per_conn": args.inflight,
                                         "seconds": args.seconds, "flush": "SYNC_FLUSH"}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="overload-") as d:
        tmp = pathlib.Path(d)
        for name, cfg in (("shedding", {}), ("no_shedding", {"brokerFastFailureEnable": "false"})):
            (tmp / name).mkdir()
            res[name] = run(tmp / name, args, **cfg)
    res["load_after"] = os.getloadavg()[0]
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
