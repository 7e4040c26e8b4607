"""Loop-thread CPU per produced message on the broker's send path, measured in process: prints one JSON object.

  .venv/bin/python scripts/bench/send_path_cpu.py [--brokers 1,16] [--messages 20000] [--dir PATH]
  .venv/bin/python scripts/bench/send_path_cpu.py --callgrind [--brokers 1,16]
  .venv/bin/python scripts/bench/send_path_cpu.py --shapes [--callgrind]   every send shape, one broker

Each broker is a real ``brokerd.broker.Broker`` (32 MiB commit-log segments, small index) started in this
process; its requests are fed through a ``Connection`` with a fake transport: pre-encoded frames of a send shape
(``shapes.py``; json_uniq by default: SEND_MESSAGE_V2, 1 KiB bodies, TAGS/WAIT/UNIQ_KEY), 32 per ``data_received`` call,
round-robin over the brokers. No sockets, so no kernel network time: what is measured is the loop thread's
work from frame bytes to response bytes (decode, send processing, store append, dispatch, response encode).

Figures (wall clock swings ±50 % on a shared VM, so none is reported as the headline):
* ``loop_cpu_us_per_msg``: loop-thread CPU (user + system, ``time.thread_time``) over all bursts, including
  every broker's first writes (file creation and first-touch page faults on the loop thread count here).
* ``steady_loop_cpu_us_per_msg``: the same over the second half of the bursts only.
* ``cold_bursts_over_3ms`` / ``max_burst_cpu_ms``: bursts of 32 whose loop-thread CPU exceeded 3 ms (a normal one is ~0.8 ms), worst one.
* ``--callgrind``: runs itself under ``valgrind --tool=callgrind --separate-threads=yes`` twice (N and 2N
  messages per broker) and reports the loop thread's marginal instructions per message
  ((I(2N) - I(N)) / N): repeatable under load, excludes start-up and per-broker cold start.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import structlog
import uvloop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # before scripts/bench (it has a controller.py)

from brokerd.broker import Broker  # noqa: E402
from brokerd.broker_config import BrokerConfig  # noqa: E402
from brokerd.metadata.topic import TopicConfig  # noqa: E402
from brokerd.remoting.client import RemotingClient  # noqa: E402
from brokerd.remoting.connection import Connection  # noqa: E402
from scripts.bench import shapes  # noqa: E402

TOPIC = "BenchTopic"
QUEUES = 8
BURST = 32


def topic_of(shape: str) -> str:
    return "%RETRY%bench_cg" if shape == "retry_topic" else TOPIC


class FakeTransport:
    """Just enough of an asyncio transport for ``Connection``: counts written frames, never closes."""

    def __init__(self) -> None:
        self.writes = 0
        self.bytes = 0

    def is_closing(self) -> bool:
        return False

    def writelines(self, data: list[bytes | memoryview]) -> None:
        self.writes += 1
        self.bytes += sum(len(d) for d in data)

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.bytes += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 10911)}.get(name, default)

    def close(self) -> None:
        pass


async def start_broker(root: str, name: str, port: int, topic: str, tr: FakeTransport, *, segment: int,
                       max_index: int) -> tuple[Broker, Connection]:  # fmt: skip
    """A started in-process broker with ``topic`` (``QUEUES`` queues) and one connection writing to ``tr``."""
    cfg = BrokerConfig(store_path_root_dir=root, listen_port=port, broker_name=name, mapped_file_size_commit_log=segment,
                       max_hash_slot_num=50_000, max_index_num=max_index)  # fmt: skip
    b = Broker(cfg, RemotingClient(), namesrv_addrs=[])
    await b.start()
    b.meta.topics.update(TopicConfig(topic, QUEUES, QUEUES))
    conn = Connection(b.dispatcher)
    conn.connection_made(tr)  # type: ignore[arg-type]
    return b, conn


async def run(n_brokers: int, per_broker: int, root: str, shape: str = "json_uniq") -> dict[str, Any]:
    brokers: list[Broker] = []
    conns: list[tuple[Connection, FakeTransport]] = []
    for i in range(n_brokers):
        tr = FakeTransport()
        b, conn = await start_broker(os.path.join(root, f"b{i}"), f"bench-{i}", 20000 + 10 * i, topic_of(shape), tr,
                                     segment=32 << 20, max_index=200_000)  # fmt: skip
        brokers.append(b)
        conns.append((conn, tr))
    await asyncio.sleep(0.2)  # sleep-ok: let topic registration / start-up tasks settle before measuring
    build, per_frame, _ = shapes.builder(shape, topic_of(shape), QUEUES, 1024)
    bursts_per_broker = max(1, per_broker // (BURST * per_frame))
    blobs = [[b"".join(build(n, n, f"{n:012X}", os.urandom(8)) for n in range(k * BURST + 1, (k + 1) * BURST + 1))
              for k in range(bursts_per_broker)] for _ in range(n_brokers)]  # fmt: skip
    gc.collect()
    gc.freeze()
    burst_cpu: list[float] = []
    t_wall, t_thread, t_proc = time.perf_counter(), time.thread_time(), time.process_time()
    for k in range(bursts_per_broker):
        for i in range(n_brokers):
            c0 = time.thread_time()
            conns[i][0].data_received(blobs[i][k])
            burst_cpu.append(time.thread_time() - c0)
            await asyncio.sleep(0)  # sleep-ok: one loop iteration between reads, as with a real socket
    wall = time.perf_counter() - t_wall
    thread_cpu, proc_cpu = time.thread_time() - t_thread, time.process_time() - t_proc
    total = n_brokers * bursts_per_broker * BURST * per_frame
    answered = sum(tr.writes for _, tr in conns)
    stored = sum(b.stats.msgs_in for b in brokers)
    for b in brokers:
        await b.shutdown()
    gc.unfreeze()
    half = burst_cpu[len(burst_cpu) // 2:]
    lanes = [b.send_lane.handled for b in brokers if b.send_lane is not None]
    return {"brokers": n_brokers, "shape": shape, "messages": total, "lane_share": round(sum(lanes) / total, 3), "stored": stored, "response_writes": answered,
            "loop_cpu_us_per_msg": round(thread_cpu / total * 1e6, 2),
            "steady_loop_cpu_us_per_msg": round(sum(half) / (len(half) * BURST * per_frame) * 1e6, 2),
            "process_cpu_us_per_msg": round(proc_cpu / total * 1e6, 2),
            "cold_bursts_over_3ms": sum(1 for c in burst_cpu if c > 3e-3),
            "max_burst_cpu_ms": round(max(burst_cpu) * 1e3, 2),
            "wall_s_noisy": round(wall, 3)}  # fmt: skip


def loop_thread_instructions(out_prefix: str) -> int:
    """Ir total of thread 1 (the loop thread) from callgrind's per-thread output files."""
    files = sorted(glob.glob(out_prefix + "*-01"))
    if not files:
        raise RuntimeError(f"no callgrind thread-1 output under {out_prefix}")
    text = open(files[0]).read()
    m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    if m is None:
        raise RuntimeError("no summary line in callgrind output")
    return int(m.group(1))


def callgrind(brokers: int, per_broker: int, workdir: str, shape: str = "json_uniq") -> dict[str, Any]:
    counts = []
    for n in (per_broker, 2 * per_broker):
        prefix = os.path.join(workdir, f"cg-{brokers}-{n}")
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}.%p",
               sys.executable, __file__, "--brokers", str(brokers), "--messages", str(n), "--dir", workdir,
               "--shape", shape]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts.append(loop_thread_instructions(prefix))
    total_new = brokers * (per_broker // BURST) * BURST
    return {"brokers": brokers, "messages_per_broker": [per_broker, 2 * per_broker],
            "loop_thread_instructions": counts,
            "instructions_per_msg": round((counts[1] - counts[0]) / total_new)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--brokers", default="1,16", help="comma-separated broker counts")
    ap.add_argument("--messages", type=int, default=0, help="messages per broker (default 32000 / brokers)")
    ap.add_argument("--total", type=int, default=32_000, help="total messages when --messages is not given")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--shape", default="json_uniq", help="the send shape (scripts/bench/shapes.py)")
    ap.add_argument("--shapes", action="store_true", help="every send shape in turn, one broker each")
    args = ap.parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(open(os.devnull, "w")))
    out: dict[str, Any] = {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    runs = ([(1, sh) for sh in (*shapes.SHAPES, *shapes.capture_shapes())] if args.shapes
            else [(int(x), args.shape) for x in args.brokers.split(",")])  # fmt: skip
    for nb, shape in runs:
        per = args.messages or max(BURST, args.total // nb)
        root = tempfile.mkdtemp(prefix="send-cpu-", dir=args.dir)
        key = shape if args.shapes else f"brokers_{nb}"
        try:
            if args.callgrind:
                out[key] = callgrind(nb, min(per, 4096 if nb == 1 else 512), root, shape)
            else:
                out[key] = uvloop.run(run(nb, per, root, shape))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
