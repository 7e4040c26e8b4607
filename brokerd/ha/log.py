"""What the HA core needs from a store (``ReplicaLog``), and an in-memory implementation for tests/simulation.

The names follow ``brokerd.store.message_store.MessageStore`` so that an adapter is a few lines: the store already
has ``max_phy_offset``, ``min_phy_offset``, ``confirm_offset``, ``set_confirm_offset``, ``read_range``,
``append_raw``, ``truncate_dirty_files`` (which also drops epochs starting at/after the offset),
``append_epoch`` and ``epoch_entries``; an adapter adds ``truncate_epochs_from`` (``epochs.truncate_suffix_by_epoch``)
and ``last_epoch`` (``epochs.last_epoch()``).

The bytes are opaque to the HA core: it never parses records. Truncation points the core asks for are record
boundaries except when equal to the current max offset (a slave's max may end mid-record); the core never asks
to truncate to its own max offset.
"""

from __future__ import annotations

from typing import Protocol

from brokerd.store.epoch import EpochEntry


class ReplicaLog(Protocol):
    """One broker's commit log and epoch history, as the HA core sees them."""

    @property
    def max_phy_offset(self) -> int:
        """End of the log (next append position)."""
        ...

    @property
    def min_phy_offset(self) -> int:
        """First offset still held (older files may have expired)."""
        ...

    @property
    def confirm_offset(self) -> int: ...

    def set_confirm_offset(self, offset: int) -> None: ...

    def read_range(self, offset: int, max_bytes: int) -> bytes | memoryview:
        """Up to ``max_bytes`` raw log bytes from ``offset`` (may return fewer, e.g. at a file end; empty at
        the max offset)."""
        ...

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append replicated bytes at ``offset`` (== max offset, or any offset when the log is empty);
        returns the new max offset."""
        ...

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log back to ``offset`` and drop the epoch entries starting at or after it."""
        ...

    def epoch_entries(self) -> list[EpochEntry]: ...

    def append_epoch(self, epoch: int, start_offset: int) -> bool:
        """False (nothing changes) unless both are strictly larger than the last entry's."""
        ...

    def truncate_epochs_from(self, epoch: int) -> None:
        """Drop the epoch entries whose epoch is >= ``epoch``."""
        ...

    def last_epoch(self) -> int:
        """The newest entry's epoch, 0 when there is none."""
        ...


class MemoryLog:
    """A ``ReplicaLog`` in memory. ``read_range`` returns a copy (the buffer keeps growing)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.base = 0  # offset of data[0]
        self.confirm = 0
        self.epochs: list[EpochEntry] = []

    @property
    def max_phy_offset(self) -> int:
        return self.base + len(self.data)

    @property
    def min_phy_offset(self) -> int:
        return self.base

    @property
    def confirm_offset(self) -> int:
        return self.confirm

    def set_confirm_offset(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"confirm offset {offset} < 0")
        self.confirm = offset

    def read_range(self, offset: int, max_bytes: int) -> bytes:
        if not self.base <= offset <= self.max_phy_offset:
            raise ValueError(f"read at {offset} outside [{self.base}, {self.max_phy_offset}]")
        start = offset - self.base
        return bytes(self.data[start : start + max_bytes])

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        if not self.data and offset != self.max_phy_offset:
            self.base = offset  # an empty log starts wherever the master starts sending
        elif offset != self.max_phy_offset:
            raise ValueError(f"append at {offset} but the log ends at {self.max_phy_offset}")
        self.data += data
        return self.max_phy_offset

    def truncate_dirty_files(self, offset: int) -> None:
        if not self.base <= offset <= self.max_phy_offset:
            raise ValueError(f"truncate to {offset} outside [{self.base}, {self.max_phy_offset}]")
        del self.data[offset - self.base :]
        self.confirm = min(self.confirm, offset)
        self.epochs = [e for e in self.epochs if e.start_offset < offset]

    def epoch_entries(self) -> list[EpochEntry]:
        return list(self.epochs)

    def append_epoch(self, epoch: int, start_offset: int) -> bool:
        last = self.epochs[-1] if self.epochs else None
        if last is not None and (epoch <= last.epoch or start_offset <= last.start_offset):
            return False
        self.epochs.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_epochs_from(self, epoch: int) -> None:
        self.epochs = [e for e in self.epochs if e.epoch < epoch]

    def last_epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0

    def snapshot(self) -> bytes:
        """The held bytes (from ``min_phy_offset``)."""
        return bytes(self.data)
