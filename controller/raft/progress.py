"""Leader-side view of each follower (etcd `tracker.Progress`), pure.

States::

    PROBE --(ack)--> REPLICATE --(reject)--> PROBE
      |  ^                                     ^
      |  +------- (snapshot acked / timed out) +-- SNAPSHOT <-- (next entry compacted away)

- PROBE: one append in flight at a time (`probe_sent`), to find the match point.
- REPLICATE: optimistic `next`, up to `max_inflight` appends in flight (pipelining).
- SNAPSHOT: a snapshot was sent; paused until acked or `snapshot_sent_tick` is too old.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum


class ProgressState(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Progress:
    __slots__ = (
        "match", "next", "state", "probe_sent", "inflights", "max_inflight", "pending_snapshot",
        "snapshot_sent_tick", "recent_active", "lease_ack_tick", "commit_sent", "match_at_heartbeat",
    )

    def __init__(self, next_index: int, max_inflight: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflights: deque[int] = deque()  # last index of each in-flight append, ascending
        self.max_inflight = max_inflight
        self.pending_snapshot = 0
        self.snapshot_sent_tick = 0
        self.recent_active = False
        self.lease_ack_tick = -1  # leader tick at which the newest acknowledged message was sent
        self.commit_sent = 0
        self.match_at_heartbeat = -1  # match seen at the previous heartbeat response (stall detection)

    def __repr__(self) -> str:
        return f"Progress({self.state.name} match={self.match} next={self.next} inflight={len(self.inflights)})"

    def is_paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return len(self.inflights) >= self.max_inflight
        return True

    def become_probe(self) -> None:
        self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflights.clear()

    def become_snapshot(self, snapshot_index: int, tick: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = snapshot_index
        self.snapshot_sent_tick = tick
        self.probe_sent = False
        self.inflights.clear()

    def maybe_update(self, index: int) -> bool:
        """An accepting ack for `index`. Returns True when `match` advanced."""
        updated = False
        if index > self.match:
            self.match = index
            updated = True
            self.probe_sent = False
        if index + 1 > self.next:
            self.next = index + 1
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """A rejection of the append whose previous index was `rejected`. False when it is stale."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def sent_append(self, entry_count: int, last_index: int) -> None:
        if self.state == ProgressState.REPLICATE:
            if entry_count:
                self.next = last_index + 1
                self.inflights.append(last_index)
        elif self.state == ProgressState.PROBE:
            self.probe_sent = True

    def free_inflights_to(self, index: int) -> None:
        q = self.inflights
        while q and q[0] <= index:
            q.popleft()
