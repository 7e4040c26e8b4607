"""Failover under load (part of scripts/bench/ha.py): a 2-container cross deployment (tests/ha_cluster.py), the
producer of scripts/bench/ha_load.py sending to both sets, and rounds of: signal the container that masters
broker-a (SIGKILL, or SIGSTOP = a hung master), time each set it mastered until a master found through the name
servers answers a send SUCCESS, then bring the container back (restart / SIGCONT) and wait until every set has its
full sync state set again with slaves caught up. At the end, every acknowledged send is read back."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from brokerd.remoting.client import RemotingClient
from controller.client import ControllerClient
from scripts.bench.ha_acks import RoundMark, analyse_rounds, load_answers, verify_acked
from scripts.bench.ha_common import (
    all_masters,
    create_topic,
    ms_since,
    pct,
    pid_of,
    route_replicas,
    runtime,
    send_command,
    stop_cluster,
    wait_until,
)
from tests.ha_cluster import HACluster
from tests.support import ROOT

TOPIC = "HABench"
QUEUES = 4
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


class FailoverRun:
    def __init__(self, cl: HACluster, kind: str, replicas: int) -> None:
        self.cl = cl
        self.kind = kind
        self.replicas = replicas
        self.cli = RemotingClient(connect_timeout=0.5)
        self.ctl = ControllerClient(cl.ctl.addrs)
        self.marks: list[RoundMark] = []
        self.probe_acks: list[tuple[str, int, int, str]] = []
        self.rounds: list[dict[str, Any]] = []
        self.seq = 0

    async def close(self) -> None:
        await self.ctl.close()
        await self.cli.close()

    # ------------------------------------------------------------------ observation

    async def masters(self, topic: str = TOPIC) -> dict[str, str]:
        """Every set's master, when all three name servers agree on it (else {})."""
        views = await all_masters(self.cli, self.cl.namesrv_addrs, topic)
        if any(v != views[0] for v in views) or set(views[0]) != set(self.cl.sets):
            return {}
        return views[0]

    async def healthy(self) -> dict[str, str] | None:
        """Every set: the name servers agree with the controller on its master, the sync state set holds every
        replica alive, and each slave holds what the master held a moment before."""
        try:
            data = await self.ctl.sync_state_data(self.cl.sets)
        except Exception:  # noqa: BLE001 - leader change in the controller group: ask again
            return None
        masters = await self.masters()
        for s in self.cl.sets:
            info = data.get(s, {})
            live = [r for r in info.get("inSyncReplicas", []) if r.get("alive")]
            if len(live) < self.replicas or masters.get(s) != info.get("masterAddress"):
                return None
            m = await runtime(self.cli, masters[s])
            if m is None or m["brokerRole"] != "SYNC_MASTER":
                return None
            for sl in self.replica_addrs(s):
                if sl == masters[s]:
                    continue
                r = await runtime(self.cli, sl)
                if r is None or r["brokerRole"] != "SLAVE" or int(r["commitLogMaxOffset"]) < int(m["commitLogMaxOffset"]):
                    return None
        return masters

    def replica_addrs(self, s: str) -> list[str]:
        return [self.cl.broker_addr(name, c) for (name, c) in self.cl.broker_ports if name == s]

    # ------------------------------------------------------------------ one round

    async def probe(self, s: str, old: str, t0: float) -> dict[str, Any]:
        """Poll the route of all three name servers; send to a master other than `old`; SUCCESS stops the clock."""
        route_ms: float | None = None
        tries = 0
        while time.monotonic() - t0 < 60:
            views = await all_masters(self.cli, self.cl.namesrv_addrs, TOPIC)
            cands = [v[s] for v in views if v.get(s) not in (None, old)]
            if cands:
                route_ms = route_ms if route_ms is not None else ms_since(t0)
                self.seq += 1
                qid, uniq = self.seq % QUEUES, f"probe-{self.kind}-{s}-{self.seq}"
                tries += 1
                try:
                    r = await self.cli.invoke(cands[0], send_command(TOPIC, qid, QUEUES, uniq, b"probe"), 1.0)
                except Exception:  # noqa: BLE001 - not up yet
                    r = None
                if r is not None and r.code == 0:
                    self.probe_acks.append((s, qid, int(r.ext["queueOffset"]), uniq))
                    return {"set": s, "old": old, "new": cands[0], "route_ms": route_ms, "accept_ms": ms_since(t0),
                            "sends_tried": tries}  # fmt: skip
            await asyncio.sleep(0.01)  # sleep-ok: polling the route
        return {"set": s, "old": old, "stuck": True, "route_ms": route_ms, "sends_tried": tries}

    async def deposed(self, s: str, old: str, t_cont: float) -> dict[str, Any]:
        """After SIGCONT: send straight to the old master until it says it is a slave; count any SUCCESS."""
        ok = tried = 0
        codes: Counter[str] = Counter()
        slave_ms: float | None = None
        while time.monotonic() - t_cont < 30 and slave_ms is None:
            self.seq += 1
            qid, uniq = self.seq % QUEUES, f"deposed-{s}-{self.seq}"
            tried += 1
            try:
                r = await self.cli.invoke(old, send_command(TOPIC, qid, QUEUES, uniq, b"deposed"), 2.0)
                codes[str(r.code)] += 1
                if r.code == 0:
                    ok += 1
                    self.probe_acks.append((s, qid, int(r.ext["queueOffset"]), uniq))
            except Exception as e:  # noqa: BLE001 - still resuming
                codes[type(e).__name__] += 1
            rt = await runtime(self.cli, old)
            if rt is not None and rt["brokerRole"] == "SLAVE":
                slave_ms = ms_since(t_cont)
            await asyncio.sleep(0.02)  # sleep-ok: polling the old master
        return {"set": s, "sends_to_deposed": tried, "succeeded_on_deposed": ok, "cont_to_slave_ms": slave_ms,
                "answers": dict(codes)}

    async def one_round(self, n: int, hold_s: float) -> dict[str, Any]:
        masters = await wait_until(self.healthy, 120, "a healthy deployment before the round")
        victim = self.cl.container_of(masters[self.cl.sets[0]])
        sets = [s for s in self.cl.sets if self.cl.container_of(masters[s]) == victim]
        pid = pid_of(self.cl, victim)
        t0 = time.monotonic()
        os.kill(pid, SIGNALS[self.kind])
        mark = RoundMark(self.kind, victim, t0, dict(masters), sets)
        if self.marks:
            self.marks[-1].t_end = t0
        self.marks.append(mark)
        res: dict[str, Any] = {"round": n, "victim": victim,
                               "sets": await asyncio.gather(*(self.probe(s, masters[s], t0) for s in sets))}
        await asyncio.sleep(hold_s)  # sleep-ok: the hung master stays hung a little longer
        mark.t_resume = time.monotonic()
        if self.kind == "stop":
            os.kill(pid, signal.SIGCONT)
            res["deposed"] = await asyncio.gather(*(self.deposed(s, masters[s], mark.t_resume) for s in sets))
        else:
            self.cl.daemons[victim].stop()  # reaps the killed process
            self.cl.start_container(victim)
        await wait_until(self.healthy, 120, "the container rejoined with its slaves caught up", 0.05)
        res["rejoin_ms"] = ms_since(mark.t_resume)
        return res


# ---------------------------------------------------------------------- the whole run


def start_load(cl: HACluster, out: pathlib.Path, rate: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "scripts.bench.ha_load", "--namesrv", cl.namesrv, "--topic", TOPIC,
           "--sets", ",".join(cl.sets), "--out", str(out), "--rate", str(rate), "--queues", str(QUEUES)]  # fmt: skip
    with open(out.with_suffix(".err"), "wb") as err:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)


def stop_load(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


async def prepare(run: FailoverRun) -> None:
    masters = await wait_until(lambda: run.masters("TBW102"), 60, "masters in the route")
    for s in run.cl.sets:
        await create_topic(run.cli, masters[s], TOPIC, QUEUES)

    async def routed() -> bool:  # the slaves have the topic too (metadata sync) and registered it
        n = await route_replicas(run.cli, run.cl.namesrv_addrs[0], TOPIC)
        return len(n) == len(run.cl.sets) and all(v >= run.replicas for v in n.values())

    await wait_until(routed, 60, "the topic on every replica", 0.1)


async def run_rounds(run: FailoverRun, rounds: int, hold_s: float, settle_s: float) -> None:
    for n in range(rounds):
        await asyncio.sleep(settle_s)  # sleep-ok: steady load between rounds
        r = await run.one_round(n, hold_s)
        run.rounds.append(r)
        print(f"[ha] {run.kind} round {n}: " + ", ".join(
            f"{x['set']} {x.get('accept_ms')} ms" for x in r["sets"]) + f", rejoin {r['rejoin_ms']} ms",
            file=sys.stderr, flush=True)  # fmt: skip


async def final_check(run: FailoverRun, acked: list[tuple[str, int, int, str]]) -> dict[str, Any]:
    masters = await wait_until(run.healthy, 120, "a healthy deployment after the load")
    slaves = {s: [a for a in run.replica_addrs(s) if a != masters[s]] for s in run.cl.sets}
    return await verify_acked(run.cli, masters, slaves, TOPIC, QUEUES, acked)


def failover(tmp: pathlib.Path, kind: str, rounds: int, rate: float, hold_s: float, settle_s: float) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    cl = HACluster(tmp, containers=2, replicas=2)
    load: subprocess.Popen[bytes] | None = None
    acks = tmp / "acks.jsonl"
    try:
        cl.start()

        async def body() -> dict[str, Any]:
            nonlocal load
            run = FailoverRun(cl, kind, 2)
            try:
                await prepare(run)
                load = start_load(cl, acks, rate)
                await asyncio.sleep(2.0)  # sleep-ok: the producer up to speed
                await run_rounds(run, rounds, hold_s, settle_s)
                await asyncio.sleep(settle_s)  # sleep-ok: load after the last round
                if run.marks:
                    run.marks[-1].t_end = time.monotonic()
                stop_load(load)
                answers = load_answers(acks)
                acked = [(a.set, a.qid, a.qoff, a.uniq) for a in answers if a.code == 0] + run.probe_acks
                check = await final_check(run, acked)
                return summarise(kind, run, answers, check)
            finally:
                await run.close()

        return asyncio.run(body())
    finally:
        if load is not None:
            stop_load(load)
        stop_cluster(cl)


def summarise(kind: str, run: FailoverRun, answers: list[Any], check: dict[str, Any]) -> dict[str, Any]:
    per_set: dict[str, list[float]] = {}
    route: list[float] = []
    stuck = 0
    for r in run.rounds:
        for x in r["sets"]:
            if x.get("stuck"):
                stuck += 1
                continue
            per_set.setdefault(x["set"], []).append(x["accept_ms"])
            route.append(x["route_ms"])
    view = analyse_rounds(answers, run.marks)
    out: dict[str, Any] = {
        "kind": {"kill": "SIGKILL of the whole container", "stop": "SIGSTOP of the whole container (hung)"}[kind],
        "rounds": len(run.rounds), "signals_sent": len(run.marks), "failovers_measured": sum(map(len, per_set.values())),
        "stuck_failovers": stuck,
        "kill_to_accepted_send_ms": pct(v for vs in per_set.values() for v in vs),
        "per_set_ms": {s: pct(v) for s, v in sorted(per_set.items())},
        "kill_to_new_master_in_route_ms": pct(route),
        "rejoin_ms": pct(r["rejoin_ms"] for r in run.rounds),
        "producer_longest_stall_ms": {"sets_mastered_by_victim": pct(view.gaps_victim_ms),
                                      "other_sets": pct(view.gaps_other_ms)},
        "producer_answers": len(answers), "producer_errors_by_code": dict(view.errors),
        "acked_in_the_second_before_signals": view.acked_last_second_before_kill,
        "acked_after_deposed": deposed_acks(view.acked_after_deposed, check.pop("lost_uniq")),
        "ack_check": check, "raw_rounds": run.rounds,
    }  # fmt: skip
    if kind == "stop":
        dep = [d for r in run.rounds for d in r.get("deposed", [])]
        codes: Counter[str] = Counter()
        for d in dep:
            codes.update(d["answers"])
        out["deposed_probe"] = {"sends": sum(d["sends_to_deposed"] for d in dep), "answers": dict(codes),
                                "succeeded": sum(d["succeeded_on_deposed"] for d in dep),
                                "cont_to_slave_ms": pct(d["cont_to_slave_ms"] for d in dep
                                                        if d["cont_to_slave_ms"] is not None)}  # fmt: skip
    return out


def deposed_acks(acks: list[dict[str, Any]], lost: set[str]) -> dict[str, Any]:
    """SUCCESS answers of a deposed master received after it resumed: a send issued before the signal whose
    acknowledgement was held up by the stop (safe when it is on the new master), or a send issued after it
    resumed (a write accepted by a deposed master: a violation)."""
    before = [a for a in acks if a["sent_before_signal"]]
    after = [a for a in acks if not a["sent_before_signal"]]
    return {"count": len(acks), "sends_issued_before_the_signal": len(before),
            "of_which_on_the_new_master": sum(1 for a in before if a["uniq"] not in lost),
            "sends_issued_after_resume": len(after), "of_which_lost": sum(1 for a in after if a["uniq"] in lost),
            "examples": (after + before)[:6]}  # fmt: skip
