"""``ReplicaLog`` over a real message store: what the HA cores need, on the store's public API.

The store hands out zero-copy views of its mapped segments; replication copies each chunk once (one C-level
``bytes()`` of up to ``haTransferBatchSize`` bytes) before it leaves this adapter, so no view outlives a
segment the store may close (expiry, truncation, shutdown) while the chunk waits in a socket buffer.
"""

from __future__ import annotations

from typing import Protocol

from brokerd.store.epoch import EpochEntry


class EpochHistory(Protocol):
    def last_epoch(self) -> int: ...

    def truncate_suffix_by_epoch(self, epoch: int) -> None: ...


class ReplicaStore(Protocol):
    """The parts of ``brokerd.store.message_store.MessageStore`` replication uses."""

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def min_phy_offset(self) -> int: ...

    @property
    def confirm_offset(self) -> int: ...

    @property
    def epochs(self) -> EpochHistory: ...

    def set_confirm_offset(self, offset: int) -> None: ...

    def read_range(self, offset: int, max_bytes: int) -> memoryview: ...

    def append_raw(self, offset: int, data: bytes | memoryview) -> int: ...

    def truncate_dirty_files(self, offset: int) -> None: ...

    def epoch_entries(self) -> list[EpochEntry]: ...

    def append_epoch(self, epoch: int, start_offset: int) -> bool: ...


class StoreReplicaLog:
    """Adapts a ``ReplicaStore`` to ``brokerd.ha.log.ReplicaLog``."""

    def __init__(self, store: ReplicaStore) -> None:
        self.store = store

    @property
    def max_phy_offset(self) -> int:
        return self.store.max_phy_offset

    @property
    def min_phy_offset(self) -> int:
        return self.store.min_phy_offset

    @property
    def confirm_offset(self) -> int:
        return self.store.confirm_offset

    def set_confirm_offset(self, offset: int) -> None:
        self.store.set_confirm_offset(offset)

    def read_range(self, offset: int, max_bytes: int) -> bytes:
        view = self.store.read_range(offset, max_bytes)
        try:
            return bytes(view)
        finally:
            view.release()

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        return self.store.append_raw(offset, data)

    def truncate_dirty_files(self, offset: int) -> None:
        self.store.truncate_dirty_files(offset)

    def epoch_entries(self) -> list[EpochEntry]:
        return self.store.epoch_entries()

    def append_epoch(self, epoch: int, start_offset: int) -> bool:
        return self.store.append_epoch(epoch, start_offset)

    def truncate_epochs_from(self, epoch: int) -> None:
        self.store.epochs.truncate_suffix_by_epoch(epoch)

    def last_epoch(self) -> int:
        return self.store.epochs.last_epoch()
