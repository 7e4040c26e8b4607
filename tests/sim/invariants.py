"""Safety invariants checked by the simulator after every event.

- Election safety: at most one leader per term.
- Committed entries are never lost or changed: every (index -> entry) a node has committed or applied
  is recorded once; any later sighting must be identical. A new leader must hold every committed entry
  above its snapshot (leader completeness).
- Commit index never decreases within one incarnation of a node.
- State machine safety: replicas at the same applied index have identical KV state.
- Applies are contiguous (index i+1 follows i, or a snapshot restore jumps forward).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.raft.types import Entry, Role

if TYPE_CHECKING:
    from tests.sim.node import SimNode


class InvariantViolation(AssertionError):
    pass


class Invariants:
    def __init__(self) -> None:
        self.leader_by_term: dict[int, str] = {}
        self.committed: dict[int, tuple[int, int, bytes]] = {}
        self.commit_term: dict[int, int] = {}  # smallest current term of a node seen committing the index
        self.max_commit = 0
        self.state_at: dict[int, int] = {}
        self.commit_seen: dict[str, int] = {}
        self.applied_seen: dict[str, int] = {}
        self.leader_checked: set[tuple[str, int]] = set()

    def _record(self, index: int, e: Entry, who: str, what: str, term: int | None = None) -> None:
        key = (e.term, e.kind, e.data)
        if term is not None and term < self.commit_term.get(index, term + 1):
            self.commit_term[index] = term
        prev = self.committed.get(index)
        if prev is None:
            self.committed[index] = key
        elif prev != key:
            raise InvariantViolation(
                f"{who} {what} index {index} as term {e.term} but it was committed as term {prev[0]} "
                f"(data {prev[2]!r} vs {e.data!r})"
            )

    def on_node_started(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        self.commit_seen[node.id] = core.log.committed
        self.applied_seen[node.id] = core.log.applied
        for i in range(core.log.offset + 1, core.log.committed + 1):
            e = core.log.entry(i)
            assert e is not None
            self._record(i, e, node.id, "recovered committed")

    def check_node(self, node: SimNode) -> None:
        core = node.core
        if core is None:
            return
        log = core.log
        if core.role == Role.LEADER:
            holder = self.leader_by_term.setdefault(core.term, node.id)
            if holder != node.id:
                raise InvariantViolation(f"two leaders in term {core.term}: {holder} and {node.id}")
            if (node.id, core.term) not in self.leader_checked:
                self.leader_checked.add((node.id, core.term))
                self._check_leader_completeness(node)
        prev_commit = self.commit_seen.get(node.id, 0)
        if log.committed < prev_commit:
            raise InvariantViolation(f"{node.id} commit index went back from {prev_commit} to {log.committed}")
        for i in range(max(prev_commit, log.offset) + 1, log.committed + 1):
            e = log.entry(i)
            if e is None:
                raise InvariantViolation(f"{node.id} committed {i} but has no entry for it")
            self._record(i, e, node.id, "committed", core.term)
        self.commit_seen[node.id] = log.committed
        self.max_commit = max(self.max_commit, log.committed)
        if log.applied > log.committed:
            raise InvariantViolation(f"{node.id} applied {log.applied} beyond commit {log.committed}")

    def _check_leader_completeness(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        log = core.log
        for index, (term, _kind, _data) in self.committed.items():
            # Only entries committed in an earlier term bind this leader: a leader of term T may be
            # elected (with votes granted in T) after a later term committed more.
            if index <= log.offset or self.commit_term.get(index, core.term) >= core.term:
                continue
            if log.term(index) != term:
                raise InvariantViolation(
                    f"leader {node.id} of term {core.term} lacks committed entry {index} (term {term}); "
                    f"has term {log.term(index)}"
                )

    def on_applied(self, node: SimNode, e: Entry) -> None:
        prev = self.applied_seen.get(node.id, 0)
        if e.index != prev + 1:
            raise InvariantViolation(f"{node.id} applied {e.index} after {prev}")
        self.applied_seen[node.id] = e.index
        self._record(e.index, e, node.id, "applied")
        self._check_state(node, e.index)

    def on_restored(self, node: SimNode, index: int) -> None:
        prev = self.applied_seen.get(node.id, 0)
        if index < prev:
            raise InvariantViolation(f"{node.id} restored snapshot {index} behind applied {prev}")
        self.applied_seen[node.id] = index
        self._check_state(node, index)

    def _check_state(self, node: SimNode, index: int) -> None:
        digest = node.kv.digest()
        prev = self.state_at.setdefault(index, digest)
        if prev != digest:
            raise InvariantViolation(f"{node.id} state at applied index {index} differs from another replica's")

    def final_check(self, nodes: list[SimNode]) -> None:
        """End of run: every log agrees with the committed record, and logs match pairwise (§5.3)."""
        for node in nodes:
            core = node.core
            if core is None:
                continue
            for e in core.log.entries:
                if e.index <= core.log.committed:
                    self._record(e.index, e, node.id, "holds committed")
        for a in nodes:
            for b in nodes:
                if a.id >= b.id or a.core is None or b.core is None:
                    continue
                la, lb = a.core.log, b.core.log
                common = min(la.last_index(), lb.last_index())
                for i in range(common, max(la.offset, lb.offset), -1):
                    if la.term(i) == lb.term(i):
                        lo = max(la.offset, lb.offset) + 1
                        if la.slice(lo, i + 1) != lb.slice(lo, i + 1):
                            raise InvariantViolation(f"log matching violated between {a.id} and {b.id} below {i}")
                        break
