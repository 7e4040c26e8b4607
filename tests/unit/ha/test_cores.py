"""The master/slave HA cores driven directly (no sockets): handshake, chunking, truncation, heartbeats,
housekeeping, SyncStateSet expand/shrink, confirm offset, sync-replication decisions, fencing."""

from __future__ import annotations

import struct

import pytest

from brokerd.ha.actions import ALL_ACK, Action, AlterSyncStateSet, Close, ReplicationProgress, Send, become_master
from brokerd.ha.config import HAConfig
from brokerd.ha.log import MemoryLog
from brokerd.ha.master import HAMaster, NotWritableError, WaitOutcome
from brokerd.ha.slave import HASlave
from brokerd.ha.wire import HAConnectionState, MasterMessageDecoder, TransferFrame
from brokerd.store.epoch import EpochEntry

CFG = HAConfig(ha_transfer_batch_size=64, transfer_window_bytes=256, all_ack_in_sync_state_set=True)


def _bytes(a: Send) -> bytes:
    return b"".join(bytes(p) for p in a.parts)


class Link:
    """One master and one slave joined by a lossless in-order pipe; records every action and master→slave frame."""

    def __init__(self, master: HAMaster, slave: HASlave, conn: int = 1) -> None:
        self.m, self.s, self.conn = master, slave, conn
        self.frames: list[bytes] = []
        self.actions: list[Action] = []

    def connect(self, now: int = 0) -> None:
        self.pump(self.m.on_connected(self.conn, now), now)
        self.pump(self.s.on_connected(self.conn, now), now, from_master=False)

    def pump(self, actions: list[Action], now: int, from_master: bool = True) -> None:
        queue = [(a, from_master) for a in actions]
        while queue:
            a, by_master = queue.pop(0)
            self.actions.append(a)
            if isinstance(a, Send):
                if by_master:
                    self.frames.append(_bytes(a))
                    queue += [(x, False) for x in self.s.on_data(a.conn, _bytes(a), now)]
                else:
                    queue += [(x, True) for x in self.m.on_data(a.conn, _bytes(a), now)]
            elif isinstance(a, Close):
                queue += [(x, True) for x in self.m.on_disconnected(a.conn, now)]
                queue += [(x, False) for x in self.s.on_disconnected(a.conn, now)]


def _link(master: HAMaster, slave: HASlave) -> Link:
    return Link(master, slave)


def _master_log(*chunks: tuple[int, bytes]) -> MemoryLog:
    log = MemoryLog()
    for epoch, data in chunks:
        become_master(log, epoch)
        log.append_raw(log.max_phy_offset, data)
    return log


def _frames(link: Link) -> list[TransferFrame]:
    dec = MasterMessageDecoder()
    return [m for b in link.frames for m in dec.feed_messages(b) if isinstance(m, TransferFrame)]


def test_a_new_slave_copies_the_log_in_chunks_that_never_cross_an_epoch_end() -> None:
    mlog = _master_log((1, b"a" * 100), (2, b"b" * 150))
    master = HAMaster(CFG, mlog, 1, 2, frozenset({1}), 1, 0)
    slog = MemoryLog()
    link = _link(master, HASlave(CFG, slog, 2, 0))
    link.connect()
    assert slog.data == mlog.data and slog.epochs == mlog.epochs == [EpochEntry(1, 0), EpochEntry(2, 100)]
    frames = _frames(link)
    assert all(len(f.body) <= 64 for f in frames)
    assert not [f for f in frames if f.start_offset < 100 < f.start_offset + len(f.body)]
    assert [f.epoch for f in frames if f.start_offset >= 100] == [2, 2, 2]
    alters = [a for a in link.actions if isinstance(a, AlterSyncStateSet)]
    assert alters == [AlterSyncStateSet(1, 2, frozenset({1, 2}), 1)]


def test_confirm_is_the_min_ack_of_the_set_and_the_union_counts_while_an_alter_is_in_flight() -> None:
    mlog = _master_log((1, b"x" * 40))
    master = HAMaster(CFG, mlog, 1, 1, frozenset({1}), 1, 0)
    slog = MemoryLog()
    link = _link(master, HASlave(CFG, slog, 2, 0))
    link.connect()
    assert master.effective_set() == {1, 2} and master.confirm == 40  # union: slave 2 acked 40
    master.on_alter_failed(10)
    link.pump(master.on_sync_state_set(frozenset({1}), 1, 20), 20)  # a stale notification: still in flight
    assert master.proposed is not None
    master.on_sync_state_set(frozenset({1, 2}), 2, 30)
    assert master.proposed is None and master.remote_set == {1, 2}
    link.pump(master.on_disconnected(1, 40) + link.s.on_disconnected(1, 40), 40)
    link.pump(master.append(b"y" * 10, 50), 50)
    assert master.confirm == 40 and mlog.confirm == 40  # member 2 has no connection: the old value stays
    assert master.wait_for_replicas(50).outcome is WaitOutcome.WAIT
    link.connect(60)
    assert master.confirm == 50 and slog.confirm <= 50
    progress = [a for a in link.actions if isinstance(a, ReplicationProgress)][-1]
    assert progress.releases(50, ALL_ACK) and progress.acked == (50, 50)


def test_shrink_drops_a_member_without_connection_and_reports_it() -> None:
    mlog = _master_log((1, b"x" * 10))
    master = HAMaster(CFG, mlog, 1, 1, frozenset({1, 2, 3}), 4, 0)
    out = master.tick(CFG.check_sync_state_set_period_ms)
    assert out == [AlterSyncStateSet(1, 1, frozenset({1}), 4)]
    assert master.confirm == 10 or master.confirm == 0


def test_shrink_drops_a_connected_member_that_stopped_catching_up() -> None:
    cfg = HAConfig(ha_transfer_batch_size=64, transfer_window_bytes=256)
    mlog = _master_log((1, b"x" * 10))
    master = HAMaster(cfg, mlog, 1, 1, frozenset({1, 2}), 1, 0)
    link = _link(master, HASlave(cfg, MemoryLog(), 2, 0))
    link.connect(0)
    master.on_sync_state_set(frozenset({1, 2}), 2, 0)
    link.s.on_data = lambda *a: []  # type: ignore[method-assign]  # the slave stops processing
    link.pump(master.append(b"z" * 10, 1000), 1000)
    t = 0
    alters: list[Action] = []
    while not alters and t < 60_000:
        t += 1000
        alters = [a for a in master.tick(t) if isinstance(a, AlterSyncStateSet)]
    assert alters == [AlterSyncStateSet(1, 1, frozenset({1}), 2)]
    assert t > cfg.ha_max_time_slave_not_catchup_ms


def _idle_pair() -> tuple[HAMaster, Link]:
    """A master and its slave, both in the sync state set, the slave holding everything; haMaxTimeSlaveNotCatchup
    (3 s) shorter than the slave's idle report interval (5 s)."""
    cfg = HAConfig(ha_transfer_batch_size=64, transfer_window_bytes=256, ha_max_time_slave_not_catchup_ms=3000,
                   check_sync_state_set_period_ms=1000, ha_send_heartbeat_interval_ms=5000)  # fmt: skip
    master = HAMaster(cfg, _master_log((1, b"x" * 10)), 1, 1, frozenset({1, 2}), 1, 0)
    link = _link(master, HASlave(cfg, MemoryLog(), 2, 0))
    link.connect(0)
    master.on_sync_state_set(frozenset({1, 2}), 2, 0)
    return master, link


def test_an_idle_member_holding_everything_stays_in_the_set_between_its_reports() -> None:
    """haMaxTimeSlaveNotCatchup shorter than the slave's idle report interval: no data, nothing to catch up."""
    master, link = _idle_pair()
    for t in range(1000, 30_000, 1000):  # idle, the connection alive, a report only every 5 s
        out = master.tick(t)
        assert not [a for a in out if isinstance(a, AlterSyncStateSet)], t
        link.pump(out, t)
        link.pump(link.s.tick(t), t, from_master=False)


def test_the_first_write_after_a_long_idle_time_does_not_shrink_a_member_that_held_everything() -> None:
    """Idle for a minute, then a write: the member gets haMaxTimeSlaveNotCatchup from that write to catch up, and
    is dropped only when it does not."""
    master, link = _idle_pair()
    for t in range(500, 60_000, 500):  # idle; the master's checks run between the slave's 5 s reports
        link.pump(master.tick(t), t)
        link.pump(link.s.tick(t), t, from_master=False)
    link.s.on_data = lambda *a: []  # type: ignore[method-assign]  # the write below is not acknowledged (yet)
    link.pump(master.append(b"y" * 10, 60_100), 60_100)
    alters = [(t, a) for t in range(60_500, 70_000, 500) for a in master.tick(t) if isinstance(a, AlterSyncStateSet)]
    assert alters and alters[0] == (63_500, AlterSyncStateSet(1, 1, frozenset({1}), 2))  # 3 s after the write


def test_heartbeat_after_idle_and_housekeeping_close_after_silence() -> None:
    mlog = _master_log((1, b"x" * 10))
    master = HAMaster(CFG, mlog, 1, 1, frozenset({1}), 1, 0)
    link = _link(master, HASlave(CFG, MemoryLog(), 2, 0))
    link.connect(0)
    assert master.tick(4999) == []
    (hb,) = master.tick(5000)
    assert isinstance(hb, Send) and _bytes(hb) == struct.pack(">iiqiqq", 2, 0, 10, 1, 0, 10)
    out = master.tick(20_001)
    assert [a for a in out if isinstance(a, Close)] == [Close(1, "no read for 20001 ms")]


def test_slave_truncates_a_divergent_suffix_to_the_consistent_point() -> None:
    # the slave was master of epoch 2 and wrote 30 bytes nobody received; the new master (epoch 3) never had them
    slog = _master_log((1, b"a" * 50), (2, b"LOST" * 5))
    mlog = _master_log((1, b"a" * 50), (3, b"b" * 20))
    master = HAMaster(CFG, mlog, 1, 3, frozenset({1}), 1, 0)
    slave = HASlave(CFG, slog, 2, 0)
    link = _link(master, slave)
    link.connect()
    assert slave.truncated_to == 50
    assert slog.data == mlog.data and slog.epochs == [EpochEntry(1, 0), EpochEntry(3, 50)]


def test_no_consistent_point_closes_and_keeps_the_data() -> None:
    slog = MemoryLog()
    slog.append_raw(0, b"orphan")  # data without any epoch history
    master = HAMaster(CFG, _master_log((1, b"m" * 5)), 1, 1, frozenset({1}), 1, 0)
    link = _link(master, HASlave(CFG, slog, 2, 0))
    link.connect()
    closes = [a for a in link.actions if isinstance(a, Close)]
    assert closes and "no consistent point" in closes[0].reason and slog.data == b"orphan"


def test_slave_resets_on_a_frame_at_the_wrong_offset() -> None:
    slog = _master_log((1, b"a" * 10))
    slave = HASlave(CFG, slog, 2, 0)
    slave.on_connected(7, 0)
    slave.state = HAConnectionState.TRANSFER
    frame = TransferFrame(99, 1, 0, 0, b"zz")
    out = slave.on_messages(7, [frame], 1)
    assert out == [Close(7, "frame at 99 but the log ends at 10")] and slave.needs_connection and slog.max_phy_offset == 10


def test_protocol_errors_close_the_connection() -> None:
    master = HAMaster(CFG, _master_log((1, b"m")), 1, 1, frozenset({1}), 1, 0)
    master.on_connected(3, 0)
    assert master.on_data(3, struct.pack(">iq", 2, 0), 1)[0] == Close(3, "transfer report before handshake")
    master.on_connected(4, 0)
    (close, *_) = master.on_data(4, struct.pack(">iq", 9, 0), 1)
    assert isinstance(close, Close) and "state 9" in close.reason and 4 not in master.conns


def test_sync_replication_decisions() -> None:
    cfg = HAConfig(in_sync_replicas=2, ha_max_gap_not_in_sync=100)
    mlog = _master_log((1, b"m" * 10))
    master = HAMaster(cfg, mlog, 1, 1, frozenset({1}), 1, 0)
    assert master.wait_for_replicas(10, sync_master=False).outcome is WaitOutcome.OK
    assert master.wait_for_replicas(10).outcome is WaitOutcome.SLAVE_NOT_AVAILABLE  # nobody connected
    link = _link(master, HASlave(cfg, MemoryLog(), 2, 0))
    link.connect()
    master.on_sync_state_set(frozenset({1, 2}), 2, 0)
    link.s.on_data = lambda *a: []  # type: ignore[method-assign]
    master.append(b"n" * 20, 1)
    decision = master.wait_for_replicas(30)
    assert decision.outcome is WaitOutcome.WAIT and decision.need == 2
    assert master.wait_for_replicas(10).outcome is WaitOutcome.OK
    master.append(b"o" * 200, 2)  # the slave is now more than haMaxGapNotInSync behind
    assert master.wait_for_replicas(230).outcome is WaitOutcome.SLAVE_NOT_AVAILABLE
    auto = HAMaster(HAConfig(in_sync_replicas=3, min_in_sync_replicas=1, enable_auto_in_sync_replicas=True),
                    _master_log((1, b"q")), 1, 1, frozenset({1}), 1, 0)  # fmt: skip
    assert auto.wait_for_replicas(1).outcome is WaitOutcome.OK  # need clamps down to the 1 replica in sync


def test_fenced_master_refuses_writes_and_drops_connections() -> None:
    master = HAMaster(CFG, _master_log((1, b"m")), 1, 1, frozenset({1}), 1, 0)
    master.on_connected(5, 0)
    assert master.observe_epoch(1) == []
    assert master.observe_epoch(2) == [Close(5, "master stepped down")] and not master.writable
    with pytest.raises(NotWritableError, match="no longer master of epoch 1"):
        master.append(b"x", 1)


def test_become_master_drops_epochs_that_wrote_nothing_and_resumes_the_same_epoch() -> None:
    log = _master_log((1, b"a" * 5))
    log.append_epoch(2, 5)  # elected for epoch 2, wrote nothing
    become_master(log, 4)
    assert log.epochs == [EpochEntry(1, 0), EpochEntry(4, 5)]
    become_master(log, 4)  # restarted as master of the same epoch
    assert log.epochs == [EpochEntry(1, 0), EpochEntry(4, 5)]
    log.append_raw(5, b"b" * 5)
    with pytest.raises(ValueError, match="epoch 4 wrote data"):
        become_master(log, 3)  # would relabel epoch 4's data
    assert log.epochs == [EpochEntry(1, 0), EpochEntry(4, 5)]
    with pytest.raises(ValueError, match="call become_master first"):
        HAMaster(CFG, log, 1, 5, frozenset({1}), 1, 0)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"ha_transfer_batch_size": 0}, "ha_transfer_batch_size"),
    ({"in_sync_replicas": 0}, "in_sync_replicas"),
    ({"all_ack_in_sync_state_set": 1}, "all_ack_in_sync_state_set"),
    ({"transfer_window_bytes": 10}, "transfer_window_bytes"),
    ({"ha_send_heartbeat_interval_ms": 30_000}, "ha_send_heartbeat_interval_ms"),
])  # fmt: skip
def test_config_rejects_bad_values_naming_the_key(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=f"^{key}:"):
        HAConfig(**kwargs)  # type: ignore[arg-type]
