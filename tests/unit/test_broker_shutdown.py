"""A broker's shutdown waits for its background tasks and cancels again one that swallowed the cancellation (Python
3.11's ``asyncio.wait_for`` drops a cancellation that lands as its future completes: a name-server registration
answered at that moment kept the registration loop running, and the shutdown, a container stop, hung)."""

from __future__ import annotations

import asyncio

from brokerd.broker import cancel_and_wait


async def test_a_task_that_swallows_its_cancellation_is_cancelled_again() -> None:
    swallowed = 0

    async def registration_loop() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(10)  # sleep-ok: a periodic loop's wait, cancelled by the test
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1  # what the lost cancellation looks like: the loop runs on

    stubborn = asyncio.create_task(registration_loop())
    plain = asyncio.create_task(asyncio.sleep(10))  # sleep-ok: a task that honours its cancellation
    await asyncio.sleep(0)  # sleep-ok: let both start
    await asyncio.wait_for(cancel_and_wait([stubborn, plain]), 5)
    assert stubborn.cancelled() and plain.cancelled() and swallowed == 1
