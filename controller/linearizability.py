"""Linearizability checker for histories of client operations (Wing & Gong search, Lowe's memoisation).

Usage::

    ops = [Operation(client=1, key="a", kind="write", input=5, call=0.0, ret=2.0), ...]
    result = check(ops)                     # register model, one independent register per key
    assert result.ok, result.describe()

- An operation is the interval [call, ret]. `ret=None` means the outcome is unknown (timeout, crash):
  the operation may or may not have taken effect, at any point after `call`. Drop operations that
  definitely failed, and reads whose outcome is unknown, before calling `check`.
- Models are pluggable (`Model` protocol): `RegisterModel` supports read/write/cas on one register.
  Histories are split by `partition` (default: by `Operation.key`) and each part is checked alone,
  which is sound for models whose parts are independent (P-compositionality), e.g. a KV map of
  registers. The controller can partition by broker set the same way.
- The search linearises calls in order of invocation, backtracking on failure, and memoises
  (set of linearised ops, model state) so equivalent branches are explored once. `max_states` bounds
  the work per partition; exceeding it gives `ok=None` (unknown) rather than a wrong answer.

Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

S = TypeVar("S")
UNKNOWN: Any = object()  # `output` of an operation whose result was never observed


@dataclass(frozen=True)
class Operation:
    client: Hashable
    key: Hashable
    kind: str  # "read" | "write" | "cas"
    input: Any = None  # written value, or (expected, new) for cas
    output: Any = None  # value read; bool for cas; UNKNOWN when not observed
    call: float = 0.0
    ret: float | None = None  # None: outcome unknown (may have happened any time after `call`)


class Model(Protocol[S]):
    def init(self) -> S: ...

    def step(self, state: S, op: Operation) -> tuple[bool, S]:
        """(legal, new_state): can `op` with its observed output happen in `state`?"""
        ...


class RegisterModel:
    """A register (initially `initial`) with read, write and compare-and-set."""

    def __init__(self, initial: Hashable = None) -> None:
        self.initial = initial

    def init(self) -> Hashable:
        return self.initial

    def step(self, state: Hashable, op: Operation) -> tuple[bool, Hashable]:
        if op.kind == "write":
            return True, op.input
        if op.kind == "read":
            return (op.output is UNKNOWN or op.output == state), state
        if op.kind == "cas":
            expected, new = op.input
            if state == expected:
                return (op.output is UNKNOWN or op.output is True), new
            return (op.output is UNKNOWN or op.output is False), state
        raise ValueError(f"unknown operation kind {op.kind!r}")


SyncStateSet = tuple[tuple[int, ...], int]


class SyncStateSetModel:
    """A broker set's sync state set as CONTROLLER_ALTER_SYNC_STATE_SET changes it: state (set, epoch); a "cas"
    op's input (expected epoch, new set) answers "ok" | "fenced" | "same" (spec 6.2 check order); a "read" op
    returns the state."""

    def init(self) -> SyncStateSet:
        return ((1,), 1)

    def step(self, state: SyncStateSet, op: Operation) -> tuple[bool, Hashable]:
        cur_set, epoch = state
        if op.kind == "read":
            return (op.output is UNKNOWN or op.output == state), state
        expected, new = op.input
        if new == cur_set:
            return op.output in ("same", UNKNOWN), state
        if expected != epoch:
            return op.output in ("fenced", UNKNOWN), state
        return op.output in ("ok", UNKNOWN), (new, epoch + 1)


@dataclass
class PartitionResult:
    key: Hashable
    ok: bool | None
    ops: int
    states_explored: int
    longest_prefix: list[Operation] = field(default_factory=list)  # best linearisation found (on failure)
    stuck_on: list[Operation] = field(default_factory=list)  # ops that could not be placed next


@dataclass
class CheckResult:
    ok: bool | None  # None: some partition exceeded max_states
    partitions: list[PartitionResult]

    def failures(self) -> list[PartitionResult]:
        return [p for p in self.partitions if p.ok is False]

    def describe(self) -> str:
        lines = []
        for p in self.partitions:
            if p.ok:
                continue
            verdict = "NOT linearizable" if p.ok is False else "unknown (search budget exceeded)"
            lines.append(f"key={p.key!r}: {verdict}; {p.ops} ops, {p.states_explored} states")
            lines.extend(f"  linearized: {_fmt(op)}" for op in p.longest_prefix[-10:])
            lines.extend(f"  cannot place: {_fmt(op)}" for op in p.stuck_on[:10])
        return "\n".join(lines) or "linearizable"


def _fmt(op: Operation) -> str:
    out = "?" if op.output is UNKNOWN else op.output
    ret = "?" if op.ret is None else f"{op.ret:.3f}"
    return f"c={op.client} {op.kind}({op.input!r}) -> {out!r} [{op.call:.3f}, {ret}]"


def check(
    history: Iterable[Operation],
    model: Model[Any] | None = None,
    partition: Callable[[Operation], Hashable] = lambda op: op.key,
    max_states: int = 2_000_000,
) -> CheckResult:
    parts: dict[Hashable, list[Operation]] = {}
    for op in history:
        parts.setdefault(partition(op), []).append(op)
    mdl = model or RegisterModel()
    results = [_Search(key, ops, mdl, max_states).run() for key, ops in parts.items()]
    ok: bool | None = True
    if any(r.ok is False for r in results):
        ok = False
    elif any(r.ok is None for r in results):
        ok = None
    return CheckResult(ok, results)


class _Node:
    __slots__ = ("op_id", "is_call", "match", "prev", "next")

    def __init__(self, op_id: int, is_call: bool) -> None:
        self.op_id = op_id
        self.is_call = is_call
        self.match: _Node | None = None
        self.prev: _Node | None = None
        self.next: _Node | None = None


class _Search(Generic[S]):
    def __init__(self, key: Hashable, ops: Sequence[Operation], model: Model[S], max_states: int) -> None:
        self.key = key
        self.ops = list(ops)
        self.model = model
        self.max_states = max_states
        self.head = self._build_list()

    def _build_list(self) -> _Node:
        events: list[tuple[float, int, int, bool]] = []
        inf = float("inf")
        for i, op in enumerate(self.ops):
            events.append((op.call, 0, i, True))  # calls sort before returns at equal times
            events.append((inf if op.ret is None else op.ret, 1, i, False))
        events.sort()
        head = _Node(-1, False)
        calls: dict[int, _Node] = {}
        prev = head
        for _, _, i, is_call in events:
            node = _Node(i, is_call)
            if is_call:
                calls[i] = node
            else:
                calls[i].match = node
            prev.next, node.prev = node, prev
            prev = node
        return head

    @staticmethod
    def _lift(call: _Node) -> None:
        for n in (call, call.match):
            assert n is not None and n.prev is not None
            n.prev.next = n.next
            if n.next is not None:
                n.next.prev = n.prev

    @staticmethod
    def _unlift(call: _Node) -> None:
        for n in (call.match, call):
            assert n is not None and n.prev is not None
            n.prev.next = n
            if n.next is not None:
                n.next.prev = n

    def run(self) -> PartitionResult:
        state = self.model.init()
        linearized = 0
        cache: set[tuple[int, Any]] = set()
        stack: list[tuple[_Node, Any]] = []
        best: list[int] = []
        entry = self.head.next
        while self.head.next is not None:
            assert entry is not None
            if entry.is_call:
                legal, new_state = self.model.step(state, self.ops[entry.op_id])
                if legal:
                    new_lin = linearized | (1 << entry.op_id)
                    if (new_lin, new_state) not in cache:
                        cache.add((new_lin, new_state))
                        if len(cache) > self.max_states:
                            return PartitionResult(self.key, None, len(self.ops), len(cache))
                        stack.append((entry, state))
                        state, linearized = new_state, new_lin
                        self._lift(entry)
                        entry = self.head.next
                        continue
                entry = entry.next
                continue
            # A return with its call not yet linearised: backtrack.
            if len(stack) > len(best):
                best = [n.op_id for n, _ in stack]
            if not stack:
                return self._failure(best, len(cache))
            call, state = stack.pop()
            linearized &= ~(1 << call.op_id)
            self._unlift(call)
            entry = call.next
        return PartitionResult(self.key, True, len(self.ops), len(cache))

    def _failure(self, best: list[int], states: int) -> PartitionResult:
        placed = set(best)
        prefix = [self.ops[i] for i in best]
        end = min((op.ret for i, op in enumerate(self.ops) if i not in placed and op.ret is not None), default=None)
        stuck = [op for i, op in enumerate(self.ops) if i not in placed and (end is None or op.call <= end)]
        return PartitionResult(self.key, False, len(self.ops), states, prefix, stuck)
