"""The timer service's figures for ``/metrics`` and the dashboard: counters, the fire lateness histogram (how long
after its due time a timer reached its real topic) and pending timers by how far ahead they are due. Pure."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Final

LATENESS_BUCKETS_MS: Final = (1, 5, 10, 25, 50, 100, 150, 250, 500, 1000, 2500, 5000, 10_000, 60_000)
DUE_BUCKETS_S: Final = (1, 10, 60, 600, 3600, 21_600, 86_400)  # pending timers due within (seconds); then +Inf


@dataclass
class Histogram:
    bounds: tuple[int, ...]
    counts: list[int] = field(default_factory=list)
    total: int = 0
    sum: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.total += 1
        self.sum += v

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count) pairs as Prometheus has them, the last one ``+Inf``."""
        out, acc = [], 0
        for b, c in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            acc += c
            out.append((b, acc))
        return out

    def quantile(self, q: float) -> float:
        """An upper bound of the ``q`` quantile (the bucket bound it falls in; -1 when empty)."""
        if not self.total:
            return -1.0
        rank, acc = q * self.total, 0
        for i, c in enumerate(self.counts):
            acc += c
            if acc >= rank:
                return float(self.bounds[i]) if i < len(self.bounds) else float("inf")
        return float("inf")


@dataclass
class TimerStats:
    parked: int = 0  # timer messages accepted (stored in the timer topic by a send or a commit)
    fired: int = 0  # delivered into their real topic by this broker
    rolled: int = 0  # parked again (due beyond the wheel's window)
    recalled: int = 0
    dropped: int = 0  # resolved without a delivery (no real topic, an illegal message, expired from the log)
    refused: int = 0  # timer sends answered with an error (beyond the max delay, malformed)
    lateness: Histogram = field(default_factory=lambda: Histogram(LATENESS_BUCKETS_MS))


def due_buckets(now_ms: int, precision: int, counts: list[tuple[int, int]], ready: int) -> list[tuple[str, int]]:
    """Pending timers by due time as cumulative (le seconds, count) pairs: ``counts`` are (granule, entries) of the
    wheel, ``ready`` the timers already read for firing (due within the first bucket)."""
    per = [0] * (len(DUE_BUCKETS_S) + 1)
    per[0] += ready
    for g, n in counts:
        ahead_s = max(0.0, (g * precision - now_ms) / 1000)
        per[bisect_left(DUE_BUCKETS_S, ahead_s)] += n
    out, acc = [], 0
    for b, c in zip((*map(str, DUE_BUCKETS_S), "+Inf"), per, strict=True):
        acc += c
        out.append((b, acc))
    return out
