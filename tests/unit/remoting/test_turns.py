"""A loop turn's share of handling reads (turns.py): past the budget, reads are kept and handled from the next
turns on, round-robin between connections, each connection's in order; a held connection waits."""

from __future__ import annotations

import asyncio

from brokerd.remoting.turns import Turns


class Conn:
    def __init__(self, name: str, reads: list[str], log: list[str]) -> None:
        self.name, self.reads, self.log = name, reads, log
        self.held = False

    def handle_deferred(self) -> bool:
        if self.reads and not self.held:
            self.log.append(f"{self.name}:{self.reads.pop(0)}")
        return bool(self.reads) and not self.held

    def handle_stale(self) -> None:
        while self.reads and self.reads[0].startswith("old") and not self.held:
            self.log.append(f"{self.name}:{self.reads.pop(0)}")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.001  # every look at the clock: 1 ms of handling
        return self.t


async def test_kept_reads_are_handled_round_robin_up_to_the_budget_per_turn() -> None:
    loop = asyncio.get_running_loop()
    turns = Turns(budget=0.0025, clock=Clock())
    log: list[str] = []
    a, b = Conn("a", ["1", "2", "3"], log), Conn("b", ["1", "2"], log)
    turns.charge(0.003, loop)
    assert turns.exhausted()
    turns.ready(a, loop)
    turns.ready(b, loop)
    turns.next_turn()  # 1 ms per read: three reads fit under 2.5 ms
    assert log == ["a:1", "b:1", "a:2"] and turns.exhausted()
    turns.next_turn()
    assert log == ["a:1", "b:1", "a:2", "b:2", "a:3"]
    turns.next_turn()
    assert not turns.exhausted() and turns.spent == 0.0


async def test_a_held_connection_leaves_the_round_robin_until_queued_again() -> None:
    loop = asyncio.get_running_loop()
    turns = Turns(budget=1.0, clock=Clock())
    log: list[str] = []
    a, b = Conn("a", ["1", "2"], log), Conn("b", ["1"], log)
    turns.ready(a, loop)
    turns.ready(b, loop)
    a.held = True
    turns.next_turn()
    assert log == ["b:1"]
    a.held = False
    turns.ready(a, loop)  # what release_reading does
    turns.next_turn()
    assert log == ["b:1", "a:1", "a:2"]


async def test_the_turn_is_scheduled_once_and_runs_among_the_next_ready_callbacks() -> None:
    loop = asyncio.get_running_loop()
    turns = Turns(budget=0.002)
    turns.charge(0.0005, loop)
    turns.charge(0.0005, loop)
    assert turns.spent == 0.001 and turns.turn == 0
    await asyncio.sleep(0)  # sleep-ok: one pass of the loop
    await asyncio.sleep(0)  # sleep-ok: one pass of the loop
    assert turns.turn == 1 and turns.spent == 0.0


async def test_reads_that_reached_their_wait_limit_are_handled_first_whatever_their_turn() -> None:
    """The sends of a read kept that long are refused when they reach the limit, not when their turn comes."""
    loop = asyncio.get_running_loop()
    turns = Turns(budget=0.0005, clock=Clock())
    log: list[str] = []
    a, b, c = Conn("a", ["1", "2"], log), Conn("b", ["1"], log), Conn("c", ["old1", "old2", "3"], log)
    for conn in (a, b, c):
        turns.ready(conn, loop)
    turns.next_turn()
    assert log == ["c:old1", "c:old2", "a:1"]  # every stale read first, outside the budget; then one read's worth
