"""Deterministic simulation of one broker set (3 replicas) driving the sans-I/O HA cores.

Seeded RNG, virtual clock, an event heap. Faults: crashes (nothing appended is lost: the log is on disk),
restarts, connection drops whose close reaches the peer late or never (then only housekeeping notices), delayed
frames (TCP: per direction FIFO, no reordering), lost/delayed controller notifications and ALTER messages, and a
controller that sometimes wrongly believes the master dead (so an old master lives on, unaware, beside a new
one). A tiny pure controller keeps master / epoch / SyncStateSet and elects by spec §6.3 (alive members of the
SyncStateSet, higher epoch, then higher max offset). ``Sim.check()`` runs after every step (see invariants there).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from brokerd.ha.actions import Action, AlterSyncStateSet, Close, ReplicationProgress, Send, become_master
from brokerd.ha.config import HAConfig
from brokerd.ha.log import MemoryLog
from brokerd.ha.master import HAMaster
from brokerd.ha.slave import HASlave
from brokerd.ha.wire import HAConnectionState

TICK_MS = 500
POLL_MS = 5000
CONNECT_RETRY_MS = 1000
ALTER_TIMEOUT_MS = 3000


class Violation(AssertionError):
    pass


class CheckedLog(MemoryLog):
    """A MemoryLog that refuses (as an invariant violation) to truncate confirmed data when ``strict``."""

    def __init__(self, strict: bool) -> None:
        super().__init__()
        self.strict = strict
        self.truncations = 0

    def truncate_dirty_files(self, offset: int) -> None:
        if self.strict and offset < self.confirm:
            raise Violation(f"truncation to {offset} cuts confirmed data (confirm {self.confirm})")
        self.truncations += offset < self.max_phy_offset
        super().truncate_dirty_files(offset)


@dataclass
class Node:
    id: int
    log: CheckedLog
    alive: bool = True
    master: HAMaster | None = None
    slave: HASlave | None = None
    target: int | None = None  # the master this node follows
    epoch_seen: int = 0
    next_connect_ms: int = 0
    writes: int = 0
    incarnation: int = 0


@dataclass
class Conn:
    id: int
    master_node: int
    slave_node: int
    master_core: HAMaster
    slave_core: HASlave
    open_m: bool = True  # the master side has not closed/seen the close
    open_s: bool = True
    last_at: dict[str, int] = field(default_factory=lambda: {"m2s": 0, "s2m": 0})


@dataclass
class Controller:
    master: int | None = None
    epoch: int = 0
    sss: frozenset[int] = frozenset()
    sss_epoch: int = 0
    registered: dict[int, int] = field(default_factory=dict)  # broker -> incarnation of its last REGISTER_BROKER

    def snapshot(self) -> tuple[int | None, int, frozenset[int], int]:
        return self.master, self.epoch, self.sss, self.sss_epoch


class Sim:
    def __init__(self, seed: int, all_ack: bool, n: int = 3) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.all_ack = all_ack
        self.cfg = HAConfig(ha_transfer_batch_size=256, transfer_window_bytes=1024, all_ack_in_sync_state_set=all_ack)
        self.now = 0
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self.seq = 0
        self.nodes = {i: Node(i, CheckedLog(all_ack)) for i in range(1, n + 1)}
        self.ctrl = Controller()
        self.conns: dict[int, Conn] = {}
        self.next_conn = 1
        self.committed = b""
        self.writable_by_epoch: dict[int, int] = {}
        self.confirm_seen: dict[HAMaster, int] = {}  # master core -> last confirm
        self.stats = {"appends": 0, "crashes": 0, "elections": 0, "drops": 0, "truncations": 0, "alters": 0}
        self.trace: list[str] = []
        first = self.rng.choice(list(self.nodes))
        self._elect(first)
        for i in self.nodes:
            self.at(0, partial(self._poll, i))
            self.at(self.rng.randrange(TICK_MS), partial(self._tick_loop, i))
            self.at(self.rng.randrange(POLL_MS), partial(self._poll_loop, i))

    # ------------------------------------------------------------------ event machinery

    def at(self, when: int, fn: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (max(when, self.now), self.seq, fn))

    def advance(self, dt: int) -> None:
        end = self.now + dt
        while self.events and self.events[0][0] <= end:
            when, _, fn = heapq.heappop(self.events)
            self.now = when
            fn()
        self.now = end

    def log(self, msg: str) -> None:
        self.trace.append(f"t={self.now} {msg}")

    # ------------------------------------------------------------------ controller

    def _elect(self, winner: int | None) -> None:
        c = self.ctrl
        c.epoch += 1
        c.master = winner
        if winner is not None:
            c.sss, c.sss_epoch = frozenset({winner}), c.sss_epoch + 1
        self.stats["elections"] += 1
        self.log(f"controller: epoch {c.epoch} master {winner} sss {sorted(c.sss)}")
        snap = c.snapshot()
        for i in self.nodes:  # NOTIFY_BROKER_ROLE_CHANGED: delayed, sometimes lost
            if self.rng.random() < 0.8:
                self.at(self.now + self.rng.randrange(2000), partial(self._learn, i, snap, None))

    def controller_elect(self, exclude: int | None) -> None:
        """Spec §6.3 over alive SyncStateSet members (``exclude``: the master the controller believes dead)."""
        cands = [i for i in self.ctrl.sss if self.nodes[i].alive and i != exclude]
        if not cands:
            if self.ctrl.master is not None:
                self._elect(None)
            return
        best = max(cands, key=lambda i: (self.nodes[i].log.last_epoch(), self.nodes[i].log.max_phy_offset, -i))
        self._elect(best)

    def _controller_alter(self, req: AlterSyncStateSet, incarnation: int) -> tuple[bool, frozenset[int], int]:
        """CONTROLLER_ALTER_SYNC_STATE_SET checks (spec §6.2), plus one the spec lacks: an ALTER sent by a broker
        before its latest registration (a crashed incarnation's, delivered late) is refused. Without it the
        simulation finds a restarted master resuming its epoch while its old expand lands unseen: the controller's
        set then holds a member the master does not count, and confirmOffset runs past it."""
        c = self.ctrl
        ok = (incarnation >= c.registered.get(req.master_broker_id, 0)
              and req.master_broker_id == c.master and req.master_epoch == c.epoch
              and req.sync_state_set_epoch == c.sss_epoch and req.new_sync_state_set != c.sss
              and all(self.nodes[i].alive for i in req.new_sync_state_set)
              and req.master_broker_id in req.new_sync_state_set)  # fmt: skip
        if ok:
            c.sss, c.sss_epoch = req.new_sync_state_set, c.sss_epoch + 1
            self.stats["alters"] += 1
            self.log(f"controller: sss {sorted(c.sss)} epoch {c.sss_epoch}")
        return ok, c.sss, c.sss_epoch

    # ------------------------------------------------------------------ broker role handling

    def _poll(self, i: int) -> None:
        if self.nodes[i].alive:
            self._learn(i, self.ctrl.snapshot(), self.now)

    def _poll_loop(self, i: int) -> None:
        self._poll(i)
        self.at(self.now + POLL_MS, lambda: self._poll_loop(i))

    def _learn(self, i: int, snap: tuple[int | None, int, frozenset[int], int], polled_at: int | None) -> None:
        node = self.nodes[i]
        master, epoch, sss, sss_epoch = snap
        if not node.alive or epoch < node.epoch_seen:
            return
        if epoch > node.epoch_seen:
            node.epoch_seen = epoch
            self._change_role(node, master, epoch, sss, sss_epoch)
        elif node.master is not None and master == i:
            self.run(i, node.master.on_sync_state_set(sss, sss_epoch, self.now, requested_at_ms=polled_at))

    def _change_role(self, node: Node, master: int | None, epoch: int, sss: frozenset[int], sss_epoch: int) -> None:
        if node.master is not None:
            self.run(node.id, node.master.step_down())
            node.master = None
        if node.slave is not None and node.slave.conn is not None:
            self._close(node.slave.conn, "slave", "role change")
        node.slave, node.target = None, master
        if master == node.id:
            if not node.log.data.startswith(self.committed) and self.all_ack:
                raise Violation(f"node {node.id} elected for epoch {epoch} lacks committed data")
            become_master(node.log, epoch)
            node.master = HAMaster(self.cfg, node.log, node.id, epoch, sss, sss_epoch, self.now)
            prev = self.writable_by_epoch.setdefault(epoch, node.id)
            if prev != node.id:
                raise Violation(f"epoch {epoch}: nodes {prev} and {node.id} both became master")
            self.log(f"node {node.id}: master of epoch {epoch}")
        elif master is not None:
            node.slave = HASlave(self.cfg, node.log, node.id, self.now)
            self.log(f"node {node.id}: slave of {master} (epoch {epoch})")

    # ------------------------------------------------------------------ connections

    def _tick_loop(self, i: int) -> None:
        node = self.nodes[i]
        if node.alive:
            if node.master is not None:
                self.run(i, node.master.tick(self.now))
            if node.slave is not None:
                self.run(i, node.slave.tick(self.now))
                self._maybe_connect(node)
        self.at(self.now + TICK_MS, lambda: self._tick_loop(i))

    def _maybe_connect(self, node: Node) -> None:
        slave = node.slave
        if slave is None or not slave.needs_connection or node.target is None or self.now < node.next_connect_ms:
            return
        node.next_connect_ms = self.now + CONNECT_RETRY_MS
        m = self.nodes[node.target]
        if not m.alive or m.master is None or not m.master.writable:
            return  # nobody serving HA on that address
        cid = self.next_conn
        self.next_conn += 1
        self.conns[cid] = Conn(cid, m.id, node.id, m.master, slave)
        self.run(m.id, m.master.on_connected(cid, self.now))
        self.run(node.id, slave.on_connected(cid, self.now))

    def _send(self, cid: int, side: str, data: bytes) -> None:
        c = self.conns.get(cid)
        if c is None or not (c.open_m if side == "master" else c.open_s):
            return
        key = "m2s" if side == "master" else "s2m"
        when = max(c.last_at[key], self.now + (self.rng.randrange(300) if self.rng.random() < 0.3 else 1))
        c.last_at[key] = when
        cut = self.rng.randrange(len(data) + 1) if len(data) > 1 and self.rng.random() < 0.2 else len(data)
        for piece in (data[:cut], data[cut:]):
            if piece:
                self.at(when, partial(self._deliver, cid, key, piece))

    def _deliver(self, cid: int, key: str, data: bytes) -> None:
        c = self.conns.get(cid)
        if c is None:
            return
        if key == "m2s":
            node = self.nodes[c.slave_node]
            if c.open_s and node.alive and node.slave is c.slave_core:
                self.run(node.id, c.slave_core.on_data(cid, data, self.now))
        else:
            node = self.nodes[c.master_node]
            if c.open_m and node.alive and node.master is c.master_core:
                self.run(node.id, c.master_core.on_data(cid, data, self.now))

    def _close(self, cid: int, side: str, reason: str) -> None:
        """``side`` closed (or crashed); the peer learns after a delay, or never (housekeeping then)."""
        c = self.conns.get(cid)
        if c is None:
            return
        if side == "master":
            c.open_m = False
        else:
            c.open_s = False
        self.log(f"conn {cid} closed by {side}: {reason}")
        if self.rng.random() < 0.8:
            self.at(self.now + self.rng.randrange(2000), lambda: self._peer_closed(cid, side))

    def _peer_closed(self, cid: int, side: str) -> None:
        c = self.conns.get(cid)
        if c is None:
            return
        if side == "master" and c.open_s:
            c.open_s = False
            if self.nodes[c.slave_node].slave is c.slave_core:
                self.run(c.slave_node, c.slave_core.on_disconnected(cid, self.now))
        elif side == "slave" and c.open_m:
            c.open_m = False
            if self.nodes[c.master_node].master is c.master_core:
                self.run(c.master_node, c.master_core.on_disconnected(cid, self.now))
        if not c.open_m and not c.open_s:
            del self.conns[cid]

    # ------------------------------------------------------------------ executing core actions

    def run(self, i: int, actions: list[Action]) -> None:
        node = self.nodes[i]
        for a in actions:
            if isinstance(a, Send):
                side = "master" if node.master is not None and a.conn in node.master.conns else "slave"
                self._send(a.conn, side, b"".join(bytes(p) for p in a.parts))
            elif isinstance(a, Close):
                c = self.conns.get(a.conn)
                if c is not None:
                    self._close(a.conn, "master" if c.master_node == i else "slave", a.reason)
            elif isinstance(a, AlterSyncStateSet):
                self._send_alter(i, a)
            elif isinstance(a, ReplicationProgress):
                self._on_progress(node, a)

    def _send_alter(self, i: int, req: AlterSyncStateSet) -> None:
        core = self.nodes[i].master
        assert core is not None
        answered = [False]

        def reply(ok: bool, sss: frozenset[int], epoch: int) -> None:
            if self.nodes[i].master is core and not answered[0]:
                answered[0] = True
                self.run(i, core.on_sync_state_set(sss, epoch, self.now) if ok else core.on_alter_failed(self.now))

        incarnation = self.nodes[i].incarnation  # a real driver sends invokeTime; registration orders it

        def at_controller() -> None:
            ok, sss, epoch = self._controller_alter(req, incarnation)
            if self.rng.random() < 0.85:
                self.at(self.now + self.rng.randrange(500), lambda: reply(ok, sss, epoch))

        if self.rng.random() < 0.9:
            self.at(self.now + self.rng.randrange(500), at_controller)
        self.at(self.now + ALTER_TIMEOUT_MS, lambda: reply(False, frozenset(), 0))

    def _on_progress(self, node: Node, p: ReplicationProgress) -> None:
        if p.acked[0] != node.log.max_phy_offset or list(p.acked) != sorted(p.acked, reverse=True):
            raise Violation(f"node {node.id}: inconsistent progress {p}")

    # ------------------------------------------------------------------ faults and workload

    def append(self) -> None:
        masters = [n for n in self.nodes.values() if n.alive and n.master is not None and n.master.writable]
        if not masters:
            return
        node = self.rng.choice(masters)
        assert node.master is not None
        node.writes += 1
        tag = f"[{node.id}.{node.master.epoch}.{node.writes}]".encode()
        data = tag + bytes([65 + node.id]) * self.rng.randrange(1, 400)
        self.run(node.id, node.master.append(data, self.now))
        self.stats["appends"] += 1

    def crash(self) -> None:
        alive = [n for n in self.nodes.values() if n.alive]
        if len(alive) <= 1:
            return
        node = self.rng.choice(alive)
        self.log(f"node {node.id}: crash")
        self.stats["crashes"] += 1
        node.alive = False
        for cid, c in list(self.conns.items()):
            if c.master_node == node.id and c.open_m:
                self._close(cid, "master", "crash")
            if c.slave_node == node.id and c.open_s:
                self._close(cid, "slave", "crash")
        node.master, node.slave, node.target, node.epoch_seen = None, None, None, 0
        if self.ctrl.master == node.id:
            epoch = self.ctrl.epoch
            self.at(self.now + self.rng.randrange(3000, 10_000), lambda: self._detect_dead(node.id, epoch))

    def _detect_dead(self, i: int, epoch: int) -> None:
        if not self.nodes[i].alive and self.ctrl.master == i and self.ctrl.epoch == epoch:
            self.controller_elect(exclude=i)

    def restart(self) -> None:
        dead = [n for n in self.nodes.values() if not n.alive]
        if dead:
            node = self.rng.choice(dead)
            node.alive = True
            node.incarnation += 1
            self.ctrl.registered[node.id] = node.incarnation
            self.log(f"node {node.id}: restart")
            self._poll(node.id)
            if self.ctrl.master is None:
                self.controller_elect(exclude=None)

    def drop_connection(self) -> None:
        if self.conns:
            cid = self.rng.choice(sorted(self.conns))
            self.stats["drops"] += 1
            self._close(cid, self.rng.choice(["master", "slave"]), "network drop")

    def false_suspicion(self) -> None:
        """The controller wrongly thinks the master is dead: elect another; the old one may not hear of it."""
        if self.ctrl.master is not None:
            self.controller_elect(exclude=self.ctrl.master)

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.40:
            self.append()
        elif r < 0.75:
            self.advance(self.rng.randrange(1, 3000))
        elif r < 0.80:
            self.crash()
        elif r < 0.87:
            self.restart()
        elif r < 0.93:
            self.drop_connection()
        elif r < 0.95:
            self.false_suspicion()
        else:
            self.advance(self.rng.randrange(5000, 20_000))
        self.check()

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        writable: dict[int, int] = {}
        for n in self.nodes.values():
            m = n.master
            if not n.alive or m is None or not m.writable:
                continue
            if writable.setdefault(m.epoch, n.id) != n.id:
                raise Violation(f"two writable masters in epoch {m.epoch}: {writable[m.epoch]} and {n.id}")
            if m.confirm > n.log.max_phy_offset or m.confirm < self.confirm_seen.get(m, 0):
                raise Violation(f"master {n.id}: confirm {m.confirm} went back or past max {n.log.max_phy_offset}")
            self.confirm_seen[m] = m.confirm
            if self.all_ack:
                self._check_sss_holds(n, m)
        self._check_followers()
        if self.all_ack:
            self._check_committed()

    def _check_sss_holds(self, n: Node, m: HAMaster) -> None:
        """The controller's SyncStateSet members hold the master's confirmed prefix (they may be elected)."""
        if self.ctrl.master != n.id or self.ctrl.epoch != m.epoch:
            return
        want = n.log.data[: m.confirm]
        for i in self.ctrl.sss:
            if not self.nodes[i].log.data.startswith(want):
                raise Violation(f"confirm {m.confirm} of master {n.id} beyond what SSS member {i} holds")

    def _check_followers(self) -> None:
        """A slave in TRANSFER on a connection its master still serves holds a prefix of the master's log."""
        for c in self.conns.values():
            s, m = self.nodes[c.slave_node], self.nodes[c.master_node]
            if (c.open_m and c.open_s and s.slave is c.slave_core and m.master is c.master_core
                    and c.slave_core.state is HAConnectionState.TRANSFER):  # fmt: skip
                if not m.log.data.startswith(s.log.data):
                    raise Violation(f"slave {s.id} log is not a prefix of master {m.id}'s")

    def _check_committed(self) -> None:
        """Confirmed data (every replica's log up to its confirm) forms one history that only grows."""
        for n in self.nodes.values():
            mine = n.log.data[: n.log.confirm]
            if len(mine) > len(self.committed):
                if not mine.startswith(self.committed):
                    raise Violation(f"node {n.id} confirmed data diverges from the committed history")
                self.committed = bytes(mine)
            elif not self.committed.startswith(mine):
                raise Violation(f"node {n.id} confirmed data diverges from the committed history")
        if self.ctrl.master is not None:
            master_log = self.nodes[self.ctrl.master].log.data
            if not master_log.startswith(self.committed):
                raise Violation(f"controller's master {self.ctrl.master} lost committed data")

    # ------------------------------------------------------------------ liveness

    def heal_and_converge(self) -> None:
        """Stop faults, restart everyone, let it settle: all logs equal the master's and confirm reaches the end."""
        for n in self.nodes.values():
            if not n.alive:
                n.alive = True
                n.incarnation += 1
                self.ctrl.registered[n.id] = n.incarnation
                self._poll(n.id)
        if self.ctrl.master is None:
            self.controller_elect(exclude=None)
        for _ in range(40):
            self.advance(5000)
            self.check()
            if self._converged():
                return
        states = {n.id: (n.log.max_phy_offset, n.log.confirm, n.master is not None,
                         n.slave.state.name if n.slave else None) for n in self.nodes.values()}  # fmt: skip
        raise Violation(f"no convergence after healing: ctrl={self.ctrl} nodes={states}")

    def _converged(self) -> bool:
        if self.ctrl.master is None:
            return False
        m = self.nodes[self.ctrl.master]
        if m.master is None or not m.master.writable or m.master.confirm != m.log.max_phy_offset:
            return False
        return all(n.log.data == m.log.data for n in self.nodes.values())


def run_seed(seed: int, steps: int, all_ack: bool) -> Sim:
    sim = Sim(seed, all_ack)
    try:
        for _ in range(steps):
            sim.step()
        sim.heal_and_converge()
        sim.stats["truncations"] = sum(n.log.truncations for n in sim.nodes.values())
    except Violation as exc:
        tail = "\n".join(sim.trace[-25:])
        raise AssertionError(f"seed={seed} all_ack={all_ack} step t={sim.now}: {exc}\n"
                             f"replay: HA_SIM_SEED={seed} pytest tests/unit/ha/test_sim.py\n{tail}") from exc
    return sim
