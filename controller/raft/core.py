"""The Raft core: a pure, synchronous state machine in the etcd-raft style.

No asyncio, sockets, clock or global random: time is `tick()`, randomness is the injected
`random.Random`, I/O is what the caller does with `ready()`. The caller loop is::

    core.tick() / core.step(msg) / core.propose(data) / core.read_index(ctx)   # any order, any time
    send(core.take_early_messages())        # optional: leader replication while persisting
    rd = core.ready()                        # only after the previous Ready was advanced
    persist(rd.snapshot, rd.entries, rd.hard_state); send(rd.messages); apply(rd); core.advance(rd)

`step`/`propose`/`tick` may be called between `ready()` and `advance()` (the driver keeps networking
while it fsyncs); `advance` tolerates entries overwritten in the meantime.

Features: pre-vote, check-quorum (with vote refusal while a leader is known, which also makes lease
reads safe), pipelined and batched appends with conflict hints, commitment by counting only entries
of the current term, snapshots and snapshot install, ReadIndex, lease reads and follower reads.
Leader-role handlers live in `controller.raft.leader`, the rest here.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from controller.raft.core_config import CoreConfig
from controller.raft.errors import NotLeaderError
from controller.raft.leader import LeaderMixin
from controller.raft.log import RaftLog
from controller.raft.progress import Progress
from controller.raft.read_only import ForwardedReads, ReadOnly
from controller.raft.types import (
    NONE_ID,
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    ReadState,
    Ready,
    Role,
    Snapshot,
)

__all__ = ["FORWARDED_READ_GIVE_UP_ELECTIONS", "CoreConfig", "Handler", "RaftCore"]


Handler = Callable[[Message], None]

# A forwarded follower read still unanswered after this many election timeouts is forgotten (callers
# time out long before; this only bounds memory when a caller never cancels).
FORWARDED_READ_GIVE_UP_ELECTIONS = 20


class RaftCore(LeaderMixin):
    """One Raft member. Pure and single-threaded: call it from one task only."""

    def __init__(
        self,
        cfg: CoreConfig,
        rng: random.Random,
        *,
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
        entries: list[Entry] | None = None,
    ) -> None:
        hs = hard_state or HardState()
        self.cfg = cfg
        self.id = cfg.self_id
        self.peers = tuple(p for p in cfg.peer_ids if p != cfg.self_id)
        self.rng = rng
        self.log = RaftLog(snapshot, entries)
        self.log.committed = min(max(hs.commit, self.log.offset), self.log.last_index())
        self.term = hs.term
        self.vote = hs.vote
        self.persisted_hs = hs
        self.lead = NONE_ID
        self.role = Role.FOLLOWER
        self.tick_count = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = cfg.election_ticks
        self.votes: dict[str, bool] = {}
        self.prs: dict[str, Progress] = {}
        self.msgs: list[Message] = []  # sent after the next Ready is persisted
        self.early_msgs: list[Message] = []  # may go out before persisting (see take_early_messages)
        self.read_states: list[ReadState] = []
        self.read_only = ReadOnly()
        self.pending_read_index: list[tuple[bytes, str]] = []
        self.forwarded = ForwardedReads(
            retry_ticks=max(cfg.heartbeat_ticks + 1, cfg.election_ticks // 2),
            give_up_ticks=FORWARDED_READ_GIVE_UP_ELECTIONS * cfg.election_ticks,
        )
        self.pending_snapshot: Snapshot | None = None
        self.append_dirty = False
        self.commit_dirty = False
        self.heartbeat_dirty = False
        self._handlers: dict[int, Handler] = {}
        self._tick_fn: Callable[[], None] = self._tick_election
        self.become_follower(self.term, NONE_ID)

    # ------------------------------------------------------------------ public API
    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def tick(self) -> None:
        self.tick_count += 1
        self._tick_fn()
        if len(self.forwarded):
            self._retry_forwarded_reads()

    def campaign(self) -> None:
        """Start an election now (tests, leadership hand-over by an operator)."""
        if self.role != Role.LEADER:
            self._hup()

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append `data` on the leader; returns (index, term). Raises NotLeaderError elsewhere."""
        if self.role != Role.LEADER:
            raise NotLeaderError(self.lead or None)
        entry = Entry(self.log.last_index() + 1, self.term, EntryKind.NORMAL, data)
        self.log.append_one(entry)
        self.append_dirty = True  # a one-member group commits in advance(), once the entry is durable
        return entry.index, self.term

    def read_index(self, ctx: bytes) -> None:
        """Linearizable read: a ReadState for `ctx` appears in a later Ready.

        On the leader the read index is confirmed by a heartbeat quorum; on a follower the request is
        forwarded to the known leader (a follower read) and re-sent while unanswered, also to a new
        leader (see `ForwardedReads`). Raises NotLeaderError when no leader is known. `ctx` must be
        unique among this member's reads (other members may use the same bytes).
        """
        if self.role == Role.LEADER:
            self.leader_read_index(ctx, self.id)
        elif self.lead != NONE_ID:
            self.forwarded.add(ctx, self.tick_count)
            if self.forwarded.sent_to == self.lead:
                self._send(Message(MsgType.READ_INDEX, self.id, self.lead, ctx=ctx), early=True)
            else:
                self._retry_forwarded_reads()
        else:
            raise NotLeaderError(None)

    def cancel_read(self, ctx: bytes) -> None:
        """Forget a follower read the caller gave up on (it is no longer re-sent)."""
        self.forwarded.cancel(ctx)

    def lease_read(self, ctx: bytes) -> None:
        """Read under the leader lease when valid (no network round), else fall back to ReadIndex."""
        if self.role != Role.LEADER:
            raise NotLeaderError(self.lead or None)
        if self.committed_in_term() and self.lease_valid():
            self.read_states.append(ReadState(self.log.committed, ctx))
        else:
            self.leader_read_index(ctx, self.id)

    def snapshot_at(self, index: int, data: bytes) -> Snapshot:
        """Describe a state-machine image taken at applied `index` (the caller persists it)."""
        assert index <= self.log.applied, "snapshot must cover applied state only"
        term = self.log.term(index)
        assert term is not None, f"term of {index} unknown"
        return Snapshot(index, term, data)

    def compact(self, snapshot: Snapshot, trailing_entries: int) -> None:
        """Adopt a persisted local snapshot; keep `trailing_entries` before it for lagging followers."""
        self.log.compact(snapshot, trailing_entries)

    def step(self, m: Message) -> None:
        if m.term > self.term:
            if m.type in (MsgType.VOTE, MsgType.PRE_VOTE) and self._in_lease():
                return  # a leader is alive as far as we know: ignore the disruptive candidate
            if m.type == MsgType.PRE_VOTE or (m.type == MsgType.PRE_VOTE_RESP and not m.reject):
                pass  # pre-votes carry a future term and change nothing
            elif m.type in (MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP):
                self.become_follower(m.term, m.frm)
            else:
                self.become_follower(m.term, NONE_ID)
        elif m.term < self.term:
            if m.type in (MsgType.APP, MsgType.HEARTBEAT):
                # Tell a stale leader about the newer term so it steps down (needed with pre-vote).
                self._send(Message(MsgType.APP_RESP, self.id, m.frm, self.term))
            elif m.type == MsgType.PRE_VOTE:
                self._send(Message(MsgType.PRE_VOTE_RESP, self.id, m.frm, self.term, reject=True))
            return
        if m.type in (MsgType.VOTE, MsgType.PRE_VOTE):
            self._handle_vote_request(m)
            return
        handler = self._handlers.get(m.type)
        if handler is not None:
            handler(m)
        if len(self.forwarded) and self.forwarded.sent_to != self.lead:
            self._retry_forwarded_reads()  # the leader changed: send pending follower reads to the new one

    # ------------------------------------------------------------------ Ready
    def take_early_messages(self) -> list[Message]:
        """Leader replication messages that need nothing unpersisted; empty until term/vote are durable."""
        self.flush()
        if not self.early_msgs or not self._term_durable():
            return []
        out, self.early_msgs = self.early_msgs, []
        return out

    def has_ready(self) -> bool:
        log = self.log
        return bool(
            self.append_dirty or self.commit_dirty or self.heartbeat_dirty or self.msgs or self.early_msgs
            or self.read_states or self.pending_snapshot is not None or log.stabled < log.last_index()
            or log.committed > log.applied or self.hard_state() != self.persisted_hs
        )

    def ready(self) -> Ready:
        self.flush()
        hs = self.hard_state()
        hs_out = hs if hs != self.persisted_hs else None
        entries = self.log.unstable_entries()
        snap = self.pending_snapshot
        self.pending_snapshot = None
        lo = max(self.log.applied, snap.index if snap else 0) + 1
        hi = min(self.log.committed, lo + self.cfg.max_committed_per_ready - 1)
        committed = self.log.slice(lo, hi + 1)
        msgs = self.msgs + self.early_msgs
        self.msgs, self.early_msgs = [], []
        read_states, self.read_states = self.read_states, []
        p = self.persisted_hs
        must_sync = bool(entries) or snap is not None or (hs.term, hs.vote) != (p.term, p.vote)
        return Ready(hs_out, entries, snap, committed, msgs, read_states, must_sync)

    def advance(self, rd: Ready) -> None:
        log = self.log
        if rd.snapshot is not None:
            log.applied = max(log.applied, rd.snapshot.index)
        for e in reversed(rd.entries):  # normally the last one; earlier if a suffix was overwritten
            if log.term(e.index) == e.term:
                log.stable_to(e.index, e.term)
                break
        if rd.hard_state is not None:
            self.persisted_hs = rd.hard_state
        if rd.committed_entries:
            log.applied = max(log.applied, rd.committed_entries[-1].index)
        if self.role == Role.LEADER:
            self.prs[self.id].maybe_update(log.stabled)
            self.maybe_commit()

    # ------------------------------------------------------------------ roles
    def become_follower(self, term: int, lead: str) -> None:
        self._reset(term)
        self.lead = lead
        self.role = Role.FOLLOWER
        self._tick_fn = self._tick_election
        self._handlers = {
            MsgType.APP: self._handle_append,
            MsgType.HEARTBEAT: self._handle_heartbeat,
            MsgType.SNAP: self._handle_snapshot,
            MsgType.READ_INDEX_RESP: self._handle_read_index_resp,
        }

    def _become_pre_candidate(self) -> None:
        self.votes = {}
        self.lead = NONE_ID
        self.role = Role.PRE_CANDIDATE
        self._tick_fn = self._tick_election
        self._set_candidate_handlers()

    def _become_candidate(self) -> None:
        assert self.role != Role.LEADER
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE
        self._set_candidate_handlers()

    def _set_candidate_handlers(self) -> None:
        self._handlers = {
            MsgType.APP: self._candidate_hears_leader,
            MsgType.HEARTBEAT: self._candidate_hears_leader,
            MsgType.SNAP: self._candidate_hears_leader,
            MsgType.VOTE_RESP: self._handle_vote_resp,
            MsgType.PRE_VOTE_RESP: self._handle_vote_resp,
        }

    def become_leader(self) -> None:
        assert self.role == Role.CANDIDATE or len(self.cfg.peer_ids) == 1
        self._reset(self.term)
        self.lead = self.id
        self.role = Role.LEADER
        self._tick_fn = self._tick_heartbeat
        last = self.log.last_index()
        self.prs = {p: Progress(last + 1, self.cfg.max_inflight_appends) for p in self.cfg.peer_ids}
        me = self.prs[self.id]
        me.match, me.recent_active = self.log.stabled, True
        self._handlers = {
            MsgType.APP_RESP: self.handle_append_resp,
            MsgType.HEARTBEAT_RESP: self.handle_heartbeat_resp,
            MsgType.READ_INDEX: self.handle_read_index,
        }
        # Commit an entry of our own term so the commit index (and read index) is current.
        self.log.append_one(Entry(last + 1, self.term, EntryKind.NOOP))
        self.append_dirty = True
        if len(self.forwarded):
            self._retry_forwarded_reads()  # our own pending follower reads become local ReadIndex reads

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = NONE_ID
        self.lead = NONE_ID
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        lo = self.cfg.election_ticks
        self.randomized_election_timeout = lo + self.rng.randrange(lo)
        self.votes = {}
        self.prs = {}
        self.read_only.reset()
        self.pending_read_index = []
        self.append_dirty = self.commit_dirty = self.heartbeat_dirty = False

    # ------------------------------------------------------------------ elections
    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self._hup()

    def _hup(self) -> None:
        self._campaign(pre=self.cfg.pre_vote)

    def _campaign(self, *, pre: bool) -> None:
        if pre:
            self._become_pre_candidate()
            vote_term, mtype = self.term + 1, MsgType.PRE_VOTE
        else:
            self._become_candidate()
            vote_term, mtype = self.term, MsgType.VOTE
        self.votes[self.id] = True
        if self._tally_votes():
            return
        last_index, last_term = self.log.last_index(), self.log.last_term()
        for peer in self.peers:
            self._send(Message(mtype, self.id, peer, vote_term, index=last_index, log_term=last_term))

    def _tally_votes(self) -> bool:
        """Act on the votes so far; True when the election is decided."""
        granted = sum(1 for v in self.votes.values() if v)
        rejected = len(self.votes) - granted
        if granted >= self.cfg.quorum:
            if self.role == Role.PRE_CANDIDATE:
                self._campaign(pre=False)
            else:
                self.become_leader()
            return True
        if rejected >= self.cfg.quorum:
            self.become_follower(self.term, NONE_ID)
            return True
        return False

    def _in_lease(self) -> bool:
        """True while we must refuse votes: we heard from a live leader less than an election timeout ago.

        A freshly started node also refuses for its first election timeout, because it may have
        acknowledged a leader's heartbeat just before it crashed (this keeps lease reads safe across
        restarts).
        """
        if not self.cfg.check_quorum or self.election_elapsed >= self.cfg.election_ticks:
            return False
        return self.lead != NONE_ID or self.tick_count < self.cfg.election_ticks

    def _handle_vote_request(self, m: Message) -> None:
        pre = m.type == MsgType.PRE_VOTE
        resp = MsgType.PRE_VOTE_RESP if pre else MsgType.VOTE_RESP
        can_vote = (
            self.vote == m.frm
            or (self.vote == NONE_ID and self.lead == NONE_ID)
            or (pre and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.index, m.log_term):
            self._send(Message(resp, self.id, m.frm, m.term))
            if not pre:
                self.election_elapsed = 0
                self.vote = m.frm
        else:
            self._send(Message(resp, self.id, m.frm, self.term, reject=True))

    def _handle_vote_resp(self, m: Message) -> None:
        if self.role == Role.PRE_CANDIDATE:
            if m.type != MsgType.PRE_VOTE_RESP or (not m.reject and m.term != self.term + 1):
                return
        elif m.type != MsgType.VOTE_RESP:
            return
        self.votes.setdefault(m.frm, not m.reject)
        self._tally_votes()

    def _candidate_hears_leader(self, m: Message) -> None:
        self.become_follower(self.term, m.frm)
        self._handlers[m.type](m)

    # ------------------------------------------------------------------ follower handlers
    def _handle_append(self, m: Message) -> None:
        self.election_elapsed = 0
        self.lead = m.frm
        log = self.log
        resp = Message(MsgType.APP_RESP, self.id, m.frm, self.term, lease_tick=m.lease_tick)
        if m.index < log.committed:
            resp.index = log.committed
        elif log.match_term(m.index, m.log_term):
            last_new = m.index + len(m.entries)
            if m.entries:
                conflict = log.find_conflict(m.entries)
                if conflict:
                    log.append(m.entries[conflict - m.index - 1 :])
            log.commit_to(min(m.commit, last_new))
            resp.index = last_new
        else:
            hint = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
            resp.index, resp.reject, resp.reject_hint = m.index, True, hint
            resp.log_term = log.term(hint) or 0
        self._send(resp)

    def _handle_heartbeat(self, m: Message) -> None:
        self.election_elapsed = 0
        self.lead = m.frm
        self.log.commit_to(min(m.commit, self.log.last_index()))
        self._send(
            Message(MsgType.HEARTBEAT_RESP, self.id, m.frm, self.term, ctx=m.ctx, lease_tick=m.lease_tick)
        )

    def _handle_snapshot(self, m: Message) -> None:
        self.election_elapsed = 0
        self.lead = m.frm
        snap = m.snapshot
        assert snap is not None
        resp = Message(MsgType.APP_RESP, self.id, m.frm, self.term, lease_tick=m.lease_tick)
        if snap.index <= self.log.committed:
            resp.index = self.log.committed
        elif self.log.match_term(snap.index, snap.term):
            self.log.commit_to(snap.index)  # we already have that prefix: fast-forward only
            resp.index = snap.index
        else:
            self.log.restore(snap)
            self.pending_snapshot = snap
            resp.index = snap.index
        self._send(resp)

    def _handle_read_index_resp(self, m: Message) -> None:
        if not self.forwarded.answered(m.ctx):
            return  # a duplicate answer (after a retry), or a read that was cancelled or given up
        lag = m.index - self.log.committed
        self.read_states.append(ReadState(m.index, m.ctx, lag > self.cfg.max_follower_lag_entries))

    # ------------------------------------------------------------------ helpers
    def _retry_forwarded_reads(self) -> None:
        fw = self.forwarded
        if self.role == Role.LEADER:
            for ctx in fw.take_all():
                self.leader_read_index(ctx, self.id)
            return
        if self.lead == NONE_ID:
            return  # wait until a leader is known
        changed = fw.sent_to != self.lead
        fw.sent_to = self.lead
        for ctx in fw.due(self.tick_count, all_of_them=changed):
            self._send(Message(MsgType.READ_INDEX, self.id, self.lead, ctx=ctx), early=True)

    def _send(self, m: Message, *, early: bool = False) -> None:
        """Queue `m`; leader messages and follower read requests may leave before persisting."""
        if m.term == 0:
            m.term = self.term
        if early or self.role == Role.LEADER:
            self.early_msgs.append(m)
        else:
            self.msgs.append(m)

    def _term_durable(self) -> bool:
        p = self.persisted_hs
        return p.term == self.term and p.vote == self.vote
