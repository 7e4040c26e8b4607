"""Durable-state records and recovery rules, shared by the file WAL (wal.py) and the simulator's disk.

Pure: no files here. A Ready becomes a list of records appended to the log in one write + one fsync:


- `(REC_SNAPSHOT, index, term)`  marker: the log was reset to a snapshot; forget every earlier entry
- `(REC_ENTRIES, first_index, [[term, kind, data], ...])`  overwrites the suffix from first_index on
- `(REC_HARD_STATE, term, vote, commit)`

The snapshot image itself lives in the snapshot store and is written (atomically) *before* its marker.
Recovery = newest snapshot image + replay of the records, with the rule in `recover()` for a crash
between writing the image and writing its marker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from controller.raft.types import Entry, HardState, Ready, Snapshot

REC_ENTRIES: Final = 1
REC_HARD_STATE: Final = 2
REC_SNAPSHOT: Final = 3

Record = tuple[Any, ...]


class StorageCorruptionError(Exception):
    """Durable state is inconsistent in a way a crash cannot explain; refuse to start."""


def entries_record(entries: list[Entry]) -> Record:
    return (REC_ENTRIES, entries[0].index, [[e.term, e.kind, e.data] for e in entries])


def hard_state_record(hs: HardState) -> Record:
    return (REC_HARD_STATE, hs.term, hs.vote, hs.commit)


def snapshot_record(index: int, term: int) -> Record:
    return (REC_SNAPSHOT, index, term)


def records_for_ready(rd: Ready) -> list[Record]:
    """The WAL records for one Ready, in write order: marker, hard state, entries.

    The hard state goes before the entries so that a torn write can never leave entries of a term
    newer than the durable current term.
    """
    out: list[Record] = []
    if rd.snapshot is not None:
        out.append(snapshot_record(rd.snapshot.index, rd.snapshot.term))
    if rd.hard_state is not None:
        out.append(hard_state_record(rd.hard_state))
    if rd.entries:
        out.append(entries_record(rd.entries))
    return out


@dataclass(slots=True)
class WalState:
    """Result of replaying records: the last hard state, the last snapshot marker and the live entries."""

    hard_state: HardState | None = None
    marker: tuple[int, int] | None = None
    entries: list[Entry] = field(default_factory=list)

    def last_index(self) -> int:
        if self.entries:
            return self.entries[-1].index
        return self.marker[0] if self.marker else 0


def replay(records: Iterable[Record], state: WalState | None = None) -> WalState:
    st = state or WalState()
    for rec in records:
        kind = rec[0]
        if kind == REC_HARD_STATE:
            st.hard_state = HardState(int(rec[1]), str(rec[2]), int(rec[3]))
        elif kind == REC_SNAPSHOT:
            st.marker = (int(rec[1]), int(rec[2]))
            st.entries = []
        elif kind == REC_ENTRIES:
            _replay_entries(st, int(rec[1]), rec[2])
        else:
            raise StorageCorruptionError(f"unknown record kind {kind!r}")
    return st


def _replay_entries(st: WalState, first: int, raw: list[Any]) -> None:
    last = st.last_index()
    if first > last + 1:
        raise StorageCorruptionError(f"gap in log: entries from {first} after {last}")
    if st.entries and first <= st.entries[0].index:
        st.entries = []
    elif st.entries:
        del st.entries[first - st.entries[0].index :]
    st.entries.extend(Entry(first + i, int(t), int(k), bytes(d)) for i, (t, k, d) in enumerate(raw))


@dataclass(slots=True)
class RecoveredState:
    hard_state: HardState
    snapshot: Snapshot | None
    entries: list[Entry]
    # When set, the WAL does not replay to this state (a snapshot image newer than its last marker):
    # the caller must `rotate` these records into a fresh WAL before appending anything.
    rewrite: list[Record] | None = None


def recover(snapshot: Snapshot | None, wal: WalState) -> RecoveredState:
    """Combine the newest snapshot image with the replayed WAL into a consistent starting state.

    If the image is newer than the WAL's last marker, the node crashed after saving a received
    snapshot but before logging its marker: keep the WAL entries only if they contain the snapshot's
    (index, term) (then they extend it, by log matching); otherwise they belong to a divergent history
    and are dropped.
    """
    entries = wal.entries
    marker = wal.marker
    rewrite = False
    if snapshot is None:
        if marker is not None:
            raise StorageCorruptionError(f"WAL references snapshot {marker} but no snapshot image exists")
    else:
        if marker is not None and marker[0] > snapshot.index:
            raise StorageCorruptionError(f"WAL marker {marker} is newer than snapshot image {snapshot.index}")
        if marker is None or marker[0] < snapshot.index:
            rewrite = True
            keep = any(e.index == snapshot.index and e.term == snapshot.term for e in entries)
            if not keep:
                entries = []
        entries = [e for e in entries if e.index > snapshot.index]
        if entries and entries[0].index != snapshot.index + 1:
            raise StorageCorruptionError(f"entries start at {entries[0].index} after snapshot {snapshot.index}")
    hs = wal.hard_state or HardState()
    floor = snapshot.index if snapshot else 0
    last = entries[-1].index if entries else floor
    hs = HardState(hs.term, hs.vote, min(max(hs.commit, floor), last))
    out = RecoveredState(hs, snapshot, entries)
    if rewrite and snapshot is not None:
        recs: list[Record] = [snapshot_record(snapshot.index, snapshot.term), hard_state_record(hs)]
        if entries:
            recs.append(entries_record(entries))
        out.rewrite = recs
    return out


# ---------------------------------------------------------------------- disk operation plans
# One Ready (or one local checkpoint) becomes a short list of disk operations that the driver runs
# against its WAL and snapshot store, and the simulator against its simulated disk:
#   ("image", Snapshot)         save the snapshot image atomically (temp file + fsync + rename)
#   ("append", [Record, ...])   append to the current WAL segment (fsync when the Ready must sync)
#   ("rotate", [Record, ...])   write a new self-contained segment atomically, then drop older ones
DiskOp = tuple[str, Any]


def plan_ready(rd: Ready, durable_hs: HardState) -> list[DiskOp]:
    """Disk operations persisting `rd`; `durable_hs` is the hard state already on disk."""
    if rd.snapshot is None:
        plain = records_for_ready(rd)
        return [("append", plain)] if plain else []
    snap = rd.snapshot
    recs: list[Record] = [snapshot_record(snap.index, snap.term), hard_state_record(rd.hard_state or durable_hs)]
    if rd.entries:
        recs.append(entries_record(rd.entries))
    return [("image", snap), ("rotate", recs)]


def plan_checkpoint(snap: Snapshot, durable_hs: HardState, stable_after: list[Entry]) -> list[DiskOp]:
    """Disk operations for a local snapshot: the image, then a fresh WAL holding only what follows it.

    `stable_after` must be exactly the durable entries after `snap.index`.
    """
    recs: list[Record] = [snapshot_record(snap.index, snap.term), hard_state_record(durable_hs)]
    if stable_after:
        assert stable_after[0].index == snap.index + 1
        recs.append(entries_record(stable_after))
    return [("image", snap), ("rotate", recs)]
