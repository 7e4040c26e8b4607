"""RocketMQ `DataVersion`: the version stamp every metadata table carries.

Wire/file shape: `{"counter": N, "stateVersion": S, "timestamp": ms}`. Equality compares all three fields.
`next_version(state)` sets timestamp = now, stateVersion = state (when given) and counter += 1.
The name server and slaves compare DataVersions to decide whether a table changed.

Pure code: the clock is a parameter (`now_ms`); only the default falls back to the wall clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .jsonfields import get_int


def wall_clock_ms() -> int:
    """Wall-clock milliseconds since the epoch (the only place this package reads the clock)."""
    return time.time_ns() // 1_000_000


@dataclass
class DataVersion:
    """Mutable version stamp owned by one manager. Managers hand out copies, never their own instance."""

    counter: int = 0
    state_version: int = 0
    timestamp: int = field(default_factory=wall_clock_ms)

    def next_version(self, state_version: int | None = None, *, now_ms: int | None = None) -> None:
        """Bump: counter + 1, timestamp = now, and stateVersion = `state_version` when given."""
        self.timestamp = wall_clock_ms() if now_ms is None else now_ms
        if state_version is not None:
            self.state_version = state_version
        self.counter += 1

    def assign(self, other: DataVersion) -> None:
        """Adopt another version in place (RocketMQ `assignNewOne`)."""
        self.counter = other.counter
        self.state_version = other.state_version
        self.timestamp = other.timestamp

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: Any) -> DataVersion:
        """Parse RocketMQ's JSON shape; missing keys take defaults (timestamp 0), junk raises ValueError."""
        if d is None:
            return cls(timestamp=0)
        if not isinstance(d, dict):
            raise ValueError(f"dataVersion: expected an object, got {type(d).__name__}")
        return cls(
            counter=get_int(d, "counter", 0, "dataVersion"),
            state_version=get_int(d, "stateVersion", 0, "dataVersion"),
            timestamp=get_int(d, "timestamp", 0, "dataVersion"),
        )

    def copy(self) -> DataVersion:
        return DataVersion(self.counter, self.state_version, self.timestamp)
