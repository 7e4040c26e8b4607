"""Linearizability of the controller per broker set, on three real processes whose leader is killed and restarted.

Each broker set's (syncStateSet, syncStateSetEpoch) is a compare-and-set register: ALTER_SYNC_STATE_SET is the
CAS (expected epoch -> new set), GET_REPLICA_INFO the read (sent to random members: leader reads and
follower reads). Checked with `controller.linearizability` (Wing-Gong), one partition per broker set.
"""

from __future__ import annotations

import asyncio
import pathlib
import random
import time
from typing import Any

import orjson
import pytest

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError
from controller.linearizability import UNKNOWN, Operation, SyncStateSetModel, check
from tests.integration.controller.cluster import ControllerProcs

SETS = ["ls0", "ls1", "ls2", "ls3"]
CHOICES = [(1,), (1, 2), (1, 3), (1, 2, 3)]


async def _heartbeats(addrs: list[str], stop: asyncio.Event) -> None:
    client = RemotingClient(connect_timeout=0.3)
    try:
        while not stop.is_set():
            for addr in addrs:
                for name in SETS:
                    for bid in (1, 2, 3):
                        cmd = request(Q.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": name, "brokerId": str(bid),
                                                           "brokerAddr": f"127.0.0.1:{bid}"}, oneway=True)
                        try:
                            await client.invoke_oneway(addr, cmd)
                        except (ConnectionClosed, OSError):
                            pass
            await asyncio.sleep(0.1)  # sleep-ok: the heartbeat period
    finally:
        await client.close()


async def _setup(c: ControllerClient) -> None:
    for name in SETS:
        for bid in (1, 2, 3):
            r = await c.leader_call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c", "brokerName": name,
                                                                   "appliedBrokerId": str(bid),
                                                                   "registerCheckCode": f"127.0.0.1:{bid};1"})
            assert r.code == RC.SUCCESS, r.remark
        r = await c.leader_call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c", "brokerName": name, "brokerId": "1"})
        assert r.code == RC.SUCCESS and r.ext["syncStateSetEpoch"] == "1", r.remark


async def _client(cid: int, procs: ControllerProcs, history: list[Operation], stop: asyncio.Event, t0: float) -> None:
    rng = random.Random(cid)
    c = ControllerClient(procs.addrs, timeout=1.0)
    last_epoch = {n: 1 for n in SETS}
    try:
        while not stop.is_set():
            name = rng.choice(SETS)
            call = time.monotonic() - t0
            if rng.random() < 0.5:
                addr = rng.choice(procs.addrs)
                try:
                    r = await c.call(addr, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": name})
                except (ConnectionClosed, RemotingTimeout, OSError):
                    continue  # a read with unknown outcome carries no information
                if r.code != RC.SUCCESS:
                    continue
                body = orjson.loads(r.body or b"{}")
                out: Any = (tuple(sorted(body["syncStateSet"])), int(body["syncStateSetEpoch"]))
                last_epoch[name] = out[1]
                history.append(Operation(cid, name, "read", None, out, call, time.monotonic() - t0))
                continue
            expected = last_epoch[name] if rng.random() < 0.8 else last_epoch[name] + rng.choice((-1, 1))
            new = rng.choice(CHOICES)
            ext = {"brokerName": name, "masterBrokerId": "1", "masterEpoch": "1"}
            body_b = orjson.dumps({"syncStateSet": list(new), "syncStateSetEpoch": expected})
            ret: float | None
            try:  # exactly one attempt: a re-sent CAS would blur which attempt took effect
                addr = c.leader or await c.find_leader(2.0)
                r = await c.call(addr, Q.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body_b)
                code = r.code
                if code == RC.CONTROLLER_NOT_LEADER:
                    c.leader = r.ext.get("controllerLeaderAddress")
                    if r.ext.get("outcomeUnknown") != "true":
                        continue  # refused before it was appended (or overwritten): definitely not applied
            except (ConnectionClosed, RemotingTimeout, ControllerError, OSError):
                c.leader = None
                code = -1
            ret = time.monotonic() - t0
            if code == RC.SUCCESS:
                outcome: Any = "ok"
            elif code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH:
                outcome = "fenced"
            elif code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED:
                outcome = "same"
            elif code == RC.CONTROLLER_BROKER_NOT_ALIVE:
                continue  # decided from soft state with no event: definitely not applied
            else:  # not leader / timeout / connection lost: may or may not have been applied
                outcome, ret = UNKNOWN, None
            history.append(Operation(cid, name, "cas", (expected, new), outcome, call, ret))
    finally:
        await c.close()


async def test_linearizable_per_broker_set_across_leader_kill_and_restart(tmp_path: pathlib.Path) -> None:
    await _run(tmp_path, rounds=2)


@pytest.mark.slow
async def test_linearizable_soak_many_leader_kills(tmp_path: pathlib.Path) -> None:
    await _run(tmp_path, rounds=10)


async def _run(tmp_path: pathlib.Path, rounds: int) -> None:
    procs = ControllerProcs(tmp_path, extra={"brokerHeartbeatTimeoutMs": "60000"})
    procs.start_all()
    stop_hb, stop = asyncio.Event(), asyncio.Event()
    hb = asyncio.ensure_future(_heartbeats(procs.addrs, stop_hb))
    c = ControllerClient(procs.addrs, timeout=2.0)
    try:
        await procs.leader(c)
        await asyncio.sleep(0.3)  # sleep-ok: first heartbeats reach every member
        await _setup(c)
        history: list[Operation] = []
        t0 = time.monotonic()
        clients = [asyncio.ensure_future(_client(i, procs, history, stop, t0)) for i in range(8)]
        for _ in range(rounds):  # each round: kill the leader under load, then restart it
            await asyncio.sleep(1.5)  # sleep-ok: let the clients run against this configuration
            victim = await procs.leader(c)
            procs.kill(victim)
            await procs.leader(c, exclude=victim)
            await asyncio.sleep(1.5)  # sleep-ok: load on the new leader with one member down
            procs.start(victim)
        await asyncio.sleep(1.5)  # sleep-ok: load after the restarted member rejoined
        stop.set()
        await asyncio.gather(*clients)
        cas_ok = [op for op in history if op.kind == "cas" and op.output == "ok"]
        assert len(history) > 300 and len(cas_ok) > 20, f"too little history: {len(history)} ops, {len(cas_ok)} cas"
        unknown = sum(1 for op in history if op.ret is None)
        print(f"history: {len(history)} ops, {len(cas_ok)} successful CAS, {unknown} with unknown outcome")
        result = check(history, model=SyncStateSetModel())
        assert result.ok is True, result.describe()
        # the check is not vacuous: one stale read after an acknowledged CAS makes the history illegal
        first = min(cas_ok, key=lambda op: op.ret or 0.0)
        assert first.ret is not None
        stale = Operation("stale", first.key, "read", None, ((1,), 1), first.ret + 1e-6, first.ret + 2e-6)
        assert check(history + [stale], model=SyncStateSetModel()).ok is False
    finally:
        stop_hb.set()
        await hb
        await c.close()
        procs.stop_all()
