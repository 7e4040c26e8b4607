"""Change records are never expired before a snapshot covers them (RIP-81 on a store that expires its log).

A broker's store plus its snapshot files must always rebuild its metadata: the compaction job and
``brokerd.sync.export`` read the latest snapshot and the change records after its positions. So the commit-log
segments holding records no snapshot covers must stay. ``SnapshotKeeper`` knows the latest snapshot file of this
broker and where the first record it does not cover lies in the local log (``floor``); the store's expiry asks
the metadata sync's retention guard before deleting segments (``MessageStore.set_retention_guard``), and the guard
writes a snapshot first when the segments to go hold uncovered records (``MetadataSync.retention_guard``).

Only records still in the local log count: one already gone (expired before this rule existed, or never
replicated to an empty slave) cannot be kept; the next snapshot covers it. Pure code except the snapshot files.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from brokerd.store.queue_store import ConsumeQueueStore
from brokerd.sync.records import SYNC_TOPICS
from brokerd.sync.snapshot import Snapshot, SnapshotStore

NOTHING_UNCOVERED = sys.maxsize


class RecordQueues(Protocol):
    """What the keeper reads of the store: the sync topics' consume queues and the log's bounds."""

    @property
    def min_phy_offset(self) -> int: ...

    @property
    def dispatched_offset(self) -> int: ...

    @property
    def queue_store(self) -> ConsumeQueueStore: ...

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...


class SnapshotKeeper:
    """This broker's snapshot files and what the latest of them covers."""

    def __init__(self, store: RecordQueues, snapshots: SnapshotStore) -> None:
        self.store = store
        self.snapshots = snapshots
        self._latest: Snapshot | None = None
        self._loaded = False
        self.written = 0

    @property
    def latest(self) -> Snapshot | None:
        """What the newest snapshot file covers, without its sections (read once; then kept up to date by
        ``write``)."""
        if not self._loaded:
            snap = self.snapshots.latest()
            self._latest = snap.head() if snap is not None else None
            self._loaded = True
        return self._latest

    def write(self, snap: Snapshot) -> None:
        """Write a snapshot file (blocking: fsync'ed); it becomes ``latest`` unless a newer one was written."""
        self.write_encoded(snap.head(), snap.encode())

    def write_encoded(self, head: Snapshot, data: bytes) -> None:
        """``write`` of a snapshot already encoded (``data``; ``head``: what it covers, ``Snapshot.head``)."""
        self.snapshots.write_encoded(data, head.created_ms)
        self.written += 1
        cur = self.latest
        if cur is None or head.created_ms >= cur.created_ms:
            self._latest = head

    def covered(self) -> dict[str, int]:
        snap = self.latest
        return dict(snap.positions) if snap is not None else {t: 0 for t in SYNC_TOPICS}

    def floor(self) -> int:
        """The commit-log offset of the first change record in the local log that the latest snapshot does not
        cover (``NOTHING_UNCOVERED`` when there is none): segments ending at or below it hold no such record."""
        covered = self.covered()
        return min((self._first_local(t, covered.get(t, 0)) for t in sorted(SYNC_TOPICS)), default=NOTHING_UNCOVERED)

    def _first_local(self, topic: str, start: int) -> int:
        """Phys offset of the first record of ``topic`` at or after queue offset ``start`` still in the local log."""
        st = self.store
        end = st.max_offset_in_queue(topic, 0)
        lo = max(start, st.min_offset_in_queue(topic, 0))
        queue = st.queue_store.get(topic, 0)
        if queue is None or lo >= end:
            return NOTHING_UNCOVERED
        log_min = st.min_phy_offset
        hi = end  # binary search: the queue's phys offsets grow with its queue offsets
        while lo < hi:
            mid = (lo + hi) // 2
            entry = queue.entry(mid)
            if entry is not None and entry[0] >= log_min:
                hi = mid
            else:
                lo = mid + 1
        entry = queue.entry(lo) if lo < end else None
        return entry[0] if entry is not None else NOTHING_UNCOVERED

    def log_offset(self, positions: dict[str, int]) -> int:
        """The commit-log offset up to which a snapshot at ``positions`` covers every change record: the first
        record not covered, or the dispatched end of the log when every dispatched record is."""
        out = self.store.dispatched_offset
        for topic in SYNC_TOPICS:
            queue = self.store.queue_store.get(topic, 0)
            pos = positions.get(topic, 0)
            if queue is not None and pos < self.store.max_offset_in_queue(topic, 0):
                entry = queue.entry(pos)
                if entry is not None:
                    out = min(out, entry[0])
        return out

    def info(self) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO fields: the latest snapshot's time and log position (-1: none yet)."""
        snap = self.latest
        return {"metadataSnapshotTime": snap.created_ms if snap is not None else -1,
                "metadataSnapshotLogOffset": snap.log_offset if snap is not None else -1,
                "metadataSnapshotsWritten": self.written}  # fmt: skip
