"""The controller workload: clients running compare-and-set on each broker set's sync state set
(CONTROLLER_ALTER_SYNC_STATE_SET, the CAS) and consistent reads (CONTROLLER_GET_REPLICA_INFO, to random
members: leader and follower reads), after APPLY_BROKER_ID + ELECT_MASTER set the sets up; heartbeats keep
the replicas alive. The history is checked with ``controller/linearizability.py`` (``SyncStateSetModel``), one
partition per broker set, as in tests/integration/controller/test_linearizability.py.

An operation whose outcome is unknown (timeout, connection lost, 2007 with ``outcomeUnknown``, or the client
could not tell) gets ``ret=None``; one that definitely did not happen is dropped.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import orjson

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError
from controller.linearizability import UNKNOWN, Operation, SyncStateSetModel

from .deployments import ControllerGroup

SETS = ["ls0", "ls1", "ls2", "ls3"]
CHOICES = [(1,), (1, 2), (1, 3), (1, 2, 3)]
ERRORS = (ConnectionClosed, RemotingTimeout, ControllerError, OSError)
__all__ = ["ControllerWorkload", "SyncStateSetModel"]  # the model lives in controller/linearizability.py


class ControllerWorkload:
    def __init__(self, dep: ControllerGroup, ops: list[Operation], t0: float, seed: int, clients: int = 6,
                 pace_s: float = 0.0) -> None:
        self.dep, self.ops, self.t0, self.seed, self.nclients = dep, ops, t0, seed, clients
        self.pace_s = pace_s  # each client's pause between operations (alongside brokers: leave them the CPU)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def heartbeats(self) -> None:
        client = RemotingClient(connect_timeout=0.3)
        try:
            while not self.stop.is_set():
                for addr in self.dep.controller_addrs():
                    for name in SETS:
                        for bid in (1, 2, 3):
                            cmd = request(Q.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": name,
                                                               "brokerId": str(bid), "brokerAddr": f"127.0.0.1:{bid}"},
                                          oneway=True)
                            try:
                                await asyncio.wait_for(client.invoke_oneway(addr, cmd), 0.5)
                            except (ConnectionClosed, OSError, TimeoutError):
                                pass
                try:
                    await asyncio.wait_for(self.stop.wait(), 0.1)
                except TimeoutError:
                    pass
        finally:
            await client.close()

    async def setup(self, deadline_s: float = 30.0) -> None:
        c = ControllerClient(self.dep.controller_addrs(), timeout=2.0)
        try:
            for name in SETS:
                for bid in (1, 2, 3):
                    r = await c.leader_call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c", "brokerName": name,
                                                                           "appliedBrokerId": str(bid),
                                                                           "registerCheckCode": f"127.0.0.1:{bid};1"},
                                            deadline_s=deadline_s, idempotent=True)
                    if r.code != RC.SUCCESS:
                        raise RuntimeError(f"apply broker id {name}/{bid}: {r.code} {r.remark}")
                await self._elect_first(c, name, time.monotonic() + deadline_s)
        finally:
            await c.close()

    @staticmethod
    async def _elect_first(c: ControllerClient, name: str, end: float) -> None:
        """Elect broker 1 once the heartbeats made it alive on the leader (retried until ``end``)."""
        while True:
            r = await c.leader_call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c", "brokerName": name,
                                                                "brokerId": "1"}, deadline_s=max(0.5, end - time.monotonic()))
            if r.code == RC.SUCCESS and r.ext.get("syncStateSetEpoch") == "1":
                return
            if time.monotonic() >= end:
                raise RuntimeError(f"elect {name}: {r.code} {r.remark} {r.ext}")
            await asyncio.sleep(0.05)  # sleep-ok: polling until the first heartbeats reached the leader

    async def client(self, cid: int) -> None:
        rng = random.Random(self.seed * 1000 + cid)
        c = ControllerClient(self.dep.controller_addrs(), timeout=1.0)
        last_epoch = {n: 1 for n in SETS}
        try:
            while not self.stop.is_set():
                if self.pace_s > 0:
                    try:
                        await asyncio.wait_for(self.stop.wait(), self.pace_s)
                    except TimeoutError:
                        pass
                name = rng.choice(SETS)
                if rng.random() < 0.5:
                    await self._read(c, cid, name, rng, last_epoch)
                else:
                    await self._cas(c, cid, name, rng, last_epoch)
        finally:
            await c.close()

    async def _read(self, c: ControllerClient, cid: int, name: str, rng: random.Random,
                    last_epoch: dict[str, int]) -> None:
        call = self.now()
        try:
            r = await c.call(rng.choice(self.dep.controller_addrs()), Q.CONTROLLER_GET_REPLICA_INFO,
                             {"brokerName": name})
        except ERRORS:
            await asyncio.sleep(0.01)  # sleep-ok: pacing after a failed read (unknown reads carry no information)
            return
        if r.code != RC.SUCCESS:
            return
        body = orjson.loads(r.body or b"{}")
        out: Any = (tuple(sorted(body["syncStateSet"])), int(body["syncStateSetEpoch"]))
        last_epoch[name] = out[1]
        self.ops.append(Operation(cid, name, "read", None, out, call, self.now()))

    async def _cas(self, c: ControllerClient, cid: int, name: str, rng: random.Random,
                   last_epoch: dict[str, int]) -> None:
        expected = last_epoch[name] if rng.random() < 0.8 else last_epoch[name] + rng.choice((-1, 1))
        new = rng.choice(CHOICES)
        ext = {"brokerName": name, "masterBrokerId": "1", "masterEpoch": "1"}
        body = orjson.dumps({"syncStateSet": list(new), "syncStateSetEpoch": expected})
        call = self.now()
        try:  # exactly one attempt: a re-sent CAS would blur which attempt took effect
            addr = c.leader or await c.find_leader(2.0)
            r = await c.call(self.dep.client_addr_of(addr), Q.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body)
            code = r.code
            if code == RC.CONTROLLER_NOT_LEADER:
                c.leader = r.ext.get("controllerLeaderAddress") or None
                if r.ext.get("outcomeUnknown") != "true":
                    return  # refused before it was appended (or overwritten): definitely not applied
        except ERRORS:
            c.leader = None
            code = -1
        outcome: Any = {RC.SUCCESS: "ok", RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: "fenced",
                        RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: "same"}.get(code, UNKNOWN)
        if code == RC.CONTROLLER_BROKER_NOT_ALIVE:
            return  # decided from soft state with no event: definitely not applied
        ret = None if outcome is UNKNOWN else self.now()
        self.ops.append(Operation(cid, name, "cas", (expected, new), outcome, call, ret))

    async def start(self) -> None:
        """Heartbeats, the broker sets' setup, then the clients."""
        self.tasks = [asyncio.ensure_future(self.heartbeats())]
        await self.setup()
        self.tasks += [asyncio.ensure_future(self.client(i)) for i in range(self.nclients)]

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
