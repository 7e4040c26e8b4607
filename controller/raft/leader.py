"""Leader-role behaviour of `RaftCore`: replication, commitment, heartbeats, ReadIndex and lease.

Split out of core.py to keep modules small; it is a mixin and only meaningful as part of RaftCore.

Batching: `propose` only appends to the log and marks `append_dirty`; `flush()` (run by
`take_early_messages()` and `ready()`) turns everything appended since the last flush into at most one
append per `max_batch_entries` per follower, so a burst of proposals costs one frame per follower.
Pipelining: a follower in REPLICATE state gets up to `max_inflight_appends` appends before any ack,
with `next` advanced optimistically; a rejection falls back to PROBE using the follower's conflict hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.raft.errors import NotLeaderError
from controller.raft.progress import Progress, ProgressState
from controller.raft.read_only import ReadOnly
from controller.raft.types import Message, MsgType, ReadState, Role

if TYPE_CHECKING:
    from controller.raft.core_config import CoreConfig
    from controller.raft.log import RaftLog


class LeaderMixin:
    if TYPE_CHECKING:
        cfg: CoreConfig
        id: str
        peers: tuple[str, ...]
        term: int
        role: Role
        log: RaftLog
        prs: dict[str, Progress]
        tick_count: int
        election_elapsed: int
        heartbeat_elapsed: int
        read_states: list[ReadState]
        read_only: ReadOnly
        pending_read_index: list[tuple[bytes, str]]
        append_dirty: bool
        commit_dirty: bool
        heartbeat_dirty: bool

        def _send(self, m: Message, *, early: bool = False) -> None: ...
        def become_follower(self, term: int, lead: str) -> None: ...

    # ------------------------------------------------------------------ ticks
    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_ticks:
            self.election_elapsed = 0
            if self.cfg.check_quorum:
                active = sum(1 for pr in self.prs.values() if pr.recent_active)
                if active < self.cfg.quorum:
                    self.become_follower(self.term, "")  # check-quorum: we lost the majority
                    return
                for peer in self.peers:
                    self.prs[peer].recent_active = False
        if self.role == Role.LEADER and self.heartbeat_elapsed >= self.cfg.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self.heartbeat_dirty = True

    # ------------------------------------------------------------------ sending
    def flush(self) -> None:
        """Emit the appends/heartbeats made necessary since the last flush (coalesced)."""
        if self.role != Role.LEADER:
            return
        if self.append_dirty or self.commit_dirty:
            for peer in self.peers:
                self._send_appends(peer, self.prs[peer])
        if self.heartbeat_dirty:
            self._bcast_heartbeat()
        self.append_dirty = self.commit_dirty = self.heartbeat_dirty = False

    def _send_appends(self, peer: str, pr: Progress) -> None:
        sent = self._send_append(peer, pr, send_if_empty=pr.commit_sent < self.log.committed)
        while sent and pr.state == ProgressState.REPLICATE and pr.next <= self.log.last_index():
            sent = self._send_append(peer, pr, send_if_empty=False)

    def _send_append(self, peer: str, pr: Progress, *, send_if_empty: bool) -> bool:
        if pr.is_paused():
            return False
        log = self.log
        if pr.next > log.last_index() + 1:
            pr.next = log.last_index() + 1
        prev = pr.next - 1
        prev_term = log.term(prev)
        if prev_term is None:
            return self._send_snapshot(peer, pr)
        entries = log.slice(pr.next, pr.next + self.cfg.max_batch_entries)
        if not entries and not send_if_empty:
            return False
        self._send(
            Message(
                MsgType.APP, self.id, peer, self.term, index=prev, log_term=prev_term, entries=entries,
                commit=log.committed, lease_tick=self.tick_count,
            )
        )
        pr.commit_sent = log.committed
        pr.sent_append(len(entries), entries[-1].index if entries else prev)
        return True

    def _send_snapshot(self, peer: str, pr: Progress) -> bool:
        snap = self.log.snapshot
        assert snap is not None and snap.index >= self.log.offset, "compacted log without snapshot"
        self._send(Message(MsgType.SNAP, self.id, peer, self.term, snapshot=snap, lease_tick=self.tick_count))
        pr.become_snapshot(snap.index, self.tick_count)
        return True

    def _bcast_heartbeat(self) -> None:
        ctx = self.read_only.last_pending_ctx()
        for peer in self.peers:
            commit = min(self.prs[peer].match, self.log.committed)
            self._send(
                Message(MsgType.HEARTBEAT, self.id, peer, self.term, commit=commit, ctx=ctx,
                        lease_tick=self.tick_count)
            )

    # ------------------------------------------------------------------ responses
    def handle_append_resp(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        self._lease_ack(pr, m.lease_tick)
        if m.reject:
            hint = m.reject_hint
            if m.log_term > 0:
                hint = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decr_to(m.index, hint):
                if pr.state == ProgressState.REPLICATE:
                    pr.become_probe()
                self._send_append(m.frm, pr, send_if_empty=True)
            return
        if not pr.maybe_update(m.index):
            return
        if pr.state == ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state == ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot:
            pr.become_probe()
            pr.become_replicate()
        else:
            pr.free_inflights_to(m.index)
        self.maybe_commit()
        if pr.match < self.log.last_index():
            self.append_dirty = True

    def handle_heartbeat_resp(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        pr.probe_sent = False
        self._lease_ack(pr, m.lease_tick)
        if pr.state == ProgressState.SNAPSHOT and self.tick_count - pr.snapshot_sent_tick >= self.cfg.election_ticks:
            pr.become_probe()  # the snapshot (or its ack) was lost: try again
        stalled = pr.match == pr.match_at_heartbeat
        pr.match_at_heartbeat = pr.match
        if pr.match < self.log.last_index():
            if pr.state == ProgressState.REPLICATE and stalled and pr.inflights:
                pr.inflights.clear()  # no ack for a whole heartbeat interval: appends were probably lost
            self._send_append(m.frm, pr, send_if_empty=stalled or pr.state == ProgressState.PROBE)
        if m.ctx and self.read_only.recv_ack(m.frm, m.ctx) >= self.cfg.quorum:
            for status in self.read_only.advance(m.ctx):
                self._answer_read(status.index, status.ctx, status.frm)

    def _lease_ack(self, pr: Progress, sent_tick: int) -> None:
        if sent_tick > pr.lease_ack_tick:
            pr.lease_ack_tick = sent_tick

    # ------------------------------------------------------------------ commitment
    def maybe_commit(self) -> bool:
        """Commit the highest index replicated on a quorum, if it belongs to the current term (§5.4.2)."""
        matches = sorted((pr.match for pr in self.prs.values()), reverse=True)
        index = matches[self.cfg.quorum - 1]
        if index <= self.log.committed or self.log.term(index) != self.term:
            return False
        self.log.commit_to(index)
        self.commit_dirty = True
        if self.pending_read_index:
            pending, self.pending_read_index = self.pending_read_index, []
            for ctx, frm in pending:
                self.leader_read_index(ctx, frm)
        return True

    def committed_in_term(self) -> bool:
        return self.log.term(self.log.committed) == self.term

    # ------------------------------------------------------------------ reads
    def handle_read_index(self, m: Message) -> None:
        self.leader_read_index(m.ctx, m.frm)

    def leader_read_index(self, ctx: bytes, frm: str) -> None:
        if self.role != Role.LEADER:
            raise NotLeaderError(None)
        if not self.committed_in_term():
            self.pending_read_index.append((ctx, frm))  # answered once our no-op commits
            return
        if not self.peers:
            self._answer_read(self.log.committed, ctx, frm)
            return
        self.read_only.add_request(self.log.committed, ctx, frm, self.id)
        self.heartbeat_dirty = True  # one heartbeat round confirms every read queued before the flush

    def _answer_read(self, index: int, ctx: bytes, frm: str) -> None:
        if frm == self.id:
            self.read_states.append(ReadState(index, ctx))
        else:
            self._send(Message(MsgType.READ_INDEX_RESP, self.id, frm, self.term, index=index, ctx=ctx))

    def lease_valid(self) -> bool:
        """True while the leader lease holds.

        The lease starts at the send time (leader ticks) of the newest message acknowledged by a quorum
        and lasts `CoreConfig.lease_ticks` = lease_ratio x election timeout (minus tick quantisation).
        Followers that acknowledged it refuse votes for a full election timeout after receipt, so no
        other leader can exist before the lease ends.

        Clock-drift bound: safe as long as the followers' clocks do not run faster than the leader's by
        more than (1 - lease_ratio) of the election timeout, i.e. over one lease the followers' clocks
        may gain at most (1 - lease_ratio) x election timeout on the leader's. Precisely, with tick
        quantisation: lease_ticks x leader_tick <= (election_ticks - 1) x follower_tick (with the
        defaults, 500 ms timeout / 50 ms ticks / ratio 0.8: followers may run up to 12.5 % fast).
        The driver derives ticks from a monotonic clock, so a stalled event loop does not stretch
        the lease. Beyond the bound, use read_index.
        """
        if not self.peers:
            return True
        ticks = sorted(
            (self.tick_count if p == self.id else pr.lease_ack_tick for p, pr in self.prs.items()), reverse=True
        )
        start = ticks[self.cfg.quorum - 1]
        return start >= 0 and self.tick_count - start < self.cfg.lease_ticks
