"""Deterministic simulation of a Raft group: real cores, simulated network/disk/clocks, virtual time.

A run (`run_seed`) is fully determined by (seed, nodes, steps):

1. fault phase: `steps` events with a nemesis crashing/restarting nodes (losing unsynced writes),
   partitioning (symmetric split, isolated leader, one-way links), dropping, duplicating, delaying and
   reordering messages, while clients write and read (ReadIndex, lease and follower reads);
2. heal phase: network healed, every node restarted, clients keep going for a while, then stop;
3. convergence: within a virtual-time budget one leader must exist and every node must have applied
   everything the leader committed (liveness); then a burst of concurrent reads at every member, using
   the same context values on every member, must all complete (follower-read liveness);
4. the recorded history must be linearizable (per-key register model).

Safety invariants (tests/sim/invariants.py) are checked after every event. Any violation raises
`SimFailure` whose message carries the seed and the replay command.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack

from controller.linearizability import Operation, check
from controller.raft.codec import decode_message, encode_message
from controller.raft.core import CoreConfig
from controller.raft.types import Entry, Message, Role
from tests.sim.clients import READ_MODES, SimClient
from tests.sim.invariants import Invariants, InvariantViolation
from tests.sim.network import SimNetwork
from tests.sim.node import SimNode


class SimFailure(AssertionError):
    pass


@dataclass
class SimParams:
    """Everything a run varies, derived from the seed ("swarm testing")."""

    nodes: int
    steps: int
    tick_ms: float = 10.0
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    drop: float = 0.0
    duplicate: float = 0.0
    delay_ms_max: float = 3.0
    fsync_ms_max: float = 2.0
    drift: list[float] = field(default_factory=list)
    snapshot_threshold: int = 10**9
    snapshot_trailing: int = 0
    max_batch: int = 64
    max_inflight: int = 8
    lease_ratio: float = 0.8
    max_follower_lag: int = 1000
    crash_rate: float = 0.2
    partition_rate: float = 0.3
    pause_rate: float = 0.1
    nemesis_interval_ms: float = 80.0
    clients: int = 3
    keys: tuple[str, ...] = ("a", "b")
    read_modes: tuple[str, ...] = READ_MODES
    client_timeout_ms: float = 400.0
    think_ms_max: float = 3.0
    heal_ms: float = 400.0
    converge_budget_ms: float = 5000.0
    wire_codec: bool = False  # pass every message through the real wire encoding

    @classmethod
    def from_seed(cls, seed: int, nodes: int, steps: int) -> SimParams:
        r = random.Random(seed * 7919 + nodes)
        return cls(
            nodes=nodes,
            steps=steps,
            drop=r.choice([0.0, 0.0, 0.02, 0.1, 0.25]),
            duplicate=r.choice([0.0, 0.02, 0.1]),
            delay_ms_max=r.choice([1.0, 3.0, 10.0, 30.0]),
            fsync_ms_max=r.choice([0.2, 1.0, 5.0]),
            drift=[r.uniform(-0.02, 0.02) for _ in range(nodes)],
            snapshot_threshold=r.choice([5, 12, 40, 10**9]),
            snapshot_trailing=r.choice([0, 2, 8]),
            max_batch=r.choice([1, 3, 64]),
            max_inflight=r.choice([1, 2, 8]),
            lease_ratio=r.choice([0.5, 0.7, 0.8]),
            max_follower_lag=r.choice([0, 5, 1000]),
            crash_rate=r.choice([0.0, 0.1, 0.3]),
            partition_rate=r.choice([0.0, 0.2, 0.5]),
            pause_rate=r.choice([0.0, 0.1, 0.3]),
            nemesis_interval_ms=r.choice([30.0, 80.0, 200.0]),
            clients=r.choice([2, 3, 5]),
            think_ms_max=r.choice([2.0, 10.0, 30.0]),
            keys=tuple("abcd"[: r.choice([1, 2, 4])]),
            wire_codec=r.random() < 0.5,
        )


@dataclass
class SimResult:
    seed: int
    virtual_ms: float
    events: int
    max_commit: int
    history_ops: int
    reads_ok: dict[str, int]
    terms: int
    restores: int


Event = tuple[float, int, Callable[[], None]]


class Simulation:
    def __init__(
        self, seed: int, nodes: int = 3, steps: int = 3000, params: SimParams | None = None,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self.seed = seed
        self.trace_fn = trace
        self.params = params or SimParams.from_seed(seed, nodes, steps)
        self.rng = random.Random(seed)
        self.now = 0.0
        self._queue: list[Event] = []
        self._seq = 0
        self.node_ids = [f"n{i + 1}" for i in range(self.params.nodes)]
        self.net = SimNetwork(self.rng, self.node_ids)
        self.invariants = Invariants()
        self.history: list[Operation] = []
        self.acked_version: dict[str, int] = {}
        self.reads_ok: dict[str, int] = {}
        self.events = 0
        p = self.params
        self.nodes: dict[str, SimNode] = {}
        for i, nid in enumerate(self.node_ids):
            cfg = CoreConfig(
                nid, tuple(self.node_ids), election_ticks=p.election_ticks, heartbeat_ticks=p.heartbeat_ticks,
                max_batch_entries=p.max_batch, max_inflight_appends=p.max_inflight, lease_ratio=p.lease_ratio,
                max_follower_lag_entries=p.max_follower_lag,
            )
            self.nodes[nid] = SimNode(self, nid, cfg, p.tick_ms * (1 + p.drift[i]))
        self.clients = [SimClient(self, c) for c in range(p.clients)]
        self.nemesis_on = True

    # ------------------------------------------------------------------ plumbing
    def trace(self, what: str) -> None:
        if self.trace_fn is not None:
            self.trace_fn(f"{self.now:10.3f}ms {what}")

    def schedule(self, delay_ms: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay_ms, self._seq, fn))

    def send(self, msgs: list[Message]) -> None:
        for m in msgs:
            if self.params.wire_codec:
                m = decode_message(msgpack.unpackb(encode_message(m)[4:]))
            node = self.nodes[m.to]
            for delay in self.net.deliveries(m.frm, m.to):
                self.schedule(delay, functools.partial(node.deliver, m))

    def fsync_ms(self) -> float:
        return self.rng.uniform(0.05, self.params.fsync_ms_max)

    def check_node(self, node: SimNode) -> None:
        self.invariants.check_node(node)

    def on_node_started(self, node: SimNode) -> None:
        self.invariants.on_node_started(node)

    def on_applied(self, node: SimNode, e: Entry) -> None:
        self.invariants.on_applied(node, e)

    def on_restored(self, node: SimNode, index: int) -> None:
        self.invariants.on_restored(node, index)

    def on_write_acked(self, key: str, index: int) -> None:
        self.acked_version[key] = max(self.acked_version.get(key, 0), index)

    def _step(self) -> bool:
        if not self._queue:
            return False
        t, _, fn = heapq.heappop(self._queue)
        self.now = t
        fn()
        self.events += 1
        return True

    def _run_for(self, ms: float) -> None:
        end = self.now + ms
        while self._queue and self._queue[0][0] <= end:
            self._step()
        self.now = max(self.now, end)

    # ------------------------------------------------------------------ nemesis
    def _nemesis(self) -> None:
        if not self.nemesis_on:
            return
        p, rng = self.params, self.rng
        r = rng.random()
        if r < p.crash_rate:
            alive = [n for n in self.nodes.values() if n.alive]
            if alive:
                victim = rng.choice(alive)
                self.trace(f"nemesis: crash {victim.id}")
                victim.crash()
                self.schedule(rng.uniform(10, 400), lambda: self._restart(victim))
        elif r < p.crash_rate + p.partition_rate:
            self._partition()
            self.trace(f"nemesis: blocked links {sorted(self.net.faults.blocked)}")
            self.schedule(rng.uniform(20, 400), self.net.faults.blocked.clear)
        elif r < p.crash_rate + p.partition_rate + p.pause_rate:
            leaders = [n for n in self.nodes.values() if n.role == Role.LEADER]
            victim = rng.choice(leaders if leaders and rng.random() < 0.7 else list(self.nodes.values()))
            pause_ms = rng.uniform(5, 300)
            self.trace(f"nemesis: pause {victim.id} for {pause_ms:.1f}ms")
            victim.pause(pause_ms)
        else:
            f = self.net.faults
            f.drop = rng.choice([0.0, p.drop, p.drop * 2])
            f.duplicate = rng.choice([0.0, p.duplicate])
            f.delay_ms_max = rng.choice([p.delay_ms_max, p.delay_ms_max * 3])
            self.trace(f"nemesis: drop={f.drop} duplicate={f.duplicate} delay_max={f.delay_ms_max}ms")
        self.schedule(rng.uniform(0.5, 1.5) * p.nemesis_interval_ms, self._nemesis)

    def _partition(self) -> None:
        rng, net = self.rng, self.net
        net.faults.blocked.clear()
        kind = rng.choice(["isolate_leader", "isolate_leader", "split", "one_way", "leader_deaf", "heal"])
        leaders = [n.id for n in self.nodes.values() if n.role == Role.LEADER]
        if kind == "isolate_leader" and leaders:
            net.isolate(leaders[-1])
        elif kind == "split":
            size = rng.randint(1, len(self.node_ids) // 2)
            net.split(set(rng.sample(self.node_ids, size)))
        elif kind == "leader_deaf" and leaders:
            for other in self.node_ids:  # the leader can send but hears nothing back
                if other != leaders[-1]:
                    net.one_way(other, leaders[-1])
        elif kind == "one_way":
            for _ in range(rng.randint(1, len(self.node_ids))):
                a, b = rng.sample(self.node_ids, 2)
                net.one_way(a, b)

    def _restart(self, node: SimNode) -> None:
        if not node.alive:
            self.trace(f"restart {node.id}")
            node.start()

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        try:
            return self._run()
        except SimFailure:
            raise
        except InvariantViolation as e:
            raise SimFailure(self.failure_message(str(e))) from e
        except Exception as e:  # a crash inside the core or the harness: still print the seed
            raise SimFailure(self.failure_message(f"{type(e).__name__}: {e}")) from e

    def failure_message(self, what: str) -> str:
        p = self.params
        return (
            f"simulation failed: seed={self.seed} nodes={p.nodes} steps={p.steps} t={self.now:.3f}ms: {what}\n"
            f"replay: python scripts/sim.py --seed {self.seed} --nodes {p.nodes} --steps {p.steps}"
        )

    def _run(self) -> SimResult:
        p = self.params
        self.net.faults.drop, self.net.faults.duplicate = p.drop, p.duplicate
        self.net.faults.delay_ms_max = p.delay_ms_max
        for node in self.nodes.values():
            node.start()
        for c in self.clients:
            c.start()
        self.schedule(p.nemesis_interval_ms, self._nemesis)
        while self.events < p.steps and self._step():
            pass
        # Heal: stop faults, bring everyone back, let clients run on a healthy cluster, then stop them.
        self.trace("heal: faults off, restarting crashed nodes")
        self.nemesis_on = False
        self.net.faults.heal()
        self.net.faults.delay_ms_max = 3.0
        for node in self.nodes.values():
            node.paused_until = 0.0
            self._restart(node)
        self._run_for(p.heal_ms)
        for c in self.clients:
            c.running = False
        self._converge()
        self._check_read_burst()
        self.invariants.final_check(list(self.nodes.values()))
        self._check_history()
        return SimResult(
            self.seed, self.now, self.events, self.invariants.max_commit, len(self.history), dict(self.reads_ok),
            len(self.invariants.leader_by_term), sum(n.restores for n in self.nodes.values()),
        )

    def _converged(self) -> bool:
        leaders = [n for n in self.nodes.values() if n.role == Role.LEADER]
        if len(leaders) != 1:
            return False
        lead = leaders[0].core
        assert lead is not None
        if lead.log.committed != lead.log.last_index():
            return False
        for n in self.nodes.values():
            if n.core is None or n.busy or n.core.log.applied != lead.log.committed or n.core.lead != lead.id:
                return False
        return True

    def _converge(self) -> None:
        deadline = self.now + self.params.converge_budget_ms
        while not self._converged():
            if self.now > deadline or not self._step():
                states = {
                    n.id: (n.role.name if n.role is not None else "down", n.core.term if n.core else None,
                           n.core.log.committed if n.core else None, n.core.log.applied if n.core else None)
                    for n in self.nodes.values()
                }
                raise SimFailure(self.failure_message(f"no convergence after healing: {states}"))

    def _check_read_burst(self, per_node: int = 16, budget_ms: float = 1000.0) -> None:
        """Every member serves `per_node` concurrent follower reads (equal ctx bytes on every member)."""
        outcomes: dict[tuple[str, int], str] = {}
        for node in self.nodes.values():
            for i in range(per_node):

                def done(outcome: str, _info: object, k: tuple[str, int] = (node.id, i)) -> None:
                    outcomes[k] = outcome

                node.client_read("follower", self.params.keys[0], done, ctx=b"burst%d" % i)
        total = per_node * len(self.nodes)
        deadline = self.now + budget_ms
        while len(outcomes) < total and self.now <= deadline and self._step():
            pass
        bad = {k: v for k, v in outcomes.items() if v != "ok"}
        lost = sorted({k for n in self.nodes for k in ((n, i) for i in range(per_node))} - set(outcomes))
        if bad or lost:
            raise SimFailure(self.failure_message(
                f"follower reads on a healthy cluster: {len(lost)} never completed {lost[:8]}, failed {bad}"
            ))

    def _check_history(self) -> None:
        result = check(self.history)
        if result.ok is False:
            raise SimFailure(self.failure_message("history is not linearizable:\n" + result.describe()))


def run_seed(seed: int, nodes: int = 3, steps: int = 3000) -> SimResult:
    return Simulation(seed, nodes, steps).run()
