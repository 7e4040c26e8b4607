"""Client reads that may need the tier (tiered storage): tried at once without blocking on the tier; when a chunk
must be fetched first, the answer comes from a task that fetches it off the event loop and reads again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from brokerd.store.message_store import MessageStore
from brokerd.store.tier import TierMiss

T = TypeVar("T")


def _same(v: object) -> object:
    return v


def answer_read(store: MessageStore, read: Callable[[], T],
                answer: Callable[[T], object] = _same) -> object:  # fmt: skip
    """``answer(read())`` now (``read`` may be a request handler's whole body), or an awaitable of it when ``read``
    needs tier chunks that are not cached."""
    try:
        with store.tier_nowait():
            return answer(read())
    except TierMiss as miss:
        return _after_fetch(store, miss, read, answer)


async def _after_fetch(store: MessageStore, miss: TierMiss, read: Callable[[], T],
                       answer: Callable[[T], object]) -> object:  # fmt: skip
    await miss.fetch()
    res = answer(await store.read_async(read))
    if isinstance(res, asyncio.Future):  # a parked long poll: its answer comes later
        res = await res
    return res
