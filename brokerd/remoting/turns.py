"""A loop turn's share of handling reads, and the reads left for the next turns.

An event loop reads every ready socket each turn and, here, handles what it read at once (stores sends, answers
them). Under a flood that work outgrows a turn: one connection's reads would hold the loop (libuv reads a socket
up to 32 times per wake-up), and a socket left unread keeps its client's sends where the broker cannot see them
(in both kernels' buffers, for seconds), so no rule about how long a send waited could apply. RocketMQ's Netty
reads eagerly into a queue that its send threads take from; this loop does the same within its turns:

* reads are handled as they come while the turn's handling stays under ``budget`` (2 ms) and a connection has
  had fewer than ``READS_PER_TURN`` full reads in the turn;
* past that, a connection's reads are still taken off its socket, but kept (``Deferrer.defer``: a copy, with
  its arrival time) and handled from the loop's next turn on, round-robin between the connections with such
  reads, one read at a time, up to the budget per turn (``Turns.next_turn``). A connection's reads stay in
  order: while it has some kept, its new ones are kept behind them;
* so a send's whole wait is in the broker, stamped with its arrival (``arrival.py``), and one that waited too
  long is refused, not stored (``brokerd/processors/admission.py``);
* each turn first handles, at once and outside the budget, every kept read that arrived its dispatcher's
  ``stale_after`` ago (the sends' wait limit, waitTimeMillsInSendQueue): their sends are refused, cheaply, when
  they reach the limit, not when their turn in the round-robin comes (RocketMQ's broker sweeps its send queue
  for expired requests every 10 ms).

A turn is one pass of the loop (timers, ready callbacks, the poll and its I/O callbacks); ``next_turn`` runs
among the ready callbacks of the pass after the one that handled or kept reads.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

BUDGET_S = 0.002
READS_PER_TURN = 4


class Deferrer(Protocol):
    def handle_deferred(self) -> bool:
        """Handle its oldest kept read; True while it has more it may handle now."""
        ...

    def handle_stale(self) -> None:
        """Handle its kept reads that reached their wait limit (its dispatcher's ``stale_after``)."""
        ...


class Turns:
    """The loop's turn accounting (one per thread: its loop)."""

    def __init__(self, budget: float = BUDGET_S, clock: Callable[[], float] = time.perf_counter) -> None:
        self.budget = budget
        self.clock = clock
        self.spent = 0.0  # handling time in this turn
        self.turn = 0  # turns that handled or kept reads
        self.kept = 0  # reads kept for a later turn so far (/metrics)
        self.kept_bytes = 0  # bytes kept and not handled yet, every connection's (/metrics)
        self._due = False
        self._ready: deque[Deferrer] = deque()  # connections with kept reads, in turn
        self._loop: asyncio.AbstractEventLoop | None = None

    def exhausted(self) -> bool:
        return self.spent >= self.budget

    def charge(self, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        """``seconds`` of handling in this turn."""
        self.spent += seconds
        self._schedule(loop)

    def ready(self, conn: Deferrer, loop: asyncio.AbstractEventLoop) -> None:
        """``conn`` has kept reads to handle (not already queued)."""
        self._ready.append(conn)
        self._schedule(loop)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._due:
            self._due = True
            self._loop = loop
            loop.call_soon(self.next_turn)

    def next_turn(self) -> None:
        """A new turn: the kept reads, round-robin, up to the budget."""
        self._due = False
        self.turn += 1
        self.spent = 0.0
        ready = self._ready
        if not ready:
            return
        for conn in list(ready):
            conn.handle_stale()
        start = now = self.clock()
        while ready and now - start < self.budget:
            conn = ready.popleft()
            if conn.handle_deferred():
                ready.append(conn)
            now = self.clock()
        self.spent = now - start
        if self._loop is not None:
            self._schedule(self._loop)  # the next turn starts with a fresh budget
