"""The broker workload, on our own asyncio remoting client (brokerd/remoting): producers that record every send
and its outcome, a pull consumer that records every delivery and commits offsets, an offset reader, an admin
loop creating topics and groups, a role poller, and the final read-back of every queue.

Producers: one sender per (producer, queue), each sending its next message only after the previous one was
acknowledged or given up (so per-queue order is checkable); a send that fails or times out is retried with the
same id (duplicates are possible and counted). Message id ``<producer>-<broker set>-q<queue>-<seq>`` (unique
across broker sets: ``message_id``) is in the ``chaosId``
property and the body.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import orjson

from brokerd.message import body_crc, decode_records
from brokerd.remoting import RemotingClient, request
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout

from .deployments import Deployment
from .history import Commit, Delivery, History, MetaOp, OffsetRead, Send, StoredMessage

NET_ERRORS = (ConnectionClosed, RemotingTimeout, OSError)
TOPIC = "ChaosTopic"
GROUP = "ChaosGroup"
RC_TOPIC = "ChaosRC"  # the real RocketMQ client's producer (realclient.py) sends here


@dataclass
class WorkloadSpec:
    producers: int = 2
    queues: int = 4
    body_size: int = 256
    send_timeout_s: float = 3.0
    consumer: bool = True
    admin_every_s: float = 1.0
    commit_every_s: float = 0.2
    roles_every_s: float = 0.25
    real_client: bool = False
    pace_s: float = 0.0  # each sender waits this long between messages (0: as fast as acknowledgements come)
    controller_clients: int | None = None  # controller workload clients (None: 6 on the controller group, 2 on HA)


class BrokerWorkload:
    def __init__(self, dep: Deployment, h: History, t0: float, spec: WorkloadSpec, seed: int) -> None:
        self.dep, self.h, self.t0, self.spec = dep, h, t0, spec
        self.rng = random.Random(seed)
        self.client = RemotingClient(connect_timeout=1.0)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.meta_seq = 0
        self.probes = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def call(self, bset: str, code: int, ext: dict[str, str], body: bytes | None = None,
                   timeout: float = 3.0) -> RemotingCommand:
        return (await self.call_at(bset, code, ext, body, timeout))[1]

    async def call_at(self, bset: str, code: int, ext: dict[str, str], body: bytes | None = None,
                      timeout: float = 3.0, into: Any = None) -> tuple[str, RemotingCommand]:
        """Send to the set's current master; returns (its address, the answer). ``into``: a record whose
        ``broker`` is set to the address before sending (so it is known also when no answer comes)."""
        addr = await self.dep.master_addr(bset)
        if addr is None:
            raise ConnectionClosed(f"{bset}: no master")
        if into is not None:
            into.broker = addr
        return addr, await self.client.invoke(addr, request(code, ext, body), timeout)

    # ------------------------------------------------------------------ metadata

    async def create(self, kind: str, name: str, bset: str, queues: int = 2) -> bool:
        op = MetaOp(kind, name, bset, self.now())
        self.h.meta.append(op)
        try:
            if kind == "topic":
                _, r = await self.call_at(bset, 17, {"topic": name, "defaultTopic": "TBW102",
                                                     "readQueueNums": str(queues), "writeQueueNums": str(queues),
                                                     "perm": "6", "topicFilterType": "SINGLE_TAG"}, into=op)
            else:
                _, r = await self.call_at(bset, 200, {}, orjson.dumps({"groupName": name}), into=op)
        except NET_ERRORS:
            return False
        op.ret, op.ok = self.now(), r.code == 0
        return op.ok

    async def setup(self) -> None:
        for bset in self.dep.broker_sets():
            wanted = [("topic", TOPIC), ("group", GROUP)] + ([("topic", RC_TOPIC)] if self.spec.real_client else [])
            for kind, name in wanted:
                ok = await self.create(kind, name, bset, self.spec.queues)
                if not ok:
                    raise RuntimeError(f"{bset}: cannot create {kind} {name}")

    async def admin_loop(self, bset: str) -> None:
        while not self.stop.is_set():
            await self._pause(self.spec.admin_every_s)
            self.meta_seq += 1
            await self.create("topic", f"ChaosMetaT{self.meta_seq}", bset)
            await self.create("group", f"ChaosMetaG{self.meta_seq}", bset)

    async def _pause(self, s: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), s)
        except TimeoutError:
            pass

    # ------------------------------------------------------------------ producers

    def _send_cmd(self, snd: Send) -> RemotingCommand:
        props = f"UNIQ_KEY\x01{snd.id}\x02chaosId\x01{snd.id}\x02producer\x01{snd.producer}\x02seq\x01{snd.seq}\x02"
        body = snd.id.encode().ljust(self.spec.body_size, b".")
        return request(310, {"a": "ChaosPG", "b": snd.topic, "c": "TBW102", "d": str(self.spec.queues),
                             "e": str(snd.queue), "f": "0", "g": str(int(time.time() * 1000)), "h": "0", "i": props,
                             "j": "0", "k": "false"}, body)

    async def sender(self, producer: str, bset: str, queue: int) -> None:
        seq = 0
        while not self.stop.is_set():
            if self.spec.pace_s > 0:
                await self._pause(self.spec.pace_s)  # sleep-ok: the configured send rate, not synchronisation
            ident = message_id(producer, bset, queue, seq)
            while not self.stop.is_set():
                snd = Send(ident, bset, TOPIC, producer, seq, queue, self.now())
                self.h.sends.append(snd)
                if await self._attempt(snd):
                    break
                await self._pause(0.05 + self.rng.random() * 0.05)  # sleep-ok: retry pacing, not synchronisation
            seq += 1

    async def _attempt(self, snd: Send) -> bool:
        try:
            addr = await self.dep.master_addr(snd.bset)
            if addr is None:
                return False
            snd.broker = addr
            r = await self.client.invoke(addr, self._send_cmd(snd), self.spec.send_timeout_s)
        except NET_ERRORS:
            return False  # outcome unknown (ret stays None)
        snd.ret, snd.code = self.now(), r.code
        if r.code == 0:
            snd.ok, snd.offset = True, int(r.ext.get("queueOffset", "-1"))
            snd.queue = int(r.ext.get("queueId", snd.queue))
        return snd.ok

    async def master_addr(self, bset: str) -> str | None:
        return await self.dep.master_addr(bset)

    async def probe_send(self, addr: str, bset: str, timeout: float) -> Send:
        """One recorded send of a new message straight to ``addr`` (the fault windows' probes: ``probe.py``)."""
        self.probes += 1
        producer, queue = f"probe{self.probes}", self.probes % self.spec.queues
        snd = Send(message_id(producer, bset, queue, 0), bset, TOPIC, producer, 0, queue, self.now(), broker=addr)
        self.h.sends.append(snd)
        try:
            r = await self.client.invoke(addr, self._send_cmd(snd), timeout)
        except NET_ERRORS:
            return snd  # outcome unknown (ret stays None)
        snd.ret, snd.code = self.now(), r.code
        if r.code == 0:
            snd.ok, snd.offset = True, int(r.ext.get("queueOffset", "-1"))
            snd.queue = int(r.ext.get("queueId", snd.queue))
        return snd

    # ------------------------------------------------------------------ consumer

    async def consumer(self, bset: str, queue: int) -> None:
        offset = await self._start_offset(bset, queue, 0)
        last_commit = 0.0
        while not self.stop.is_set():
            ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue), "queueOffset": str(offset),
                   "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "300",
                   "subscription": "*", "subVersion": "0"}
            try:
                r = await self.call(bset, 11, ext, timeout=3.0)
            except NET_ERRORS:
                await self._pause(0.1)  # sleep-ok: retry pacing
                offset = await self._start_offset(bset, queue, offset)  # as a restarted client would
                continue
            if r.code == 0:
                for m in decode_records(r.body or b""):
                    ident = m.properties.get("chaosId", "?")
                    self.h.deliveries.append(Delivery(ident, bset, TOPIC, queue, m.queue_offset, self.now()))
                    offset = m.queue_offset + 1
            elif "nextBeginOffset" in r.ext and r.code in (20, 21):
                moved = int(r.ext["nextBeginOffset"])
                if moved != offset:
                    self.h.events.append({"t": self.now(), "kind": "offset-moved", "bset": bset, "queue": queue,
                                          "from": offset, "to": moved, "code": r.code})
                offset = moved
            if self.now() - last_commit >= self.spec.commit_every_s:
                last_commit = self.now()
                await self.commit(bset, queue, offset)

    async def _start_offset(self, bset: str, queue: int, current: int) -> int:
        """The committed offset (0 when the broker has none); ``current`` when the broker does not answer."""
        off = await self.query_offset(bset, queue)
        return current if off is None else max(off, 0)

    async def commit(self, bset: str, queue: int, offset: int) -> None:
        c = Commit(GROUP, bset, TOPIC, queue, offset, self.now())
        self.h.commits.append(c)
        try:
            _, r = await self.call_at(bset, 15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue),
                                                 "commitOffset": str(offset)}, timeout=2.0, into=c)
        except NET_ERRORS:
            return
        c.ret, c.ok = self.now(), r.code == 0

    async def query_offset(self, bset: str, queue: int, *, record: bool = True) -> int | None:
        """The committed offset, -1 when the broker has none, None when it did not answer."""
        call = self.now()
        try:
            addr, r = await self.call_at(bset, 14, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue)},
                                         timeout=2.0)
        except NET_ERRORS:
            return None
        if r.code not in (0, 22):
            return None
        off = int(r.ext.get("offset", "-1")) if r.code == 0 else -1
        if record:
            self.h.offset_reads.append(OffsetRead(GROUP, bset, TOPIC, queue, off, self.now(), addr, call))
        return off

    async def offset_reader(self, bset: str) -> None:
        while not self.stop.is_set():
            await self._pause(0.5)
            for q in range(self.spec.queues):
                await self.query_offset(bset, q)

    async def role_poller(self) -> None:
        while not self.stop.is_set():
            self.h.roles.extend(await self.dep.roles(self.t0))
            await self._pause(self.spec.roles_every_s)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        coros: list[Coroutine[Any, Any, None]] = []
        for bset in self.dep.broker_sets():
            coros += [self.sender(f"p{p}", bset, q) for p in range(self.spec.producers) for q in range(self.spec.queues)]
            if self.spec.consumer:
                coros += [self.consumer(bset, q) for q in range(self.spec.queues)]
                coros.append(self.offset_reader(bset))
            if self.spec.admin_every_s > 0:
                coros.append(self.admin_loop(bset))
        coros.append(self.role_poller())
        self.tasks = [asyncio.ensure_future(c) for c in coros]

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def final_reads(self, topics: list[str]) -> None:
        """After every fault healed: read back every queue, the committed offsets, and the metadata present."""
        for bset in self.dep.broker_sets():
            for topic in topics:
                await self.read_back(bset, topic)
            for q in range(self.spec.queues):
                await self.query_offset(bset, q)
            await self.read_meta(bset)
        await self.client.close()

    async def read_back(self, bset: str, topic: str) -> None:
        for q in range(self.spec.queues):
            off = 0
            while True:
                ext = {"consumerGroup": "ChaosCheck", "topic": topic, "queueId": str(q), "queueOffset": str(off),
                       "maxMsgNums": "64", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                       "subscription": "*", "subVersion": "0"}
                r = await self.call(bset, 11, ext, timeout=10.0)
                if r.code != 0:
                    break
                nxt = self._decode_into(r.body or b"", bset, topic, q)
                off = max(nxt, int(r.ext.get("nextBeginOffset", off)))
                if nxt < 0:
                    break

    def _decode_into(self, body: bytes, bset: str, topic: str, q: int) -> int:
        try:
            msgs = list(decode_records(body))
        except Exception as e:  # noqa: BLE001 - a record that does not decode is what we look for
            self.h.corrupt.append(f"{bset}/{topic}/{q}: undecodable batch: {e!r}")
            return -1
        nxt = -1
        for m in msgs:
            if m.body_crc != body_crc(m.body):
                self.h.corrupt.append(f"{bset}/{topic}/{q}@{m.queue_offset}: body CRC mismatch")
            p = m.properties
            ident = p.get("chaosId") or f"rc-{p.get('seq', '?')}"
            self.h.stored.append(StoredMessage(ident, bset, topic, q, m.queue_offset, p.get("producer", "rc"),
                                               int(p.get("seq", "-1"))))
            if m.queue_id != q:
                self.h.corrupt.append(f"{bset}/{topic}/{q}@{m.queue_offset}: record of queue {m.queue_id}")
            nxt = m.queue_offset + 1
        return nxt

    async def read_meta(self, bset: str) -> None:
        r = await self.call(bset, 21, {}, timeout=5.0)
        topics = list(orjson.loads(r.body or b"{}").get("topicConfigTable", {})) if r.code == 0 else []
        r = await self.call(bset, 201, {}, timeout=5.0)
        groups = list(orjson.loads(r.body or b"{}").get("subscriptionGroupTable", {})) if r.code == 0 else []
        self.h.meta_present.setdefault("topic", []).extend(topics)
        self.h.meta_present.setdefault("group", []).extend(groups)


def message_id(producer: str, bset: str, queue: int, seq: int) -> str:
    """Unique per message of the run: every broker set has its own senders with the same producer names."""
    return f"{producer}-{bset}-q{queue}-{seq}"


def summarize(h: History) -> dict[str, Any]:
    acked = sum(1 for s in h.sends if s.ok)
    return {"send_attempts": len(h.sends), "acknowledged": acked, "deliveries": len(h.deliveries),
            "commits": len(h.commits), "offset_reads": len(h.offset_reads), "meta_ops": len(h.meta),
            "stored": len(h.stored), "role_samples": len(h.roles), "controller_ops": len(h.controller_ops),
            "offset_moves": sum(1 for e in h.events if e.get("kind") == "offset-moved")}
