"""The StateMachine protocol (kept apart from api.py so the driver can import it without a cycle)."""

from __future__ import annotations

from typing import Protocol


class StateMachine(Protocol):
    """Called only from the event loop the RaftNode runs on, with one optional exception:

    a state machine that sets a class attribute `snapshot_off_loop = True` has `snapshot()` called in a
    worker thread during checkpoints. The driver guarantees that no `apply`/`restore` runs meanwhile
    (its Ready loop waits for the snapshot), so it is safe as long as readers running on the loop at
    the same time do not mutate anything `snapshot()` reads. The loop still shares the GIL with the
    thread, but is no longer blocked for the whole serialisation.
    """

    def apply(self, index: int, data: bytes) -> object:
        """Apply one committed command. Deterministic; the result goes back to the proposer."""
        ...

    def snapshot(self) -> bytes:
        """msgpack bytes of the whole state (taken at the last applied index)."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's bytes."""
        ...
