"""Work run in loop turns (brokerd/loopwork.py): its result, and the turns it gives the loop."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Generator

import pytest

from brokerd import loopwork
from brokerd.loopwork import run_in_turns, run_now, sorted_steps


def work(steps: int, log: list[str]) -> Generator[None, None, int]:
    for i in range(steps):
        log.append(f"step{i}")
        yield
    return steps * 10


async def test_the_result_is_the_generators_and_other_callbacks_run_between_steps_past_the_budget() -> None:
    log: list[str] = []

    async def other() -> None:
        for i in range(3):
            log.append(f"other{i}")
            await asyncio.sleep(0)  # sleep-ok: one turn each

    task = asyncio.get_running_loop().create_task(other())
    assert await run_in_turns(work(3, log), budget_s=0.0) == 30
    await task
    assert log.index("other0") < log.index("step1") and log.index("other1") < log.index("step2")


async def test_within_the_budget_the_steps_run_in_one_turn() -> None:
    log: list[str] = []
    loop = asyncio.get_running_loop()
    loop.call_soon(log.append, "other")
    assert await run_in_turns(work(50, log), budget_s=60.0) == 500
    assert log[:50] == [f"step{i}" for i in range(50)]


@pytest.mark.parametrize("n", [0, 1, 5, 64, 1000])
def test_sorted_in_steps_is_sorted_and_stable(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loopwork, "SORT_CHUNK", 16)
    rng = random.Random(n)
    items = [(rng.randrange(20), i) for i in range(n)]  # ties on the key: their order must stay
    assert run_now(sorted_steps(items, key=lambda it: it[0])) == sorted(items, key=lambda it: it[0])
