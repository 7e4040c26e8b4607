"""Work too large for one loop turn, run in steps: the event loop gets a turn whenever a run of steps has taken
``STEP_BUDGET_S`` (2 ms), so a large state's snapshot, page or scrape delays other work by about that much, never
by the whole of it.

The work is a generator that yields between steps (each step a few µs to a few hundred µs); what it returns is
the result. It must read what it walks from copies or tolerate changes between steps: other callbacks run in the
turns it gives away.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")

STEP_BUDGET_S = 0.002
SORT_CHUNK = 1024  # items sorted in one step (~0.5-1 ms with a key function)


async def run_in_turns(work: Generator[object, None, T], budget_s: float = STEP_BUDGET_S) -> T:
    """Run ``work`` to its end, giving the loop a turn each time its steps have held it ``budget_s``."""
    clock = time.perf_counter
    start = clock()
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if clock() - start >= budget_s:
            await asyncio.sleep(0)  # sleep-ok: a turn for the loop's other work
            start = clock()


def run_now(work: Generator[object, None, T]) -> T:
    """Run ``work`` to its end at once (a caller that is not on the loop, or a small state)."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def sorted_steps(items: list[T], key: Callable[[T], Any]) -> Generator[None, None, list[T]]:
    """``sorted(items, key=key)`` in steps: chunks of ``SORT_CHUNK`` sorted a step each, then merged an item a step
    (stable, as ``sorted``: ties keep their order)."""
    chunks = []
    for i in range(0, len(items), SORT_CHUNK):
        chunks.append(sorted(items[i : i + SORT_CHUNK], key=key))
        yield
    if len(chunks) < 2:
        return chunks[0] if chunks else []
    out = []
    for item in heapq.merge(*chunks, key=key):
        out.append(item)
        yield
    return out
