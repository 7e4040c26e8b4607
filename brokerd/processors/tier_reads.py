"""Client reads that may need the tier (tiered storage): tried at once without blocking on the tier; when a chunk
must be fetched first, the answer comes from a task that fetches it off the event loop and reads again."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from brokerd.remoting.command import RemotingCommand
from brokerd.store.message_store import MessageStore
from brokerd.store.tier import TierMiss

T = TypeVar("T")


def answer_read(store: MessageStore, read: Callable[[], T],
                answer: Callable[[T], RemotingCommand]) -> RemotingCommand | Awaitable[RemotingCommand]:  # fmt: skip
    """``answer(read())`` now, or an awaitable of it when ``read`` needs tier chunks that are not cached."""
    try:
        with store.tier_nowait():
            return answer(read())
    except TierMiss as miss:
        return _after_fetch(store, miss, read, answer)


async def _after_fetch(store: MessageStore, miss: TierMiss, read: Callable[[], T],
                       answer: Callable[[T], RemotingCommand]) -> RemotingCommand:  # fmt: skip
    await miss.fetch()
    return answer(await store.read_async(read))


async def retry_after_fetch(store: MessageStore, miss: TierMiss, attempt: Callable[[], Any]) -> Any:
    """Run ``attempt`` (a request handler's body, its store reads raising TierMiss) until the tier chunks it needs
    are cached; returns what it returns."""
    while True:
        await miss.fetch()
        try:
            with store.tier_nowait():
                return attempt()
        except TierMiss as again:
            miss = again
