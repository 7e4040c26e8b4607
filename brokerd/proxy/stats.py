"""The endpoint's counters (``/metrics``, the dashboard), and their wire form between worker processes and the
container (``workers.py``): cumulative counters, added up."""

from __future__ import annotations

from collections import Counter
from typing import Any

_SCALARS = ("messages_sent", "messages_received", "messages_acked", "telemetry_commands", "auth_refused")


class GrpcStats:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()  # (rpc, status code name) -> answered requests
        self.messages_sent = 0
        self.messages_received = 0
        self.messages_acked = 0
        self.telemetry_commands = 0  # commands the endpoint wrote to clients (settings, check-backs, ...)
        self.auth_refused = 0

    def answered(self, rpc: str, code: str) -> None:
        self.requests[(rpc, code)] += 1

    def to_wire(self) -> dict[str, Any]:
        return {"requests": [[rpc, code, n] for (rpc, code), n in self.requests.items()],
                **{k: getattr(self, k) for k in _SCALARS}}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> GrpcStats:
        """A worker's counters as it reported them (entries that do not parse are skipped)."""
        st = cls()
        for item in data.get("requests") or []:
            if isinstance(item, list) and len(item) == 3 and isinstance(item[2], int):
                st.requests[(str(item[0]), str(item[1]))] += item[2]
        for k in _SCALARS:
            v = data.get(k)
            if isinstance(v, int):
                setattr(st, k, v)
        return st

    def add(self, other: GrpcStats) -> None:
        self.requests.update(other.requests)
        for k in _SCALARS:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    @classmethod
    def total(cls, parts: list[GrpcStats]) -> GrpcStats:
        out = cls()
        for p in parts:
            out.add(p)
        return out
