"""What the store needs of a tier (``brokerd.tiered`` implements it): reads of commit-log bytes that are gone from
local disk, and the bounds local expiry must respect. The store never imports the tiered package.

A read whose chunk is not cached raises ``TierMiss``; the store's sync read methods then fetch the chunk (blocking)
and read again, or, inside ``MessageStore.tier_nowait()``, let the miss through so an async caller can ``await
miss.fetch()`` off the event loop and retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol


class TierMiss(Exception):
    """A tier chunk must be fetched before the read can be answered."""

    def __init__(self, start: int, fetch: Callable[[], Awaitable[None]], fetch_blocking: Callable[[], None]) -> None:
        super().__init__(f"tier chunk at {start} not cached")
        self.start = start
        self.fetch = fetch
        self.fetch_blocking = fetch_blocking


class TierView(Protocol):
    @property
    def min_offset(self) -> int:
        """The lowest commit-log offset the tier holds (consume queues and index are kept from here)."""

    @property
    def end(self) -> int:
        """Everything below is in the tier: local segments ending at or below it may expire."""

    def read(self, phys: int, size: int) -> bytes | None:
        """``size`` bytes at ``phys`` from the tier (None when not there); raises TierMiss when not cached."""
