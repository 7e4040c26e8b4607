#!/usr/bin/env python3
"""Benchmark: produce throughput with ACL on vs off, side by side in one run (docs/benchmarks.md).

Two containers (one broker each, ASYNC_FLUSH): ACL off and ACL on (an account allowed to PUB the bench topic).
The same pipelined load generator (scripts/bench/loadgen.py) signs every request in both runs (the C++ client
always sends AccessKey/Signature; the broker with ACL off ignores them), so the ratio is the broker's cost of
checking. Rounds alternate off/on; the ratio of the medians is reported (throughput, and the broker process's
CPU time per message, which the other load on a shared machine disturbs less), with the C lane's share of the stored
messages and why it left sends to Python (GET_BROKER_RUNTIME_INFO). One unsigned round against ACL off shows
what signing costs the client. The Python load generator signing every message is the bottleneck of the
end-to-end runs on 2 cores, so an in-process phase (as scripts/bench/send_path_cpu.py: pre-encoded signed
SEND_MESSAGE_V2 frames, 32 per read, fed to a Connection of an in-process broker; no sockets, no client) gives
the broker's own loop-thread CPU per message with ACL off and on, alternating.
Usage: .venv/bin/python scripts/bench/acl.py [--total N] [--rounds R] [--conns C] [--inflight K] [--binary]
       [--inproc-messages M]
"""

from __future__ import annotations

import argparse
import asyncio
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

from scripts.bench.ha_common import process_cpu_s  # noqa: E402
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
    return process_cpu_s(c.daemon.proc.pid)


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


async def in_process_once(root: pathlib.Path, acl: bool, messages: int, binary: bool) -> dict[str, float]:
    """Loop-thread CPU per message of one in-process broker fed signed frames (ACL on or off)."""
    import gc

    from brokerd.acl import sign_request
    from brokerd.broker import Broker
    from brokerd.broker_config import BrokerConfig
    from brokerd.metadata.topic import TopicConfig
    from brokerd.remoting import RemotingClient, RemotingCommand, encode, encode_binary
    from brokerd.remoting.connection import Connection
    from scripts.bench.send_path_cpu import BURST, FakeTransport

    path = root / "plain_acl.yml"
    path.write_text(ACL_YML)
    cfg = BrokerConfig(store_path_root_dir=str(root / "store"), listen_port=20000, broker_name="bench-acl",
                       mapped_file_size_commit_log=64 << 20, max_hash_slot_num=50_000, max_index_num=200_000,
                       acl_enable=acl, acl_file_path=str(path))  # fmt: skip
    b = Broker(cfg, RemotingClient(), namesrv_addrs=[])
    await b.start()
    b.meta.topics.update(TopicConfig("BenchTopic", 8, 8))
    conn = Connection(b.dispatcher)
    tr = FakeTransport()
    conn.connection_made(tr)  # type: ignore[arg-type]
    body = os.urandom(1024)
    uniq = f"7F000001{os.getpid() & 0xFFFF:04X}{int(time.time()) & 0xFFFFFFFF:08X}"

    def frame(op: int) -> bytes:
        ext = {"a": "bench_pg", "b": "BenchTopic", "c": "TBW102", "d": "8", "e": str(op % 8), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0",
               "i": f"TAGS\x01bench\x02WAIT\x01true\x02UNIQ_KEY\x01{uniq}{op:08X}\x02", "j": "0", "k": "false",
               "m": "false", "OnsChannel": "ALIYUN"}  # fmt: skip
        cmd = sign_request(RemotingCommand(310, opaque=op, ext=ext, body=body), *ACCOUNT)
        return encode_binary(cmd) if binary else encode(cmd)

    blobs = [b"".join(frame(k * BURST + j + 1) for j in range(BURST)) for k in range(messages // BURST)]
    conn.data_received(blobs[0])  # the first send of the account goes through the Python check (admission)
    gc.collect()
    gc.freeze()
    t0 = time.thread_time()
    for blob in blobs[1:]:
        conn.data_received(blob)
        await asyncio.sleep(0)  # sleep-ok: one loop iteration between reads, as with a real socket
    cpu = time.thread_time() - t0
    gc.unfreeze()
    stored, lane = b.stats.msgs_in, b.send_lane.handled if b.send_lane is not None else 0
    await b.shutdown()
    n = (len(blobs) - 1) * BURST
    return {"loop_cpu_us_per_msg": round(cpu / n * 1e6, 3), "stored": stored, "lane": lane}


def in_process(rounds: int, messages: int, binary: bool) -> dict[str, object]:
    import shutil

    import uvloop

    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(rounds):
        for name in ("off", "on"):
            root = pathlib.Path(tempfile.mkdtemp(prefix="bench-acl-inproc-"))
            try:
                runs[name].append(uvloop.run(in_process_once(root, name == "on", messages, binary)))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(r["loop_cpu_us_per_msg"] for r in v) for k, v in runs.items()}
    return {"messages": messages, "runs": runs, "median_loop_cpu_us_per_msg": med,
            "acl_cost_us_per_msg": round(med["on"] - med["off"], 3),
            "throughput_ratio_on_to_off": round(med["off"] / med["on"], 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--binary", action="store_true", help="ROCKETMQ binary request headers")
    ap.add_argument("--inproc-messages", type=int, default=32_000, help="per in-process run (0: skip that phase)")
    args = ap.parse_args()
    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(open(os.devnull, "w")))  # noqa: SIM115
    inproc = in_process(args.rounds, args.inproc_messages, args.binary) if args.inproc_messages else None
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
        "in_process": inproc,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
