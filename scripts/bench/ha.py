#!/usr/bin/env python3
"""Benchmark: high availability (issue 10) with real processes, prints one JSON document.

Sections (each on its own fresh deployment from tests/ha_cluster.py: 3 mqcontroller processes that also serve
the name-server role, mqbrokercontainer processes in the cross layout, controller mode, allAckInSyncStateSet):
  failover_kill  SIGKILL of the container mastering broker-a under load (2 containers, 2 sets), restarted after
                 each round; time from the kill to a SUCCESS send on the new master found through the name servers
  failover_stop  the same with SIGSTOP (a hung master, found by the controllers' heartbeat timeout), SIGCONT after
                 the failover: the old master must rejoin as a slave and acknowledge nothing after it was deposed
  throughput     loadgen produce (1 KiB) against one set with 0, 1 and 2 SYNC slaves, replication lag sampled
  catchup        an empty slave (store deleted) catching up with a master holding --catchup-mib

Usage: .venv/bin/python scripts/bench/ha.py [--quick] [--sections failover_kill,throughput,...] > out.json
Progress goes to stderr. Ctrl-C / SIGTERM stop every process it started.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import statistics
import sys
import tempfile
import time
from types import FrameType
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench.ha_common import machine  # noqa: E402
from scripts.bench.ha_failover import failover  # noqa: E402
from scripts.bench.ha_replication import catchup, throughput  # noqa: E402

SECTIONS = ("failover_kill", "failover_stop", "throughput", "catchup")
TARGETS = {"failover_p99_ms": 2000, "one_sync_slave_msg_per_s": 60_000, "ratio_one_slave_to_none": 0.5,
           "catchup_mb_per_s": 200}  # fmt: skip


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: 3 rounds per kind, 50k messages, 256 MiB")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--rounds", type=int, help="failover rounds per kind (default 20, quick 3)")
    ap.add_argument("--rate", type=float, default=1000, help="failover load: sends/s over both sets")
    ap.add_argument("--hold", type=float, default=0.2, help="stop kind: seconds hung after the failover")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds of steady load before each kill")
    ap.add_argument("--total", type=int, help="throughput: measured messages per run (default 200k, quick 50k)")
    ap.add_argument("--warmup", type=int, help="throughput: warm-up messages (default 20k, quick 5k)")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--replicas", default="1,2,3", help="throughput: replica counts to run")
    ap.add_argument("--repeat", type=int, help="throughput: passes over the replica counts (default 2, quick 1)")
    ap.add_argument("--lag-period", type=float, default=0.02)
    ap.add_argument("--catchup-mib", type=int, help="catch-up: MiB written while the slave is away (1024 / 256)")
    ap.add_argument("--catchup-body", type=int, default=16384)
    ap.add_argument("--keep", action="store_true", help="keep the temp directory (logs, stores)")
    a = ap.parse_args()
    a.rounds = a.rounds or (3 if a.quick else 20)
    a.repeat = a.repeat or (1 if a.quick else 2)
    a.total = a.total or (50_000 if a.quick else 200_000)
    a.warmup = a.warmup or (5_000 if a.quick else 20_000)
    a.catchup_mib = a.catchup_mib or (256 if a.quick else 1024)
    return a


def log(msg: str) -> None:
    print(f"[ha {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_throughput(tmp: pathlib.Path, a: argparse.Namespace) -> dict[str, Any]:
    """Every replica count in turn, `--repeat` times (interleaved, so a busy moment of the VM hits all)."""
    runs = []
    counts = [int(x) for x in a.replicas.split(",")]
    for rep in range(a.repeat):
        for r in counts:
            log(f"throughput with {r} replica(s), pass {rep + 1}/{a.repeat}")
            runs.append(throughput(tmp / f"tput-r{r}-{rep}", r, a))
            log(f"  {runs[-1]['produce']}")
    summary: dict[int, dict[str, Any]] = {}
    for r in counts:
        mine = [x for x in runs if x["replicas"] == r]
        lag = [x["lag"].get("slave_lag_ms_upper_at_append_rate", {}).get("p99") for x in mine]
        summary[r] = {"sync_slaves": r - 1, "msg_per_s": [x["produce"]["msg_per_s"] for x in mine],
                      "median_msg_per_s": statistics.median(x["produce"]["msg_per_s"] for x in mine),
                      "lag_p99_bytes_upper": [x["lag"].get("slave_lag_bytes_upper", {}).get("p99") for x in mine],
                      "lag_p99_ms_upper": lag}  # fmt: skip
    base = summary.get(1, {}).get("median_msg_per_s")
    for v in summary.values():
        v["ratio_to_unreplicated"] = round(v["median_msg_per_s"] / base, 3) if base else None
    return {"params": {"total": a.total, "warmup": a.warmup, "body": 1024, "conns": a.conns,
                       "inflight_per_conn": a.inflight, "lag_sample_period_s": a.lag_period, "repeat": a.repeat},
            "summary": summary, "runs": runs}  # fmt: skip


def verdict(out: dict[str, Any]) -> dict[str, Any]:
    v: dict[str, Any] = {}
    for kind in ("failover_kill", "failover_stop"):
        if "ack_check" in out.get(kind, {}):
            p99 = out[kind]["kill_to_accepted_send_ms"].get("p99")
            v[f"{kind}_p99_under_2s"] = p99 is not None and p99 < TARGETS["failover_p99_ms"]
            v[f"{kind}_acked_but_lost"] = out[kind]["ack_check"]["acked_but_lost"]
    runs = out.get("throughput", {}).get("summary", {})
    if 2 in runs:
        v["one_sync_slave_60k"] = runs[2]["median_msg_per_s"] >= TARGETS["one_sync_slave_msg_per_s"]
        ratio = runs[2].get("ratio_to_unreplicated")
        v["one_sync_slave_ratio_0.5"] = ratio is not None and ratio >= TARGETS["ratio_one_slave_to_none"]
    if "mb_per_s_from_broker_up" in out.get("catchup", {}):
        v["catchup_200MBps"] = out["catchup"]["mb_per_s_from_broker_up"] >= TARGETS["catchup_mb_per_s"]
    return v


def run_section(name: str, tmp: pathlib.Path, a: argparse.Namespace) -> dict[str, Any]:
    if name.startswith("failover_"):
        kind = name.removeprefix("failover_")
        return failover(tmp / name, kind, a.rounds, a.rate, a.hold if kind == "stop" else 0.0, a.settle)
    if name == "throughput":
        return run_throughput(tmp, a)
    return catchup(tmp / "catchup", a)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through every try/finally that stops the processes


def main() -> int:
    a = parse()
    signal.signal(signal.SIGTERM, _terminate)
    sections = [s for s in a.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections: {sorted(unknown)}")
    out: dict[str, Any] = {"bench": "ha", "machine": machine(), "quick": a.quick, "targets": TARGETS,
                           "params": {k: v for k, v in vars(a).items() if k != "sections"}, "sections": sections}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-ha-"))
    t0 = time.monotonic()
    failed = False
    try:
        for name in sections:
            log(f"section {name}")
            try:
                out[name] = run_section(name, tmp, a)
                log(f"section {name} done: " + json.dumps({k: v for k, v in out[name].items() if k != "raw_rounds"}))
            except Exception as e:  # noqa: BLE001 - reported in the JSON; the other sections still run
                log(f"section {name} failed: {e!r}")
                out[name] = {"error": repr(e)}
                failed = True
        out["verdict"] = verdict(out)
        out["seconds"] = round(time.monotonic() - t0, 1)
        out["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if a.keep or failed:
            log(f"kept {tmp} (logs, stores)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted: every process it started is stopped")
        sys.exit(130)
