"""The failover benchmark's producer (its own process): sends continuously to every broker set of a topic through
the name servers' route, at a fixed total rate, and logs every answer.

Each set has a few workers with one send in flight each (3 s timeout, like a RocketMQ client's sendMsgTimeout).
After any failed send a worker forgets the set's master and polls the route of every name server until one names
a master (another one than the failed broker, or the same one again after a second). Every answer is one JSON line
``[t_send, t_answer, set, addr, code, queue_id, queue_offset, uniq_key]`` (monotonic seconds; code -1 = timeout,
-2 = connection failed) in ``--out``. SIGTERM stops it and flushes the file.

Usage: python -m scripts.bench.ha_load --namesrv A;B;C --topic T --sets broker-a,broker-b --out acks.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from typing import IO

import orjson
import uvloop

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.connection import RemotingTimeout
from scripts.bench.ha_common import all_masters, send_command


class Load:
    def __init__(self, a: argparse.Namespace, out: IO[bytes]) -> None:
        self.namesrvs: list[str] = a.namesrv.split(";")
        self.topic: str = a.topic
        self.sets: list[str] = a.sets.split(",")
        self.queues: int = a.queues
        self.body = b"h" * a.body
        self.workers: int = a.workers
        self.interval = a.workers * len(self.sets) / a.rate  # seconds between two sends of one worker
        self.timeout: float = a.timeout
        self.out = out
        self.cli = RemotingClient(connect_timeout=1.0)
        self.master: dict[str, str | None] = dict.fromkeys(self.sets)
        self.stopping = asyncio.Event()
        self.prefix = f"{os.getpid():x}-{int(time.time()) & 0xFFFFFF:x}"

    async def resolve(self, s: str, bad: str | None) -> str | None:
        since = time.monotonic()
        while not self.stopping.is_set():
            views = await all_masters(self.cli, self.namesrvs, self.topic)
            named = [v[s] for v in views if s in v]
            fresh = [a for a in named if a != bad]
            if fresh or (named and time.monotonic() - since > 1.0):
                addr = (fresh or named)[0]
                self.master[s] = addr
                return addr
            await asyncio.sleep(0.02)  # sleep-ok: polling the route during a failover
        return None

    async def send_one(self, s: str, addr: str, seq: int) -> int:
        qid = seq % self.queues
        uniq = f"{s}-{self.prefix}-{seq}"
        cmd = send_command(self.topic, qid, self.queues, uniq, self.body)
        t0 = time.monotonic()
        qoff = -1
        try:
            r = await self.cli.invoke(addr, cmd, self.timeout)
            code = r.code
            if code == 0:
                qoff = int(r.ext.get("queueOffset", "-1"))
        except RemotingTimeout:
            code = -1
        except Exception:  # noqa: BLE001 - connection refused / closed: the broker is gone
            code = -2
        self.out.write(orjson.dumps([round(t0, 4), round(time.monotonic(), 4), s, addr, code, qid, qoff, uniq]))
        self.out.write(b"\n")
        return code

    async def worker(self, s: str, w: int) -> None:
        seq = w
        next_t = time.monotonic()
        while not self.stopping.is_set():
            addr = self.master[s] or await self.resolve(s, None)
            if addr is None:
                return
            code = await self.send_one(s, addr, seq)
            seq += self.workers
            if code != 0:
                self.master[s] = None
                await self.resolve(s, addr)
            next_t = max(next_t + self.interval, time.monotonic() - self.interval)
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))  # sleep-ok: pacing to the requested rate

    async def flusher(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(0.5)  # sleep-ok: flush period of the log
            self.out.flush()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stopping.set)
        loop.add_signal_handler(signal.SIGINT, self.stopping.set)
        tasks = [asyncio.create_task(self.worker(s, w)) for s in self.sets for w in range(self.workers)]
        tasks.append(asyncio.create_task(self.flusher()))
        await self.stopping.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.out.flush()
        await self.cli.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", type=float, default=1000, help="sends per second, all sets together")
    ap.add_argument("--workers", type=int, default=4, help="concurrent senders per set")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=3.0)
    a = ap.parse_args()
    uvloop.install()
    with open(a.out, "wb", buffering=1 << 16) as out:
        asyncio.run(Load(a, out).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
