"""Simulated network: per-message delay (so reordering), drop, duplication, and partitions.

Partitions are a set of blocked directed links, so both symmetric and asymmetric cuts are possible.
All randomness comes from the simulation's seeded Random.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class NetworkFaults:
    drop: float = 0.0
    duplicate: float = 0.0
    delay_ms_min: float = 0.5
    delay_ms_max: float = 3.0
    blocked: set[tuple[str, str]] = field(default_factory=set)  # (from, to) links that drop everything

    def heal(self) -> None:
        self.blocked.clear()
        self.drop = 0.0
        self.duplicate = 0.0


class SimNetwork:
    def __init__(self, rng: random.Random, node_ids: list[str]) -> None:
        self.rng = rng
        self.node_ids = node_ids
        self.faults = NetworkFaults()
        self.sent = 0
        self.dropped = 0

    def deliveries(self, frm: str, to: str) -> list[float]:
        """Delays (ms) at which one message from `frm` to `to` arrives; empty if lost."""
        f = self.faults
        self.sent += 1
        if (frm, to) in f.blocked or self.rng.random() < f.drop:
            self.dropped += 1
            return []
        out = [self.rng.uniform(f.delay_ms_min, f.delay_ms_max)]
        if self.rng.random() < f.duplicate:
            out.append(self.rng.uniform(f.delay_ms_min, f.delay_ms_max * 4))
        return out

    def isolate(self, node: str) -> None:
        for other in self.node_ids:
            if other != node:
                self.faults.blocked.add((node, other))
                self.faults.blocked.add((other, node))

    def split(self, group: set[str]) -> None:
        for a in self.node_ids:
            for b in self.node_ids:
                if (a in group) != (b in group):
                    self.faults.blocked.add((a, b))

    def one_way(self, frm: str, to: str) -> None:
        self.faults.blocked.add((frm, to))
