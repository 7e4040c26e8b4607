"""The in-memory Raft log of the pure core: entries after a compaction offset, plus stable/commit/apply marks.

Pure, no I/O; owned by one `RaftCore`. Layout::

    offset (term offset_term)   entries[0] = offset+1 ... entries[-1] = last_index
    |<- compacted ->|<---------------- in memory --------------->|
                      stabled: last index known durable on this node
                      committed, applied: usual Raft meaning (applied <= committed)

`snapshot` is the newest state-machine image known to the core (index >= offset: entries between the
offset and the snapshot index are kept for lagging followers, `snapshot_trailing_entries`).
"""

from __future__ import annotations

from controller.raft.types import Entry, Snapshot


class RaftLog:
    """Log storage for the core. Not thread-safe; single owner."""

    __slots__ = ("offset", "offset_term", "entries", "stabled", "committed", "applied", "snapshot")

    def __init__(self, snapshot: Snapshot | None = None, entries: list[Entry] | None = None) -> None:
        self.snapshot = snapshot
        self.offset = snapshot.index if snapshot else 0
        self.offset_term = snapshot.term if snapshot else 0
        self.entries: list[Entry] = list(entries or [])
        if self.entries:
            assert self.entries[0].index == self.offset + 1, "entries must follow the snapshot"
        self.stabled = self.last_index()
        self.committed = self.offset
        self.applied = self.offset

    # ----- queries -----
    def first_index(self) -> int:
        return self.offset + 1

    def last_index(self) -> int:
        return self.offset + len(self.entries)

    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.offset_term

    def term(self, index: int) -> int | None:
        """Term of `index`, or None when it is compacted away or beyond the end."""
        if index == self.offset:
            return self.offset_term
        pos = index - self.offset - 1
        if pos < 0 or pos >= len(self.entries):
            return None
        return self.entries[pos].term

    def entry(self, index: int) -> Entry | None:
        pos = index - self.offset - 1
        if pos < 0 or pos >= len(self.entries):
            return None
        return self.entries[pos]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi (clamped to what is in memory)."""
        lo_pos = max(lo - self.offset - 1, 0)
        hi_pos = min(hi - self.offset - 1, len(self.entries))
        if hi_pos <= lo_pos:
            return []
        return self.entries[lo_pos:hi_pos]

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: a candidate's log is at least as up to date as ours."""
        my_term = self.last_term()
        return last_term > my_term or (last_term == my_term and last_index >= self.last_index())

    def find_conflict(self, entries: list[Entry]) -> int:
        """Index of the first entry whose term differs from ours (or is new); 0 when all already match."""
        for e in entries:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """Largest i <= index with term(i) <= term (etcd): skips a whole divergent term per round trip."""
        index = min(index, self.last_index())
        while index > self.offset:
            t = self.term(index)
            if t is not None and t <= term:
                break
            index -= 1
        return index

    def unstable_entries(self) -> list[Entry]:
        return self.slice(self.stabled + 1, self.last_index() + 1)

    # ----- mutations -----
    def append(self, entries: list[Entry]) -> None:
        """Append `entries` (contiguous), truncating any existing suffix they overwrite."""
        if not entries:
            return
        first = entries[0].index
        assert first > self.committed, f"truncating committed entries at {first} <= {self.committed}"
        assert self.offset < first <= self.last_index() + 1, "append must be contiguous"
        del self.entries[first - self.offset - 1 :]
        self.entries.extend(entries)
        if first <= self.stabled:
            self.stabled = first - 1

    def append_one(self, entry: Entry) -> None:
        assert entry.index == self.last_index() + 1
        self.entries.append(entry)

    def commit_to(self, index: int) -> bool:
        if index > self.committed:
            assert index <= self.last_index(), f"commit {index} beyond last index {self.last_index()}"
            self.committed = index
            return True
        return False

    def stable_to(self, index: int, term: int) -> None:
        """Mark entries up to (index, term) durable, unless that entry was overwritten meanwhile."""
        if index > self.stabled and self.term(index) == term:
            self.stabled = index

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log with `snapshot` (a follower installing a leader's snapshot)."""
        self.snapshot = snapshot
        self.offset = snapshot.index
        self.offset_term = snapshot.term
        self.entries = []
        self.stabled = snapshot.index
        self.committed = snapshot.index
        # `applied` moves when the application has restored the image (RaftCore.advance).

    def compact(self, snapshot: Snapshot, trailing_entries: int) -> None:
        """Adopt a locally taken snapshot and drop entries older than `trailing_entries` before it."""
        if self.snapshot is not None and snapshot.index <= self.snapshot.index:
            return
        assert snapshot.index <= self.applied, "can only snapshot applied state"
        if self.term(snapshot.index) != snapshot.term:
            return  # log moved past it (another snapshot was installed meanwhile)
        self.snapshot = snapshot
        new_offset = min(snapshot.index - trailing_entries, self.stabled)
        if new_offset <= self.offset:
            return
        new_term = self.term(new_offset)
        assert new_term is not None
        del self.entries[: new_offset - self.offset]
        self.offset = new_offset
        self.offset_term = new_term
