"""Simulated clients: sequential writers/readers that record a history for the linearizability checker.

Each client runs one operation at a time (as in Jepsen): a write of a unique value to a small key set
at the node it believes is leader, or a read in one of four modes: ReadIndex on the leader, a lease
read on the leader, a follower read at a random node, or a burst of concurrent follower reads at one
node ("follower_burst", like a controller serving many clients from a follower; each read of the burst
is recorded as its own operation). Outcomes: "ok", "fail" (definitely no
effect: dropped from the history) or "unknown" (a write that may or may not have happened: kept with
an open interval). A read additionally gets an immediate check: it must observe a version at least as
new as every write to that key acknowledged before the read began.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from controller.linearizability import Operation
from tests.sim.invariants import InvariantViolation

if TYPE_CHECKING:
    from tests.sim.cluster import Simulation

READ_MODES = ("index", "lease", "follower", "follower_burst")
BURST_MAX = 8


class SimClient:
    def __init__(self, sim: Simulation, client_id: int) -> None:
        self.sim = sim
        self.id = client_id
        self.leader_hint: str | None = None
        self.counter = 0
        self.op_seq = 0
        self.running = True

    def start(self) -> None:
        self.sim.schedule(self.sim.rng.uniform(0, 5), self._next_op)

    def _pick_node(self, follower_ok: bool) -> str:
        ids = self.sim.node_ids
        if not follower_ok and self.leader_hint in ids and self.sim.rng.random() < 0.7:
            assert self.leader_hint is not None
            return self.leader_hint
        return self.sim.rng.choice(ids)

    def _next_op(self) -> None:
        if not self.running:
            return
        rng = self.sim.rng
        key = rng.choice(self.sim.params.keys)
        self.op_seq += 1
        seq = self.op_seq
        if rng.random() < 0.5:
            self.counter += 1
            value = self.id * 1_000_000 + self.counter
            self._write(seq, key, value)
        else:
            self._read(seq, key, rng.choice(self.sim.params.read_modes))

    def _finish(self, seq: int) -> bool:
        """True if `seq` is still the current op (not timed out); schedules the next op."""
        if seq != self.op_seq:
            return False
        self.op_seq += 1  # close it: later callbacks for `seq` are ignored
        if self.running:
            self.sim.schedule(self.sim.rng.uniform(0, self.sim.params.think_ms_max), self._next_op)
        return True

    def _arm_timeout(self, seq: int, on_timeout: object) -> None:
        def fire() -> None:
            if seq == self.op_seq:
                assert callable(on_timeout)
                on_timeout()

        self.sim.schedule(self.sim.params.client_timeout_ms, fire)

    def _write(self, seq: int, key: str, value: int) -> None:
        call = self.sim.now
        node = self._pick_node(follower_ok=False)

        def done(outcome: str, info: object) -> None:
            if not self._finish(seq):
                return
            if outcome == "ok":
                assert isinstance(info, int)
                self.sim.on_write_acked(key, info)
                self.sim.history.append(Operation(self.id, key, "write", value, None, call, self.sim.now))
            elif outcome == "unknown":
                self.sim.history.append(Operation(self.id, key, "write", value, None, call, None))
            else:
                self.leader_hint = info if isinstance(info, str) else None

        def timeout() -> None:
            if self._finish(seq):
                self.sim.history.append(Operation(self.id, key, "write", value, None, call, None))

        self._arm_timeout(seq, timeout)
        self.sim.nodes[node].client_write(key, value, done)

    def _read(self, seq: int, key: str, mode: str) -> None:
        if mode == "follower_burst":
            self._read_burst(seq, key)
            return
        call = self.sim.now
        floor = self.sim.acked_version.get(key, 0)
        node = self._pick_node(follower_ok=mode == "follower")

        def done(outcome: str, info: object) -> None:
            if not self._finish(seq):
                return
            if outcome != "ok":
                self.leader_hint = info if isinstance(info, str) else None
                return
            self._record_read(self.id, mode, node, key, call, floor, info)

        self._arm_timeout(seq, lambda: self._finish(seq))
        self.sim.nodes[node].client_read(mode, key, done)

    def _read_burst(self, seq: int, key: str) -> None:
        call = self.sim.now
        floor = self.sim.acked_version.get(key, 0)
        node = self._pick_node(follower_ok=True)
        count = self.sim.rng.randint(2, BURST_MAX)
        left = [count]
        recorded = [False]

        def one(i: int) -> Callable[[str, object], None]:
            def done(outcome: str, info: object) -> None:
                if seq != self.op_seq:
                    return  # the burst timed out
                if outcome == "ok":  # every read gets the stale check; one per burst goes to the history
                    history = not recorded[0]
                    recorded[0] = True
                    self._record_read((self.id, i), "follower_burst", node, key, call, floor, info, history)
                left[0] -= 1
                if left[0] == 0:
                    self._finish(seq)

            return done

        self._arm_timeout(seq, lambda: self._finish(seq))
        for i in range(count):
            self.sim.nodes[node].client_read("follower", key, one(i))

    def _record_read(
        self, client: Hashable, mode: str, node: str, key: str, call: float, floor: int, info: object,
        history: bool = True,
    ) -> None:
        assert isinstance(info, tuple)
        value, version = info
        if version < floor:
            raise InvariantViolation(
                f"stale {mode} read at {node}: key {key} returned version {version} (value {value}) "
                f"but write at index {floor} was acknowledged before the read began (t={call:.3f})"
            )
        if history:  # (the linearizability search grows quickly with concurrent operations)
            self.sim.history.append(Operation(client, key, "read", None, value, call, self.sim.now))
        self.sim.reads_ok[mode] = self.sim.reads_ok.get(mode, 0) + 1
