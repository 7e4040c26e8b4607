"""The StateMachine protocol (kept apart from api.py so the driver can import it without a cycle)."""

from __future__ import annotations

from typing import Protocol


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> object:
        """Apply one committed command. Deterministic; the result goes back to the proposer."""
        ...

    def snapshot(self) -> bytes:
        """msgpack bytes of the whole state (taken at the last applied index)."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's bytes."""
        ...
