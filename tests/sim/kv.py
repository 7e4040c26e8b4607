"""A tiny deterministic KV state machine for the simulator and tests (implements api.StateMachine).

Commands are msgpack `[key, value]`; the state maps key -> (value, raft index of the write), so a read
also reports which write it observed (used by the simulator's stale-read check).
"""

from __future__ import annotations

import msgpack


class KVStateMachine:
    def __init__(self) -> None:
        self.data: dict[str, tuple[int, int]] = {}
        self.applied_index = 0
        self.restores = 0

    def apply(self, index: int, data: bytes) -> object:
        key, value = msgpack.unpackb(data)
        self.data[key] = (value, index)
        self.applied_index = index
        return index

    def snapshot(self) -> bytes:
        items = sorted((k, v, i) for k, (v, i) in self.data.items())
        out: bytes = msgpack.packb([self.applied_index, items])
        return out

    def restore(self, data: bytes) -> None:
        applied, items = msgpack.unpackb(data)
        self.data = {k: (v, i) for k, v, i in items}
        self.applied_index = applied
        self.restores += 1

    def get(self, key: str) -> tuple[int | None, int]:
        value, index = self.data.get(key, (None, 0))
        return value, index

    def digest(self) -> int:
        return hash(tuple(sorted(self.data.items())))


def encode_put(key: str, value: int) -> bytes:
    out: bytes = msgpack.packb([key, value])
    return out
