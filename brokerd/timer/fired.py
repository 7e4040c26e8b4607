"""Which timers are resolved (fired, rolled, recalled or dropped), by their queue offset in the timer topic, pure.

A bitmap in chunks of ``CHUNK`` offsets: every offset below ``base`` is resolved; a chunk is absent (none of its
offsets resolved), partial (a bytearray) or full (``None``: all resolved). Resolved timers are usually contiguous
(timers fire roughly in the order they were sent), so the memory is a few chunks; the worst case is one partial
chunk (512 bytes) per pending timer. The service rebuilds it from its marker queue (a STATE snapshot, then the
batches and recalls after it): it is never persisted apart from the commit log.
"""

from __future__ import annotations

import zlib
from typing import Final

import msgpack

CHUNK: Final = 4096
_BYTES: Final = CHUNK // 8


class FiredSet:
    __slots__ = ("base", "_chunks", "_counts", "resolved_above")

    def __init__(self, base: int = 0) -> None:
        self.base = 0  # every offset below is resolved
        self._chunks: dict[int, bytearray | None] = {}
        self._counts: dict[int, int] = {}
        self.resolved_above = 0  # resolved offsets >= base
        self.mark_below(base)

    def is_set(self, q: int) -> bool:
        if q < self.base:
            return True
        c, bit = divmod(q, CHUNK)
        chunk = self._chunks.get(c, b"")
        if chunk is None:
            return True
        return bool(chunk) and bool(chunk[bit >> 3] & (1 << (bit & 7)))

    def mark(self, q: int) -> bool:
        """Resolve ``q``; False when it was already."""
        if q < self.base or not self._set_bit(q):
            return False
        self.resolved_above += 1
        if self._chunks.get(q // CHUNK, b"") is None:
            self._advance()
        return True

    def mark_below(self, q: int) -> None:
        """Everything below ``q`` is resolved (their records expired with the log)."""
        if q <= self.base:
            return
        removed = 0  # resolved offsets in [base, q): they leave ``resolved_above``
        for c in sorted(c for c in self._chunks if c * CHUNK < q):
            removed += self._resolved_in(c, max(c * CHUNK, self.base), min((c + 1) * CHUNK, q))
            if (c + 1) * CHUNK <= q:
                del self._chunks[c]
                self._counts.pop(c, None)
        self.base = q
        self.resolved_above -= removed
        c = q // CHUNK
        if q % CHUNK and self._chunks.get(c, b"") is not None:  # the offsets below the base are set in its chunk
            for i in range(c * CHUNK, q):
                self._set_bit(i)
        self._advance()

    def _set_bit(self, q: int) -> bool:
        c, bit = divmod(q, CHUNK)
        if c in self._chunks:
            chunk = self._chunks[c]
            if chunk is None:
                return False
        else:
            chunk = self._chunks[c] = bytearray(_BYTES)
            self._counts[c] = 0
        mask = 1 << (bit & 7)
        if chunk[bit >> 3] & mask:
            return False
        chunk[bit >> 3] |= mask
        n = self._counts[c] = self._counts[c] + 1
        if n == CHUNK:
            self._chunks[c] = None
            del self._counts[c]
        return True

    def _resolved_in(self, c: int, lo: int, hi: int) -> int:
        """Resolved offsets of chunk ``c`` in ``[lo, hi)``."""
        chunk = self._chunks.get(c, b"")
        if chunk is None:
            return max(0, hi - lo)
        if not chunk:
            return 0
        base = c * CHUNK
        return sum(1 for i in range(lo - base, hi - base) if chunk[i >> 3] & (1 << (i & 7)))

    def _advance(self) -> None:
        """Move ``base`` over the full chunks at its start."""
        c = self.base // CHUNK
        while c in self._chunks and self._chunks[c] is None:
            del self._chunks[c]
            self.resolved_above -= (c + 1) * CHUNK - self.base
            self.base = (c + 1) * CHUNK
            c += 1

    def pending(self, end: int) -> int:
        """Unresolved offsets in ``[base, end)``."""
        return max(0, end - self.base - self.resolved_above)

    def first_unresolved(self, start: int, end: int) -> int:
        """The first unresolved offset in ``[max(start, base), end)`` (``end`` when none)."""
        q = max(start, self.base)
        while q < end:
            c, bit = divmod(q, CHUNK)
            chunk = self._chunks.get(c, b"")
            if chunk is None:
                q = (c + 1) * CHUNK
                continue
            if not chunk or not chunk[bit >> 3] & (1 << (bit & 7)):
                return q
            q += 1
        return end

    # ------------------------------------------------------------------ snapshot

    def encode(self) -> bytes:
        chunks = [[c, None if v is None else bytes(v)] for c, v in sorted(self._chunks.items())]
        return zlib.compress(msgpack.packb([self.base, chunks]), 1)

    @classmethod
    def decode(cls, blob: bytes) -> FiredSet:
        base, chunks = msgpack.unpackb(zlib.decompress(blob))
        out = cls(int(base))
        out.load_chunks(chunks)
        return out

    def load_chunks(self, chunks: list[list[object]]) -> None:
        """The chunks of an encoded set (``encode``), over this one's base."""
        for c_raw, v in chunks:
            c = int(c_raw)  # type: ignore[call-overload]
            if v is None:
                self._chunks[c] = None
            else:
                arr = bytearray(v)  # type: ignore[call-overload]
                if len(arr) != _BYTES:
                    raise ValueError("bad fired-set chunk")
                self._chunks[c] = arr
                self._counts[c] = sum(bin(b).count("1") for b in arr)
            self.resolved_above += self._resolved_in(c, max(c * CHUNK, self.base), (c + 1) * CHUNK)
        self._advance()
