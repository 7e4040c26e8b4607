"""The nemesis: a seeded fault schedule, executed from outside the processes.

A ``Fault`` is (start time, kind, target, duration). Faults run one after another: apply at ``at`` (or as soon
as the previous one has healed), hold for ``duration``, heal, then wait (with a deadline) until the deployment
is ready again. Targets are resolved when the fault starts: ``leader`` (the controller leader),
``container`` / ``controller`` (a random process of that kind), or a process name (``c0``, ``n1``). The
resolved target is recorded, so a replay (same schedule) hits the same role.

Kinds (docs/chaos.md has the details):

=============  ===========================================================================================
kill           SIGKILL, restart after ``duration``
pause          SIGSTOP, SIGCONT after ``duration`` (a hung process)
powerloss      SIGKILL, then the files rebuilt to their last durable state (``powerloss.py``), restart
isolate        the target cannot exchange packets with any other process (the harness still reaches it;
               for a deployment of one process: the harness cannot reach it)
split          majority/minority: the target plus one random peer fewer than half on one side
oneway         packets from the target to every other process are dropped (replies to it still flow)
slow           100 ± 50 ms delay and 5 % loss on every link of the target
delay          100 ± 50 ms delay (each packet, both directions) on every link of the target, no loss (netns:
               NFQUEUE and a delayer process in the target's namespace, ``delayer.py``; proxy: the proxies)
loss           5 % packet loss (both ways) on every link of the target, no delay
cut-ctl        a container cut from the controllers only (its brokers still reach each other's sets)
cut-peers      a container cut from the other containers only: its masters from their slaves and its
               slaves from their masters (the controllers and the harness still reach everything)
diskfull       the target's store filesystem is filled (a tmpfs of ``tmpfs_mb``), freed after ``duration``
=============  ===========================================================================================

Each executed fault records when it was in force (``applied`` .. ``healing``), the directed process pairs it
cut (``cut``) and the deployment's replica state when it was applied (``state``): the minority and
unavailability checks read them.

With a ``probe`` (``probe.py``; runs with a broker workload), a fault whose checks need traffic in its window (a
cut with a minority side, a delay) gets probe sends driven while it holds; a window that did not get them is healed
and run again (``WINDOW_TRIES`` in all; then the fault is reported skipped, which fails a checked run). And a fault
starts only once every broker set acknowledged a send after the previous fault's recovery (with a deadline), so a
fault is never charged with the next one's unavailability.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from .deployments import Deployment, SingleContainer
from .history import Crash, FaultEvent, History
from .net import CLIENT, Blocker, Unsupported, partition
from .probe import WindowProbe

KINDS = ("kill", "pause", "powerloss", "isolate", "split", "oneway", "slow", "delay", "loss", "cut-ctl", "cut-peers",
         "diskfull")
NET_KINDS = ("isolate", "split", "oneway", "slow", "delay", "loss", "cut-ctl", "cut-peers")
DELAY_MS, JITTER_MS, LOSS = 100.0, 50.0, 0.05
WINDOW_TRIES = 3  # a fault window without the traffic its checks need is run again, this many times in all
CONTAINER_KINDS = ("cut-ctl", "cut-peers")  # a generated target that is no container becomes "container"


@dataclass
class Fault:
    at: float
    kind: str
    target: str
    duration: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def generate(seed: int, kinds: list[str], cycles: int, *, start: float = 2.0, gap: tuple[float, float] = (1.0, 2.0),
             hold: tuple[float, float] = (0.5, 2.0), targets: list[str] | None = None) -> list[Fault]:
    """``cycles`` faults drawn from ``kinds`` (round robin, shuffled per round) with seeded gaps and durations."""
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown fault kind {k!r}; known: {', '.join(KINDS)}")
    rng = random.Random(seed)
    out: list[Fault] = []
    order: list[str] = []
    t = start
    for _ in range(cycles):
        if not order:
            order = list(kinds)
            rng.shuffle(order)
        kind = order.pop()
        d = round(rng.uniform(*hold), 2)
        target = rng.choice(targets or ["leader"])
        if kind in CONTAINER_KINDS and target in ("leader", "controller", "any"):
            target = "container"
        out.append(Fault(round(t, 2), kind, target, d))
        t += d + rng.uniform(*gap) + 1.0  # + time to recover
    return out


class Nemesis:
    def __init__(self, dep: Deployment, h: History, t0: float, seed: int, log: Any = print) -> None:
        self.dep, self.h, self.t0 = dep, h, t0
        self.rng = random.Random(seed ^ 0x5EED)
        self.log = log
        self.skipped: list[dict[str, Any]] = []
        self.restores: list[dict[str, Any]] = []
        self.probe: WindowProbe | None = None
        self.retried: list[dict[str, Any]] = []  # windows run again (they saw no traffic)

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def resolve(self, target: str) -> str:
        names = list(self.dep.nodes)
        if target == "leader":
            leader = await self.dep.controller_leader()
            if leader is None:
                raise Unsupported("no controller leader to target")
            return leader
        if target in ("container", "controller"):
            pool = [n for n in names if self.dep.nodes[n].kind == target]
            if not pool:
                raise Unsupported(f"no {target} process in this deployment")
            return self.rng.choice(pool)
        if target == "any":
            return self.rng.choice(names)
        if target not in self.dep.nodes:
            raise Unsupported(f"no process {target!r}")
        return target

    async def run(self, schedule: list[Fault]) -> None:
        for f in sorted(schedule, key=lambda x: x.at):
            await self.resumed()
            wait = f.at - self.now()
            if wait > 0:
                await asyncio.sleep(wait)  # sleep-ok: the fault schedule itself
            try:
                await self.one(f)
            except Unsupported as e:
                self.dep.net.heal()  # a network fault may have been applied in part
                self.skipped.append({**f.to_json(), "reason": str(e)})
                self.log(f"[nemesis] skipped {f.kind} {f.target}: {e}")

    async def resumed(self) -> None:
        """Before a fault: the previous one's recovery is over for the workload too (``probe.traffic_resumed``)."""
        last = next((ev for ev in reversed(self.h.faults) if ev.ready is not None), None)
        if self.probe is not None and last is not None and not await self.probe.traffic_resumed(last.ready or 0.0):
            self.log(f"[nemesis] {self.now():7.2f}s traffic did not resume after {last.kind} {last.target}")

    async def one(self, f: Fault) -> None:
        name = await self.resolve(f.target)
        for attempt in range(1, WINDOW_TRIES + 1):
            if attempt > 1:
                await self.resumed()
            ev = await self.window(f, name)
            if self.probe is None or self.probe.saw_traffic(ev):
                return
            self.retried.append({**f.to_json(), "resolved": name, "attempt": attempt, "applied": ev.applied})
            self.log(f"[nemesis] {f.kind} {name}: its window saw no traffic for its checks; run again")
        raise Unsupported(f"{f.kind} {name}: no window of {WINDOW_TRIES} got the traffic its checks need")

    async def window(self, f: Fault, name: str) -> FaultEvent:
        """Apply, hold (probing, when the fault's checks need traffic), heal, wait until ready."""
        ev = FaultEvent(f.kind, name, self.now(), detail=f.target)
        for n in self.dep.nodes:
            self.note_exit(n)
        ev.state = await self._replica_state()
        heal = await self.apply(f.kind, name, ev)
        ev.applied = self.now()
        self.h.faults.append(ev)
        self.log(f"[nemesis] {ev.start:7.2f}s {f.kind} {name} for {f.duration}s")
        probing = None
        if self.probe is not None and self.probe.needed(ev):
            started = asyncio.Event()
            probing = asyncio.ensure_future(self.probe.drive(ev, ev.applied + f.duration, started))
            first = asyncio.ensure_future(started.wait())  # the first probe is out: the window has its traffic
            await asyncio.wait([first, probing], timeout=f.duration, return_when=asyncio.FIRST_COMPLETED)
            first.cancel()
        await asyncio.sleep(max(0.0, ev.applied + f.duration - self.now()))  # sleep-ok: how long the fault holds
        ev.healing = self.now()
        await asyncio.to_thread(heal)
        ev.end = self.now()
        await self.dep.wait_ready()
        ev.ready = self.now()
        if probing is not None:
            await probing  # its last send ends within its timeout: the window's end
        self.log(f"[nemesis] {self.now():7.2f}s healed {f.kind} {name} (ready)")
        return ev

    async def _replica_state(self) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self.dep.replica_state(), 3.0)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal: the fault still runs
            return {"error": repr(e)}

    async def apply(self, kind: str, name: str, ev: FaultEvent) -> Any:
        """Inject the fault; returns how to heal it. Process operations run on a thread, so the workload keeps
        reading answers meanwhile (their timestamps stay honest)."""
        node = self.dep.nodes[name]
        if kind in ("kill", "powerloss"):
            if kind == "kill":
                await asyncio.to_thread(node.kill)
            else:
                await asyncio.to_thread(node.kill)
                dead = self.now()
                rep = await asyncio.to_thread(node.power_loss)
                self.restores.append({"node": name, "t": round(dead, 3), **rep.to_json()})
                ev.detail += f" bytes_zeroed={rep.bytes_zeroed}"
            crashes = [Crash(name, b, kind, self.now()) for b in node.bsets]
            self.h.crashes += crashes

            def restart() -> None:
                for c in crashes:
                    c.restart = self.now()
                node.start()

            return restart
        if kind == "pause":
            node.pause()
            return node.resume
        if kind == "diskfull":
            if not isinstance(self.dep, SingleContainer):
                raise Unsupported("diskfull: only the single-container deployment has a sized store filesystem")
            await asyncio.to_thread(self.dep.fill_disk)
            return self.dep.free_disk
        why = self.dep.network_fault_limit([name])
        if why:
            raise Unsupported(why)
        return await asyncio.to_thread(self._net_fault, kind, name, ev)

    def _net_fault(self, kind: str, name: str, ev: FaultEvent) -> Any:
        net = CutRecorder(self.dep.net, ev.cut)
        others = [n for n in self.dep.nodes if n != name]
        of_kind = {k: [n for n in others if self.dep.nodes[n].kind == k] for k in ("container", "controller")}
        if kind in CONTAINER_KINDS and self.dep.nodes[name].kind != "container":
            raise Unsupported(f"{kind}: the target must be a container, not {name}")
        if kind == "isolate":
            partition(net, [[name], others or [CLIENT]])
        elif kind == "split":
            if len(self.dep.nodes) < 3:
                raise Unsupported("split needs at least three processes")
            rest = list(others)
            self.rng.shuffle(rest)
            minority = [name] + rest[: (len(self.dep.nodes) - 1) // 2 - 1]
            partition(net, [minority, [n for n in others if n not in minority]])
        elif kind == "oneway":
            for o in others or [CLIENT]:
                net.block(name, o)
        elif kind in ("cut-ctl", "cut-peers"):
            group = of_kind["controller" if kind == "cut-ctl" else "container"]
            if not group:
                raise Unsupported(f"{kind}: no {'controller' if kind == 'cut-ctl' else 'other container'} to cut")
            partition(net, [[name], group])
        elif kind in ("slow", "delay", "loss"):
            delay, jitter = (DELAY_MS, JITTER_MS) if kind != "loss" else (0.0, 0.0)
            self.dep.net.slow([name], delay, jitter, LOSS if kind != "delay" else 0.0)
            return lambda: self._heal_delay(ev)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return self.dep.net.heal

    def _heal_delay(self, ev: FaultEvent) -> None:
        """Heal, and note what the delayers did (netns: packets held, most held at once, lost notifications)."""
        reports = getattr(self.dep.net, "delay_reports", None)
        seen = len(reports) if reports is not None else 0
        self.dep.net.heal()
        for r in (reports or [])[seen:]:
            ev.detail += (f" delayed={r.get('packets', '?')} max_held={r.get('max_held', '?')}"
                          f" overruns={r.get('overruns', '?')}")

    async def heal_all(self) -> None:
        """After the schedule (and on the way out): network healed, paused processes resumed, dead ones
        restarted; then wait until ready."""
        self.dep.net.heal()
        if isinstance(self.dep, SingleContainer):
            self.dep.free_disk()
        for node in self.dep.nodes.values():
            self.note_exit(node.name)
            if node.paused:
                node.resume()
            if not node.alive():
                node.start()
        await self.dep.wait_ready()

    def note_exit(self, name: str) -> None:
        """Record a process that ended on its own (a crash the nemesis did not cause), once."""
        rc = self.dep.nodes[name].exited_on_its_own()
        if rc is not None:
            self.dep.nodes[name].expected_down = True
            self.h.faults.append(FaultEvent("unexpected-exit", name, self.now(), self.now(), f"exit code {rc}"))
            self.log(f"[nemesis] {name} exited on its own (exit code {rc})")


class CutRecorder:
    """A network's ``block`` that also records each directed pair it cut (into a fault's ``cut``)."""

    def __init__(self, net: Blocker, cut: list[list[str]]) -> None:
        self.net, self.cut = net, cut

    def block(self, src: str, dst: str) -> None:
        self.net.block(src, dst)
        self.cut.append([src, dst])
