#!/usr/bin/env python3
"""Benchmark: produce throughput with ACL on vs off, side by side in one run (docs/benchmarks.md).

Two containers (one broker each, ASYNC_FLUSH): ACL off and ACL on (an account allowed to PUB the bench topic).
The same pipelined load generator (scripts/bench/loadgen.py) signs every request in both runs (the C++ client
always sends AccessKey/Signature; the broker with ACL off ignores them), so the ratio is the broker's cost of
checking. Rounds alternate off/on; the ratio of the medians is reported (throughput, and the broker process's
CPU time per message, which the other load on a shared machine disturbs less), with the C lane's share of the stored
messages and why it left sends to Python (GET_BROKER_RUNTIME_INFO). One unsigned round against ACL off shows
what signing costs the client.
Usage: .venv/bin/python scripts/bench/acl.py [--total N] [--rounds R] [--conns C] [--inflight K] [--binary]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import orjson

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support import Cluster, rpc  # noqa: E402

PY = sys.executable
ACCOUNT = ("benchUser", "benchSecret1")
ADMIN = ("benchAdmin", "benchSecret2")
ACL_YML = f"""accounts:
  - accessKey: {ACCOUNT[0]}
    secretKey: {ACCOUNT[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [BenchTopic=PUB|SUB]
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""


def cpu_seconds(c: Cluster) -> float:
    """The container process's user + system CPU time so far (/proc/<pid>/stat)."""
    assert c.daemon is not None and c.daemon.proc is not None
    fields = pathlib.Path(f"/proc/{c.daemon.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(c: Cluster, args: argparse.Namespace, signed: bool) -> dict[str, object]:
    """One load run plus the broker's CPU microseconds per message (robust on a shared, noisy machine)."""
    cpu0 = cpu_seconds(c)
    res = loadgen(c.broker_addr(), args, signed)
    res["broker_cpu_us_per_msg"] = round((cpu_seconds(c) - cpu0) * 1e6 / args.total, 2)
    return res


def loadgen(addr: str, args: argparse.Namespace, signed: bool) -> dict[str, object]:
    cmd = [PY, "-m", "scripts.bench.loadgen", "produce", "--addr", addr, "--topic", "BenchTopic", "--conns",
           str(args.conns), "--inflight", str(args.inflight), "--total", str(args.total), "--body", str(args.body),
           "--queues", "8"] + (["--binary"] if args.binary else [])
    if signed:
        cmd += ["--access-key", ACCOUNT[0], "--secret-key", ACCOUNT[1]]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=True)
    res: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def start(tmp: pathlib.Path, acl: bool) -> Cluster:
    if not acl:
        return Cluster(tmp, brokers=1).start()
    path = tmp / "plain_acl.yml"
    path.write_text(ACL_YML)
    return Cluster(tmp, brokers=1, admin_creds=ADMIN, container_extra={"aclEnable": "true", "aclFilePath": path},
                   aclEnable="true", aclFilePath=path, aclAccessKey=ADMIN[0], aclSecretKey=ADMIN[1]).start()


def runtime(c: Cluster) -> dict[str, str]:
    r = rpc(c.broker_addr(), 28, creds=ADMIN)
    table: dict[str, str] = orjson.loads(r.body)["table"] if r.code == 0 else {}
    return table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--binary", action="store_true", help="ROCKETMQ binary request headers")
    args = ap.parse_args()
    load1 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-acl-") as d:
        tmp = pathlib.Path(d)
        (tmp / "off").mkdir()
        (tmp / "on").mkdir()
        off, on = start(tmp / "off", False), start(tmp / "on", True)
        try:
            for c in (off, on):
                assert rpc(c.broker_addr(), 17, {"topic": "BenchTopic", "readQueueNums": "8", "writeQueueNums": "8"},
                           creds=ADMIN if c is on else None).code == 0
            runs: dict[str, list[dict[str, object]]] = {"off": [], "on": []}
            for _ in range(args.rounds):
                runs["off"].append(measured(off, args, True))
                runs["on"].append(measured(on, args, True))
            unsigned_off = measured(off, args, False)
            info_on, info_off = runtime(on), runtime(off)
        finally:
            off.stop()
            on.stop()
    med = {k: statistics.median(float(r["msg_per_s"]) for r in v) for k, v in runs.items()}  # type: ignore[arg-type]
    cpu = {k: statistics.median(float(r["broker_cpu_us_per_msg"]) for r in v) for k, v in runs.items()}  # type: ignore[arg-type]
    stored_on = int(info_on.get("msgPutTotalTodayNow", 0))
    out = {
        "bench": "acl", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(),
        "cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_1m_at_start": round(load1, 2),
        "params": {"total": args.total, "rounds": args.rounds, "conns": args.conns, "inflight_per_conn": args.inflight,
                   "body": args.body, "binary_headers": args.binary},
        "acl_off_signed": runs["off"], "acl_on_signed": runs["on"], "acl_off_unsigned": unsigned_off,
        "median_msg_per_s": med, "ratio_on_to_off": round(med["on"] / med["off"], 3),
        "median_broker_cpu_us_per_msg": cpu, "cpu_ratio_off_to_on": round(cpu["off"] / cpu["on"], 3),
        "errors_on": sum(int(r["errors"]) for r in runs["on"]),  # type: ignore[call-overload]
        "lane_share_on": round(int(info_on.get("sendLaneMsgs", 0)) / max(stored_on, 1), 4),
        "lane_share_off": round(int(info_off.get("sendLaneMsgs", 0)) / max(int(info_off.get("msgPutTotalTodayNow", 0)), 1), 4),
        "lane_acl_misses_on": {k.split(".", 1)[1]: int(v) for k, v in info_on.items() if k.startswith("sendLaneAclMiss.")},
        "acl_denied_on": int(info_on.get("aclDenied", 0)),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
