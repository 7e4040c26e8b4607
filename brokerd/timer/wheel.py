"""The timer wheel, pure: time granules of ``timerPrecisionMs``, one slot per granule of a window, each slot the head
of a chain of timer-log entries (RIP-43's TimerWheel + Slot) and how many entries it holds.

Granule ``g`` covers due times ``[g * precision, (g + 1) * precision)`` and lives in slot ``g % slots``. An entry is
*placed* in a granule (``place``): its due granule, or the *floor* (the first granule not yet released) when it is
due already, or the last granule of the window ``[floor, floor + window)`` when it is due later (a roll: when that
granule comes the message is parked again). Every placement is inside the window and the wheel has more slots than
the window, so a slot never holds two live granules: a slot whose granule is below the floor is released (its
entries fired or resolved) and is simply started over.

Arrays of machine integers (``array``), not Python objects: 24 bytes per slot whatever the number of timers, and
the snapshot is their bytes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Final

EMPTY: Final = -1
MARGIN_SLOTS: Final = 64  # slots beyond the window (the reader's look-ahead past the floor fits in them)


def slots_for(window_slots: int) -> int:
    return window_slots + MARGIN_SLOTS


def granule(ms: int, precision: int) -> int:
    return ms // precision


def place(due_g: int, floor_g: int, window_slots: int) -> int:
    """The granule an entry due in ``due_g`` waits in (see the module doc); ``< due_g`` means a roll."""
    if due_g < floor_g:
        return floor_g
    last = floor_g + window_slots - 1
    return due_g if due_g <= last else last


class Wheel:
    """Chain heads by granule. ``link`` adds an entry, ``chain`` is a granule's head, ``release`` starts a slot over."""

    __slots__ = ("n", "granules", "heads", "counts")

    def __init__(self, slots: int) -> None:
        if slots <= 0:
            raise ValueError("a wheel needs at least one slot")
        self.n = slots
        self.granules = array("q")  # allocated by the first ``link`` (a broker without timers pays nothing)
        self.heads = array("q")
        self.counts = array("q")

    def _allocate(self) -> None:
        self.granules = array("q", [EMPTY]) * self.n
        self.heads = array("q", [EMPTY]) * self.n
        self.counts = array("q", [0]) * self.n

    def link(self, g: int, pos: int, floor_g: int) -> int:
        """Make timer-log position ``pos`` the head of granule ``g``'s chain; returns the previous head (EMPTY)."""
        if not self.granules:
            self._allocate()
        s = g % self.n
        held = self.granules[s]
        if held == g and self.heads[s] != EMPTY:
            prev = self.heads[s]
        elif held < floor_g or self.heads[s] == EMPTY:  # empty or released (below the floor): start it over
            prev = EMPTY
            self.granules[s] = g
            self.counts[s] = 0
        else:  # a live chain of another granule: impossible with placements inside the window (module doc);
            prev = self.heads[s]  # kept anyway, read at the earlier granule (the reader re-links the later one)
            self.granules[s] = min(g, held)
        self.heads[s] = pos
        self.counts[s] += 1
        return prev

    def chain(self, g: int) -> int:
        """Head of granule ``g``'s chain (EMPTY when the slot holds another granule or nothing)."""
        if not self.granules:
            return EMPTY
        s = g % self.n
        return self.heads[s] if self.granules[s] == g else EMPTY

    def count(self, g: int) -> int:
        if not self.granules:
            return 0
        s = g % self.n
        return self.counts[s] if self.granules[s] == g else 0

    def release(self, g: int) -> int:
        """Start granule ``g``'s slot over; returns the chain it held (EMPTY when none)."""
        if not self.granules:
            return EMPTY
        s = g % self.n
        if self.granules[s] != g:
            return EMPTY
        head = self.heads[s]
        self.granules[s], self.heads[s], self.counts[s] = EMPTY, EMPTY, 0
        return head

    def held_between(self, lo: int, hi: int) -> Iterator[int]:
        """The granules in ``[lo, hi)`` that hold a chain, ascending (a pass over the slots when shorter)."""
        if not self.granules:
            return
        if hi - lo <= self.n:
            for g in range(lo, hi):
                if self.granules[g % self.n] == g and self.heads[g % self.n] != EMPTY:
                    yield g
            return
        found = sorted(g for s, g in enumerate(self.granules) if lo <= g < hi and self.heads[s] != EMPTY)
        yield from found

    def counts_from(self, lo: int) -> Iterator[tuple[int, int]]:
        """(granule, entries) of every slot holding a granule ``>= lo``."""
        for s, c in enumerate(self.counts):
            if c:
                g = self.granules[s]
                if g >= lo:
                    yield g, c

    # ------------------------------------------------------------------ snapshot

    def to_bytes(self) -> bytes:
        return b"".join(self.parts())

    def parts(self) -> list[bytes]:
        """``to_bytes`` in its three pieces (copies: the wheel may change once they are taken)."""
        if not self.granules:
            self._allocate()
        return [self.granules.tobytes(), self.heads.tobytes(), self.counts.tobytes()]

    @classmethod
    def from_bytes(cls, blob: bytes | memoryview, slots: int) -> Wheel:
        """A wheel of ``slots`` slots from ``to_bytes``; ValueError when the size does not match."""
        if len(blob) != 24 * slots:
            raise ValueError(f"a wheel of {slots} slots is {24 * slots} bytes, not {len(blob)}")
        w = cls(slots)
        for i, arr in enumerate((w.granules, w.heads, w.counts)):
            arr[:] = array("q", bytes(blob[8 * slots * i : 8 * slots * (i + 1)]))
        return w
