"""Throughput history, pure: samples of the brokers' `/metrics` counters taken at a fixed interval, turned into
per-second rates for the dashboard's charts (a counter that went down, i.e. a restarted broker, counts as 0)."""

from __future__ import annotations

from collections import deque
from typing import Any

RATE_SERIES = ("rocketmq_messages_in_total", "rocketmq_messages_out_total", "rocketmq_bytes_in_total",
               "rocketmq_bytes_out_total", "rocketmq_errors_total")


class History:
    def __init__(self, max_samples: int = 150) -> None:
        if max_samples < 2:
            raise ValueError("max_samples must be >= 2")
        self._samples: deque[tuple[float, dict[str, dict[str, int]]]] = deque(maxlen=max_samples)

    def add(self, t: float, counters: dict[str, dict[str, int]]) -> None:
        """One sample at time `t` (seconds): broker identity -> counter name -> value."""
        if self._samples and t <= self._samples[-1][0]:
            return
        self._samples.append((t, counters))

    def __len__(self) -> int:
        return len(self._samples)

    def rates(self) -> dict[str, Any]:
        """{"t": [end time of each interval], "brokers": {identity: {series: [per-second rate, ...]}}}; a broker
        missing from a sample (added or removed meanwhile) has no rate for that interval (null)."""
        samples = list(self._samples)
        times: list[float] = []
        idents = sorted({i for _, c in samples for i in c})
        out: dict[str, dict[str, list[float | None]]] = {i: {s: [] for s in RATE_SERIES} for i in idents}
        for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
            dt = t1 - t0
            times.append(t1)
            for ident in idents:
                before, after = c0.get(ident), c1.get(ident)
                for s in RATE_SERIES:
                    if before is None or after is None or s not in before or s not in after:
                        out[ident][s].append(None)
                    else:
                        out[ident][s].append(round(max(0, after[s] - before[s]) / dt, 3))
        return {"t": times, "brokers": out}
