"""Pure bookkeeping of client requests waiting on the Raft core; shared by the driver and the simulator.

Tokens are opaque (asyncio futures in the driver, callbacks in the simulator).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from enum import Enum
from typing import Generic, TypeVar

from controller.raft.types import Entry, ReadState

T = TypeVar("T")


class ProposalWaiters(Generic[T]):
    """Proposals keyed by log index; each completes when that index is applied here.

    The proposal is ours only if the applied entry has the term we proposed it in; otherwise a new
    leader overwrote it and it definitely did not take effect.
    """

    def __init__(self) -> None:
        self._pending: dict[int, tuple[int, T]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, index: int, term: int, token: T) -> T | None:
        """Register a proposal; returns a displaced older waiter at the same index (overwritten: failed)."""
        old = self._pending.get(index)
        assert old is None or old[0] < term, f"two proposals at index {index} in term {term}"
        self._pending[index] = (term, token)
        return old[1] if old else None

    def on_applied(self, entry: Entry) -> tuple[T, bool] | None:
        """(token, ours) for a waiter at entry.index, or None."""
        item = self._pending.pop(entry.index, None)
        if item is None:
            return None
        return item[1], item[0] == entry.term

    def overwritten(self, term_at: Callable[[int], int | None]) -> list[T]:
        """Waiters whose index now holds an entry of another term: their entry was replaced."""
        gone = [i for i, (term, _) in self._pending.items() if (t := term_at(i)) is not None and t != term]
        return [self._pending.pop(i)[1] for i in gone]

    def drop_through(self, index: int) -> list[T]:
        """Waiters at or below `index`, covered by an installed snapshot: outcome unknown here."""
        gone = [i for i in self._pending if i <= index]
        return [self._pending.pop(i)[1] for i in sorted(gone)]

    def drain(self) -> list[T]:
        out = [t for _, t in self._pending.values()]
        self._pending.clear()
        return out


class ReadOutcome(Enum):
    READY = "ready"  # applied >= read index: serve now
    WAITING = "waiting"  # read index known; waiting for apply
    LAGGING = "lagging"  # follower read refused
    UNKNOWN = "unknown"  # no such request (already completed or never registered)


class ReadWaiters(Generic[T]):
    """Reads waiting for a ReadState (by ctx), then for applied >= the read index."""

    def __init__(self) -> None:
        self._by_ctx: dict[bytes, T] = {}
        self._heap: list[tuple[int, int, T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._by_ctx) + len(self._heap)

    def add(self, ctx: bytes, token: T) -> None:
        self._by_ctx[ctx] = token

    def cancel(self, ctx: bytes) -> T | None:
        return self._by_ctx.pop(ctx, None)

    def on_read_state(self, rs: ReadState, applied: int) -> tuple[ReadOutcome, T | None]:
        token = self._by_ctx.pop(rs.ctx, None)
        if token is None:
            return ReadOutcome.UNKNOWN, None
        if rs.lagging:
            return ReadOutcome.LAGGING, token
        if rs.index <= applied:
            return ReadOutcome.READY, token
        self._seq += 1
        heapq.heappush(self._heap, (rs.index, self._seq, token))
        return ReadOutcome.WAITING, token

    def release(self, applied: int) -> list[T]:
        out: list[T] = []
        heap = self._heap
        while heap and heap[0][0] <= applied:
            out.append(heapq.heappop(heap)[2])
        return out

    def drain_unconfirmed(self) -> list[T]:
        """Reads still waiting for their ReadState (e.g. leadership was lost)."""
        out = list(self._by_ctx.values())
        self._by_ctx.clear()
        return out

    def drain(self) -> list[T]:
        out = self.drain_unconfirmed() + [t for _, _, t in self._heap]
        self._heap.clear()
        return out
