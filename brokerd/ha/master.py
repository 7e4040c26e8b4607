"""The master side of AutoSwitch HA (spec §4.4, §4.5) as a sans-I/O state machine.

Inputs are explicit calls (connection opened/closed, bytes received, ``tick(now_ms)``, a local append, the
controller's SyncStateSet answers); outputs are ``Action`` lists (``actions.py``) the driver executes in order.
The core also sets the log's confirm offset directly. Time is whatever ``now_ms`` the caller passes.

Per connection: READY → (slave handshake) HANDSHAKE, the master answers with its epoch history → (first
transfer report) TRANSFER, data flows from the start point in chunks of at most ``ha_transfer_batch_size`` that
never cross an epoch end, at most ``transfer_window_bytes`` past the slave's last ack, with an empty frame after
``ha_send_heartbeat_interval_ms`` idle. A connection silent for ``ha_housekeeping_interval_ms`` is closed.

SyncStateSet: expand when a slave (not an async learner) is caught up, at/after confirmOffset and at/after the
current epoch's start; shrink every ``check_sync_state_set_period_ms`` (members without a connection or not
caught up for ``ha_max_time_slave_not_catchup_ms``). One ALTER is in flight at a time; until the controller's
answer is known, the effective set is the union of the controller's set and the proposal.

Deviations from RocketMQ (on purpose, for safety; the simulation in tests/unit/ha/test_sim.py checks them):

* confirmOffset (allAckInSyncStateSet): a member counts once it has *reported* (ack >= 0, not only > 0). A member
  without a connection, or connected but not yet reporting, keeps the previous value: Java skips a connected
  member whose ack is still 0/-1, which lets confirmOffset pass data that member does not hold.
* The union set is dropped only when the controller's set is known again (``on_sync_state_set`` with a newer
  epoch, or a poll sent after ``on_alter_failed``): a timed-out ALTER may have been applied, and a delayed role
  notification may predate it.
* ``wait_for_replicas`` answers SLAVE_NOT_AVAILABLE before IN_SYNC_REPLICAS_NOT_ENOUGH, and counts acks of the
  effective SyncStateSet members only.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import Enum

from brokerd.ha.actions import (
    ALL_ACK,
    Action,
    AlterSyncStateSet,
    Close,
    ConnId,
    ReplicationProgress,
    Send,
)
from brokerd.ha.config import HAConfig
from brokerd.ha.log import ReplicaLog
from brokerd.ha.wire import (
    HAConnectionState,
    HAProtocolError,
    MasterHandshake,
    SlaveHandshake,
    SlaveMessage,
    SlaveMessageDecoder,
    TransferFrame,
    encode_parts,
)
from brokerd.store.epoch import EpochEntry

S = HAConnectionState


class NotWritableError(Exception):
    """This broker is no longer the master of its epoch (fenced): the append was refused."""


class WaitOutcome(Enum):
    OK = "OK"
    WAIT = "WAIT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"


@dataclass(frozen=True, slots=True)
class WaitDecision:
    """``need``: replicas (master included) to wait for, or ``ALL_ACK``; see ``ReplicationProgress.releases``."""

    outcome: WaitOutcome
    need: int


@dataclass(slots=True)
class SlaveConnection:
    conn: ConnId
    last_read_ms: int
    last_write_ms: int
    decoder: SlaveMessageDecoder = field(default_factory=SlaveMessageDecoder)
    state: HAConnectionState = S.READY
    slave_id: int | None = None
    async_learner: bool = False
    sync_from_last_file: bool = False
    start_offset: int = -1
    ack: int = -1
    next_offset: int = -1
    master_max_at_transfer: int = -1
    sent_confirm: int = -1  # the confirm offset the last frame carried


def entry_index(entries: list[EpochEntry], offset: int) -> int:
    """Index of the entry whose range holds ``offset`` (the last is open-ended); -1 before the first."""
    return bisect.bisect_right([e.start_offset for e in entries], offset) - 1


class HAMaster:
    """Master of ``epoch`` (``become_master(log, epoch)`` must have run) with SyncStateSet ``sync_state_set``."""

    def __init__(self, cfg: HAConfig, log: ReplicaLog, broker_id: int, epoch: int,
                 sync_state_set: frozenset[int], sync_state_set_epoch: int, now_ms: int) -> None:  # fmt: skip
        if log.last_epoch() != epoch:
            raise ValueError(f"log's last epoch is {log.last_epoch()}, not {epoch}: call become_master first")
        self.cfg = cfg
        self.log = log
        self.broker_id = broker_id
        self.epoch = epoch
        self.remote_set = frozenset(sync_state_set) | {broker_id}
        self.sss_epoch = sync_state_set_epoch
        self.proposed: frozenset[int] | None = None
        self.proposed_base_epoch = -1
        self.alter_failed_at_ms: int | None = None
        self.conns: dict[ConnId, SlaveConnection] = {}
        self.caught_up_ms: dict[int, int] = {}
        self.fenced = False
        self.next_check_ms = now_ms + cfg.check_sync_state_set_period_ms
        self.confirm = min(log.confirm_offset, log.max_phy_offset)
        self.last_progress: ReplicationProgress | None = None

    # ------------------------------------------------------------------ queries

    @property
    def writable(self) -> bool:
        return not self.fenced

    def effective_set(self) -> frozenset[int]:
        return self.remote_set | self.proposed if self.proposed is not None else self.remote_set

    def member_acks(self) -> dict[int, int]:
        """slave id -> ack, for effective-set members with a connection in TRANSFER."""
        eff = self.effective_set()
        return {c.slave_id: c.ack for c in self.conns.values()
                if c.state is S.TRANSFER and c.slave_id in eff and c.slave_id != self.broker_id}  # fmt: skip

    def progress(self) -> ReplicationProgress:
        acked = sorted([self.log.max_phy_offset, *self.member_acks().values()], reverse=True)
        return ReplicationProgress(self.confirm, tuple(acked))

    def wait_for_replicas(self, end_offset: int, sync_master: bool = True) -> WaitDecision:
        """May a put ending at ``end_offset`` answer now (OK), fail, or wait for acks (WAIT, then release it when
        a ``ReplicationProgress`` ``releases(end_offset, need)``)?"""
        if not sync_master:
            return WaitDecision(WaitOutcome.OK, 1)
        if self.cfg.all_ack_in_sync_state_set:
            if self.effective_set() == {self.broker_id}:  # the set is this master alone: the append is all of it
                return WaitDecision(WaitOutcome.OK, ALL_ACK)
            done = self.confirm >= end_offset
            return WaitDecision(WaitOutcome.OK if done else WaitOutcome.WAIT, ALL_ACK)
        mx = self.log.max_phy_offset
        gap = self.cfg.ha_max_gap_not_in_sync
        in_sync = 1 + sum(1 for a in self.member_acks().values() if mx - a <= gap)
        need = self.cfg.need_acks(in_sync)
        if need <= 1:
            return WaitDecision(WaitOutcome.OK, need)
        acks = [c.ack for c in self.conns.values() if c.state is S.TRANSFER]
        if not acks or mx - max(acks) > gap:
            return WaitDecision(WaitOutcome.SLAVE_NOT_AVAILABLE, need)
        if need > in_sync:
            return WaitDecision(WaitOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH, need)
        done = self.progress().releases(end_offset, need)
        return WaitDecision(WaitOutcome.OK if done else WaitOutcome.WAIT, need)

    # ------------------------------------------------------------------ inputs

    def on_connected(self, conn: ConnId, now_ms: int) -> list[Action]:
        if conn in self.conns:
            raise ValueError(f"connection {conn} already open")
        self.conns[conn] = SlaveConnection(conn, now_ms, now_ms)
        return []

    def on_disconnected(self, conn: ConnId, now_ms: int) -> list[Action]:
        c = self.conns.pop(conn, None)
        if c is None:
            return []
        self._member_gone(c, now_ms)
        return self._recompute()

    def on_data(self, conn: ConnId, data: bytes | bytearray | memoryview, now_ms: int) -> list[Action]:
        c = self.conns.get(conn)
        if c is None:
            return []
        c.last_read_ms = now_ms
        try:
            msgs = c.decoder.feed_messages(data)
        except HAProtocolError as exc:
            return self._close(c, str(exc))
        return self.on_messages(conn, msgs, now_ms)

    def on_messages(self, conn: ConnId, msgs: list[SlaveMessage], now_ms: int) -> list[Action]:
        out: list[Action] = []
        for msg in msgs:
            c = self.conns.get(conn)
            if c is None:
                break
            c.last_read_ms = now_ms
            if isinstance(msg, SlaveHandshake):
                out += self._on_handshake(c, msg, now_ms)
            else:
                out += self._on_report(c, msg.max_offset, now_ms)
        return out

    def append(self, data: bytes | memoryview, now_ms: int) -> list[Action]:
        """Append ``data`` at the end of the log (refused once fenced), then replicate it."""
        if self.fenced:
            raise NotWritableError(f"broker {self.broker_id} is no longer master of epoch {self.epoch}")
        self.log.append_raw(self.log.max_phy_offset, data)
        return self.on_local_append(now_ms)

    def confirm_alone(self) -> bool:
        """The store appended while no slave is connected: the confirm offset follows it (the log end, or stays
        while members of the sync state set are away) and that is all (no data to push, and no put waits on a
        progress: with nobody connected a put answers at once or waits for a set change or a connection, each of
        which recomputes). False when a slave is connected: ``on_local_append`` does the work."""
        if self.conns:
            return False
        if not self.fenced:
            self._update_confirm()
        return True

    def on_local_append(self, now_ms: int) -> list[Action]:
        """The store appended (the put path checked ``writable`` first): push data, update confirm."""
        if self.fenced:
            return []
        out = self._recompute()  # first, so the frames carry the new confirm offset
        for c in list(self.conns.values()):
            if c.slave_id is not None and c.state is S.TRANSFER and c.ack >= c.next_offset:
                self.caught_up_ms[c.slave_id] = now_ms  # it held everything until this append
            out += self._pump(c, now_ms)
        return out + self.confirm_frames(now_ms)

    def tick(self, now_ms: int) -> list[Action]:
        out: list[Action] = []
        for c in list(self.conns.values()):
            if now_ms - c.last_read_ms > self.cfg.ha_housekeeping_interval_ms:
                out += self._close(c, f"no read for {now_ms - c.last_read_ms} ms")
            elif c.state is S.TRANSFER and now_ms - c.last_write_ms >= self.cfg.ha_send_heartbeat_interval_ms:
                sent = self._pump(c, now_ms)
                out += sent or self._heartbeat(c, now_ms)
        if now_ms >= self.next_check_ms:
            self.next_check_ms = now_ms + self.cfg.check_sync_state_set_period_ms
            out += self._maybe_shrink(now_ms)
        return out

    def on_sync_state_set(self, members: frozenset[int], sync_state_set_epoch: int, now_ms: int, *,
                          requested_at_ms: int | None = None) -> list[Action]:  # fmt: skip
        """The controller's SyncStateSet: an ALTER answer, a role notification, or a GET_REPLICA_INFO poll whose
        request was sent at ``requested_at_ms``. An in-flight proposal is settled by a newer set epoch, or by
        a poll sent after ``on_alter_failed`` (a stale notification of the same epoch settles nothing)."""
        if sync_state_set_epoch < self.sss_epoch:
            return []
        self.remote_set = frozenset(members) | {self.broker_id}
        self.sss_epoch = sync_state_set_epoch
        failed_at = self.alter_failed_at_ms
        polled_after_failure = failed_at is not None and requested_at_ms is not None and requested_at_ms >= failed_at
        if self.proposed is not None and (sync_state_set_epoch > self.proposed_base_epoch or polled_after_failure):
            self.proposed = None
        return self._recompute()

    def on_alter_failed(self, now_ms: int) -> list[Action]:
        """The ALTER got an error or no answer. The union set stays until the controller's set is known again
        (the driver polls it: GET_REPLICA_INFO sent now or later → ``on_sync_state_set(requested_at_ms=...)``)."""
        if self.proposed is not None:
            self.alter_failed_at_ms = now_ms
        return []

    def step_down(self) -> list[Action]:
        """Another broker is (or will be) master: refuse writes from now on and close every connection."""
        self.fenced = True
        out: list[Action] = [Close(c.conn, "master stepped down") for c in self.conns.values()]
        self.conns.clear()
        return out

    def observe_epoch(self, epoch: int) -> list[Action]:
        """A master epoch seen elsewhere (controller answer, heartbeat); a newer one fences this master."""
        return self.step_down() if epoch > self.epoch and not self.fenced else []

    # ------------------------------------------------------------------ connection protocol

    def _on_handshake(self, c: SlaveConnection, msg: SlaveHandshake, now_ms: int) -> list[Action]:
        if c.state is not S.READY:
            return self._close(c, f"slave handshake in state {c.state.name}")
        out: list[Action] = []
        for other in list(self.conns.values()):
            if other is not c and other.slave_id == msg.slave_broker_id:
                out += self._close(other, f"slave {msg.slave_broker_id} reconnected")
        c.slave_id = msg.slave_broker_id
        c.async_learner = msg.async_learner
        c.sync_from_last_file = msg.sync_from_last_file
        c.state = S.HANDSHAKE
        entries = self.log.epoch_entries()
        hs = MasterHandshake(self.log.max_phy_offset, self.log.last_epoch(), tuple(entries))
        c.last_write_ms = now_ms
        return [*out, Send(c.conn, encode_parts(hs))]

    def _on_report(self, c: SlaveConnection, offset: int, now_ms: int) -> list[Action]:
        mx = self.log.max_phy_offset
        if c.state is S.READY:
            return self._close(c, "transfer report before handshake")
        if offset > mx:
            return self._close(c, f"slave reports {offset}, beyond the master's max offset {mx}")
        if c.state is S.HANDSHAKE:
            start = self._start_point(c, offset)
            if start < 0:
                return self._close(c, f"slave at {offset}: before the master's min offset "
                                      f"{self.log.min_phy_offset}")  # fmt: skip
            c.state, c.start_offset, c.next_offset, c.master_max_at_transfer = S.TRANSFER, start, start, mx
        elif offset < c.ack:
            return self._close(c, f"slave ack went back from {c.ack} to {offset}")
        c.ack = offset
        out = self._on_ack(c, now_ms)
        out += self._recompute()
        return out + self._pump(c, now_ms)

    def _start_point(self, c: SlaveConnection, offset: int) -> int:
        low = self.log.min_phy_offset
        if offset != 0:
            return offset if offset >= low else -1
        if c.sync_from_last_file:
            mx = self.log.max_phy_offset
            return max(low, mx - mx % self.cfg.mapped_file_size_commit_log)
        return low

    def _on_ack(self, c: SlaveConnection, now_ms: int) -> list[Action]:
        if c.slave_id is None or c.ack < c.master_max_at_transfer:
            return []
        self.caught_up_ms[c.slave_id] = now_ms
        if c.async_learner or self.fenced or self.proposed is not None or c.slave_id in self.effective_set():
            return []
        entries = self.log.epoch_entries()
        epoch_start = entries[-1].start_offset if entries else 0
        if c.ack >= self.confirm and c.ack >= epoch_start:
            return self._propose(self.remote_set | {c.slave_id})
        return []

    def _maybe_shrink(self, now_ms: int) -> list[Action]:
        if self.fenced or self.proposed is not None:
            return []
        connected = {c.slave_id for c in self.conns.values() if c.slave_id is not None}
        # a slave that holds everything is caught up now, whenever it last reported (an idle slave reports only
        # every haSendHeartbeatInterval, which may be longer than haMaxTimeSlaveNotCatchup); on_local_append
        # does the same when data arrives, so the first write after a long idle time does not count it behind
        for c in self.conns.values():
            if c.slave_id is not None and c.state is S.TRANSFER and c.ack >= self.log.max_phy_offset:
                self.caught_up_ms[c.slave_id] = now_ms
        limit = self.cfg.ha_max_time_slave_not_catchup_ms
        keep = frozenset(m for m in self.remote_set if m == self.broker_id or (
            m in connected and now_ms - self.caught_up_ms.get(m, -limit - 1) <= limit))  # fmt: skip
        return self._propose(keep) if keep != self.remote_set else []

    def _propose(self, new_set: frozenset[int]) -> list[Action]:
        self.proposed = new_set
        self.proposed_base_epoch = self.sss_epoch
        self.alter_failed_at_ms = None
        return [AlterSyncStateSet(self.broker_id, self.epoch, new_set, self.sss_epoch)]

    # ------------------------------------------------------------------ sending

    def _pump(self, c: SlaveConnection, now_ms: int) -> list[Action]:
        if c.state is not S.TRANSFER or self.fenced:
            return []
        out: list[Action] = []
        mx = self.log.max_phy_offset
        entries = self.log.epoch_entries()
        base = max(c.ack, c.start_offset)
        while c.next_offset < mx and c.next_offset - base < self.cfg.transfer_window_bytes:
            i = entry_index(entries, c.next_offset)
            if i < 0:
                return out + self._close(c, f"no epoch entry covers offset {c.next_offset}")
            end = entries[i + 1].start_offset if i + 1 < len(entries) else mx
            n = min(self.cfg.ha_transfer_batch_size, end - c.next_offset)
            body = self.log.read_range(c.next_offset, n)
            if not len(body):
                break
            e = entries[i]
            frame = TransferFrame(c.next_offset, e.epoch, e.start_offset, self.confirm, body)
            c.sent_confirm = self.confirm
            out.append(Send(c.conn, encode_parts(frame)))
            c.next_offset += len(body)
        if out:
            c.last_write_ms, c.master_max_at_transfer = now_ms, mx
        return out

    def _heartbeat(self, c: SlaveConnection, now_ms: int) -> list[Action]:
        entries = self.log.epoch_entries()
        i = entry_index(entries, c.next_offset)
        if i < 0:
            return self._close(c, f"no epoch entry covers offset {c.next_offset}")
        e = entries[i]
        c.last_write_ms, c.master_max_at_transfer = now_ms, self.log.max_phy_offset
        c.sent_confirm = self.confirm
        return [Send(c.conn, encode_parts(TransferFrame(c.next_offset, e.epoch, e.start_offset, self.confirm)))]

    def confirm_frames(self, now_ms: int) -> list[Action]:
        """An empty frame to each caught-up slave whose last frame carried an older confirm offset; the driver
        calls it once the inputs of a loop iteration are in, so acks coalesce into one frame per slave
        (deviation: RocketMQ lets a slave's confirm offset wait for the next data or heartbeat frame, up to 5 s;
        a slave serves reads only up to it)."""
        out: list[Action] = []
        for c in list(self.conns.values()):
            if c.state is S.TRANSFER and c.sent_confirm < self.confirm and c.next_offset >= self.log.max_phy_offset:
                out += self._heartbeat(c, now_ms)
        return out

    def _close(self, c: SlaveConnection, reason: str) -> list[Action]:
        if self.conns.pop(c.conn, None) is not None:
            self._member_gone(c, c.last_read_ms)
        return [Close(c.conn, reason), *self._recompute()]

    def _member_gone(self, c: SlaveConnection, at_ms: int) -> None:
        if self.cfg.shrink_on_disconnect and c.slave_id in self.remote_set:
            self.next_check_ms = min(self.next_check_ms, at_ms)  # shrink at the next tick

    # ------------------------------------------------------------------ confirm offset and progress

    def _compute_confirm(self) -> int:
        mx = self.log.max_phy_offset
        eff = self.effective_set()
        if not self.cfg.all_ack_in_sync_state_set or eff == {self.broker_id}:
            return mx
        acks = self.member_acks()
        if len(acks) < len(eff - {self.broker_id}):
            return min(self.confirm, mx)  # a member has no connection or has not reported yet: keep
        return min(mx, *acks.values())

    def _update_confirm(self) -> None:
        confirm = self._compute_confirm()
        if confirm != self.confirm or self.log.confirm_offset != confirm:
            self.confirm = confirm
            self.log.set_confirm_offset(confirm)

    def _recompute(self) -> list[Action]:
        if self.fenced:
            return []
        self._update_confirm()
        prog = self.progress()
        if prog == self.last_progress:
            return []
        self.last_progress = prog
        return [prog]
