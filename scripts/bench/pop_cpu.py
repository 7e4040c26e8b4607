"""Loop-thread cost per message of POP + BATCH_ACK next to pull, measured in process: prints one JSON object.

  .venv/bin/python scripts/bench/pop_cpu.py [--messages 32000]
  .venv/bin/python scripts/bench/pop_cpu.py --callgrind [--messages 8000]

A real ``brokerd.broker.Broker`` (64 MiB commit-log segments) in this process gets ``--messages`` sends of 256 B on
8 queues through a ``Connection`` with a fake transport (no sockets), then is read back twice with the client shape
of RocketMQ's Java consumers, one connection with a request per queue in flight: pull (PULL_MESSAGE, 32 a request,
the next from nextBeginOffset) and POP (queueId -1, 32 a request, invisible 60 s; each answer acknowledged by one
BATCH_ACK_MESSAGE sent with the next pop), each read of the broker holding what the client sent after its last
answers. The client's work (decoding answers, building requests) runs on another thread, so the loop thread's
figures are the broker's alone: decode, processing, store reads and revive-log records, answer encoding.

* ``loop_cpu_us_per_msg``: loop-thread CPU (``time.thread_time``) per message of each phase; the best of
  ``--repeat`` runs (a shared VM's figures swing).
* ``--callgrind``: runs itself under ``valgrind --tool=callgrind --separate-threads=yes`` (PYTHONHASHSEED=0),
  stopping after the fill, after the pull and after POP, each with N and 2N messages, and reports the loop
  thread's marginal instructions per message of each phase: the ratio pull / POP is the broker's capacity ratio
  without the kernel's part. Timers run on wall time, 50 times slower under valgrind, so their work per message is
  larger there and runs differ by a few per cent.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson
import structlog
import uvloop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from brokerd.pop.extra_info import encode_bitset, parse_info  # noqa: E402
from brokerd.remoting.codec import FrameDecoder, encode  # noqa: E402
from brokerd.remoting.command import request  # noqa: E402
from brokerd.remoting.connection import Connection  # noqa: E402
from scripts.bench import shapes  # noqa: E402
from scripts.bench.send_path_cpu import QUEUES, FakeTransport, loop_thread_instructions, start_broker  # noqa: E402

TOPIC = "BenchPop"
PULL, POP, BATCH_ACK = 11, 200050, 200151


class Capture(FakeTransport):
    """The fake transport keeping what the broker writes (its answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes | memoryview] = []

    def writelines(self, data: list[bytes | memoryview]) -> None:
        super().writelines(data)
        self.out.extend(bytes(d) for d in data)

    def write(self, data: bytes) -> None:
        super().write(data)
        self.out.append(bytes(data))

    def take(self) -> bytes:
        data, self.out = b"".join(self.out), []
        return data


def frame(code: int, ext: dict[str, str], opaque: int, body: bytes | None = None) -> bytes:
    cmd = request(code, ext, body)
    cmd.opaque = opaque
    return encode(cmd)


class PullClient:
    """A request per queue in flight, each queue read from 0 to its end."""

    def __init__(self, ends: list[int]) -> None:
        self.offsets, self.ends, self.opaque, self.got = [0] * QUEUES, ends, 1, 0
        self.of_opaque: dict[int, int] = {}  # a pull's opaque -> its queue

    def request(self, q: int) -> bytes:
        self.opaque += 1
        self.of_opaque[self.opaque] = q
        return frame(PULL, {"consumerGroup": "bench_pull", "topic": TOPIC, "queueId": str(q),
                            "queueOffset": str(self.offsets[q]), "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                            "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
                            "expressionType": "TAG"}, self.opaque)  # fmt: skip

    def first(self) -> bytes:
        return b"".join(self.request(q) for q in range(QUEUES))

    def next(self, data: bytes) -> bytes:
        out = []
        for r in FrameDecoder().feed(data):
            q = self.of_opaque.pop(r.opaque)
            if r.code == 0:
                nxt = int(r.ext["nextBeginOffset"])
                self.got += nxt - self.offsets[q]
                self.offsets[q] = nxt
            if self.offsets[q] < self.ends[q]:
                out.append(self.request(q))
        return b"".join(out)


class PopClient:
    """Pops in flight; each answer with messages acknowledged by one BATCH_ACK sent with the next pop."""

    def __init__(self, total: int) -> None:
        self.total, self.got, self.opaque, self.acks = total, 0, 1, set[int]()

    def pop(self) -> bytes:
        self.opaque += 1
        return frame(POP, {"consumerGroup": "bench_pop", "topic": TOPIC, "queueId": "-1", "maxMsgNums": "32",
                           "invisibleTime": "60000", "pollTime": "0", "bornTime": str(int(time.time() * 1000)),
                           "initMode": "0"}, self.opaque)  # fmt: skip

    def first(self) -> bytes:
        return b"".join(self.pop() for _ in range(QUEUES))

    def batch_ack(self, ext: dict[str, str]) -> bytes:
        starts = parse_info(ext["startOffsetInfo"], "start")
        acks = []
        for key, offsets in parse_info(ext["msgOffsetInfo"], "msg").items():
            mark, qid = key.split("@")
            s = int(starts[key][0])
            acks.append({"c": "bench_pop", "t": TOPIC, "r": mark, "so": s, "q": int(qid), "rq": int(ext["reviveQid"]),
                         "pt": int(ext["popTime"]), "it": int(ext["invisibleTime"]),
                         "b": encode_bitset([int(o) - s for o in offsets])})
            self.got += len(offsets)
        self.opaque += 1
        self.acks.add(self.opaque)
        return frame(BATCH_ACK, {}, self.opaque, orjson.dumps({"brokerName": "broker-a", "acks": acks}))

    def next(self, data: bytes) -> bytes:
        out = []
        for r in FrameDecoder().feed(data):
            if r.opaque in self.acks:
                self.acks.discard(r.opaque)
                if r.code != 0:
                    raise RuntimeError(f"batch ack answered {r.code}: {r.remark}")
                continue
            if r.code == 0:
                out.append(self.batch_ack(r.ext))
            if self.got < self.total:  # the next pop (also after one that found nothing)
                out.append(self.pop())
        return b"".join(out)


async def phase(conn: Connection, tr: Capture, client: PullClient | PopClient,
                pool: concurrent.futures.Executor) -> float:  # fmt: skip
    """Loop-thread CPU of the broker's reads until the client has nothing more to send; its work runs in ``pool``."""
    loop = asyncio.get_running_loop()
    pending, cpu = await loop.run_in_executor(pool, client.first), 0.0
    while pending:
        t0 = time.thread_time()
        conn.data_received(pending)
        await asyncio.sleep(0)  # sleep-ok: the loop turn that writes the answers (end-of-turn flush)
        await asyncio.sleep(0)  # sleep-ok: and the one after it (put acknowledgements)
        cpu += time.thread_time() - t0
        pending = await loop.run_in_executor(pool, client.next, tr.take())
    return cpu


async def run(total: int, root: str, until: str = "pop") -> dict[str, Any]:
    """The fill, then (``until`` allowing) the pull, then the POP phase."""
    tr = Capture()
    b, conn = await start_broker(root, "broker-a", 20000, TOPIC, tr, segment=64 << 20, max_index=400_000)
    build, _, _ = shapes.builder("json_uniq", TOPIC, QUEUES, 256)
    for k in range(0, total, 32):
        conn.data_received(b"".join(build(i, i, f"{i:012X}", os.urandom(8)) for i in range(k + 1, k + 33)))
        await asyncio.sleep(0)  # sleep-ok: one loop turn between reads, as with a real socket
    tr.take()
    ends = [b.store.max_offset_in_queue(TOPIC, q) for q in range(QUEUES)]
    out: dict[str, Any] = {"messages": sum(ends)}
    gc.collect()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        for name, client in (("pull", PullClient(ends)), ("pop_batch_ack", PopClient(sum(ends)))):
            if until == "fill" or (until == "pull" and name != "pull"):
                break
            cpu = await phase(conn, tr, client, pool)
            out[name] = {"messages": client.got, "loop_cpu_us_per_msg": round(cpu / max(1, client.got) * 1e6, 3)}
    await b.shutdown()
    return out


def callgrind(total: int, workdir: str) -> dict[str, Any]:
    """Marginal loop-thread instructions per message of each phase: runs stopping after the fill, the pull and the
    POP phase, each with N and 2N messages."""
    counts: dict[str, list[int]] = {}
    for until in ("fill", "pull", "pop"):
        for n in (total, 2 * total):
            prefix = os.path.join(workdir, f"cg-{until}-{n}")
            cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}.%p",
                   sys.executable, __file__, "--messages", str(n), "--repeat", "1", "--until", until]  # fmt: skip
            env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict and set layouts in every run
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            counts.setdefault(until, []).append(loop_thread_instructions(prefix))

    def marginal(phase: str, before: str) -> float:
        return ((counts[phase][1] - counts[before][1]) - (counts[phase][0] - counts[before][0])) / total

    pull, pop = marginal("pull", "fill"), marginal("pop", "pull")
    return {"messages": [total, 2 * total], "loop_thread_instructions": counts,
            "pull_instructions_per_msg": round(pull), "pop_batch_ack_instructions_per_msg": round(pop),
            "capacity_ratio_pop_to_pull": round(pull / pop, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--messages", type=int, default=0, help="messages stored and read (32000; 8000 with --callgrind)")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best loop CPU per message is reported")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--until", choices=("fill", "pull", "pop"), default="pop", help=argparse.SUPPRESS)
    args = ap.parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(open(os.devnull, "w")))
    out: dict[str, Any] = {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    root = tempfile.mkdtemp(prefix="pop-cpu-")
    try:
        if args.callgrind:
            out.update(callgrind(args.messages or 8000, root))
        else:
            runs = []
            for i in range(args.repeat):
                runs.append(uvloop.run(run(args.messages or 32_000, os.path.join(root, str(i)), args.until)))
            out["runs"] = runs
            for phase_name in ("pull", "pop_batch_ack"):
                best = min((r[phase_name]["loop_cpu_us_per_msg"] for r in runs if phase_name in r), default=None)
                out[f"{phase_name}_loop_cpu_us_per_msg"] = best
            if out.get("pull_loop_cpu_us_per_msg") and out.get("pop_batch_ack_loop_cpu_us_per_msg"):
                out["capacity_ratio_pop_to_pull"] = round(out["pull_loop_cpu_us_per_msg"]
                                                          / out["pop_batch_ack_loop_cpu_us_per_msg"], 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
