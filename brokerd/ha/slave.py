"""The slave side of AutoSwitch HA (spec §4.4) as a sans-I/O state machine.

The driver connects to the master's HA address whenever ``needs_connection`` is true (with its own backoff), then
feeds ``on_connected`` / ``on_data`` / ``on_disconnected`` / ``tick`` and executes the returned ``Send`` / ``Close``
actions. Sequence: READY → (connected) HANDSHAKE, send the slave handshake → (master handshake) truncate the log
and epochs to the consistent point, TRANSFER, report the max offset → (frames) check the offset, record a new
epoch, append, confirm = min(frame confirm, local max), report. Any mismatch closes the connection ("reset"):
the driver reconnects and the handshake starts over.

Deviations from RocketMQ: local epochs that hold no data (start at/after the max offset) are left out of the
consistent-point search (the simulation found slaves stuck forever on such an entry the new master never had); with no common
epoch at all, the point is where the older of the two first epochs starts (RocketMQ retries forever: the
simulation found slaves holding only unconfirmed data of an epoch the new master never received anything of);
a slave whose epoch history is empty but whose log holds data refuses to sync (closes
with a reason) instead of reporting 0 and looping on offset mismatches; an empty log reports its max offset.
"""

from __future__ import annotations

from brokerd.ha.actions import Action, Close, ConnId, Send
from brokerd.ha.config import HAConfig
from brokerd.ha.log import ReplicaLog
from brokerd.ha.wire import (
    HAConnectionState,
    HAProtocolError,
    MasterHandshake,
    MasterMessage,
    MasterMessageDecoder,
    SlaveHandshake,
    SlaveReport,
    TransferFrame,
    encode_parts,
)
from brokerd.store.epoch import consistent_point

S = HAConnectionState


class HASlave:
    def __init__(self, cfg: HAConfig, log: ReplicaLog, broker_id: int, now_ms: int) -> None:
        self.cfg = cfg
        self.log = log
        self.broker_id = broker_id
        self.state = S.READY
        self.conn: ConnId | None = None
        self.decoder = MasterMessageDecoder(cfg.max_frame_body)
        self.last_read_ms = now_ms
        self.last_write_ms = now_ms
        self.reported = -1
        self.truncated_to: int | None = None  # the last handshake's truncation point (for observers/tests)
        self.last_close_reason = ""

    @property
    def needs_connection(self) -> bool:
        return self.conn is None

    # ------------------------------------------------------------------ inputs

    def on_connected(self, conn: ConnId, now_ms: int) -> list[Action]:
        if self.conn is not None:
            raise ValueError(f"already connected ({self.conn})")
        self.conn, self.state = conn, S.HANDSHAKE
        self.decoder = MasterMessageDecoder(self.cfg.max_frame_body)
        self.last_read_ms = self.last_write_ms = now_ms
        self.reported = -1
        hs = SlaveHandshake(self.broker_id, self.cfg.sync_from_last_file, self.cfg.async_learner)
        return [Send(conn, encode_parts(hs))]

    def on_disconnected(self, conn: ConnId, now_ms: int) -> list[Action]:
        if conn == self.conn:
            self.conn, self.state = None, S.READY
        return []

    def on_data(self, conn: ConnId, data: bytes | bytearray | memoryview, now_ms: int) -> list[Action]:
        if conn != self.conn:
            return []
        self.last_read_ms = now_ms
        try:
            msgs = self.decoder.feed_messages(data)
        except HAProtocolError as exc:
            return self._reset(str(exc))
        return self.on_messages(conn, msgs, now_ms)

    def on_messages(self, conn: ConnId, msgs: list[MasterMessage], now_ms: int) -> list[Action]:
        out: list[Action] = []
        for msg in msgs:
            if conn != self.conn:
                break
            self.last_read_ms = now_ms
            if isinstance(msg, MasterHandshake):
                out += self._on_handshake(msg, now_ms)
            else:
                out += self._on_frame(msg, now_ms)
        if self.state is S.TRANSFER and conn == self.conn:
            out += self._report(now_ms, force=False)  # one report for the whole batch of frames
        return out

    def tick(self, now_ms: int) -> list[Action]:
        if self.conn is None:
            return []
        if now_ms - self.last_read_ms > self.cfg.ha_housekeeping_interval_ms:
            return self._reset(f"no read for {now_ms - self.last_read_ms} ms")
        if self.state is S.TRANSFER and now_ms - self.last_write_ms >= self.cfg.ha_send_heartbeat_interval_ms:
            return self._report(now_ms, force=True)
        return []

    # ------------------------------------------------------------------ protocol

    def _on_handshake(self, msg: MasterHandshake, now_ms: int) -> list[Action]:
        if self.state is not S.HANDSHAKE:
            return self._reset(f"master handshake in state {self.state.name}")
        point = self.truncation_point(msg)
        if point < 0:
            return self._reset("no consistent point with the master's epochs; retry later")
        if point < self.log.max_phy_offset:
            self.log.truncate_dirty_files(point)
        else:
            stale = [e for e in self.log.epoch_entries() if e.start_offset >= point]
            if stale:  # epochs that wrote nothing here: the frames re-add the master's
                self.log.truncate_epochs_from(stale[0].epoch)
        self.truncated_to = point
        self.state = S.TRANSFER
        return self._report(now_ms, force=True)

    def truncation_point(self, msg: MasterHandshake) -> int:
        """Where this log agrees with the master's (spec §4.4 step 2, plus the fallbacks in the module doc);
        -1 when nowhere."""
        mx = self.log.max_phy_offset
        # epochs that wrote nothing here (start at/after the end) say nothing about agreement; a master drops
        # its own such entries on election, so keeping them would find no consistent point forever
        entries = [e for e in self.log.epoch_entries() if e.start_offset < mx]
        if not entries:
            return mx if mx == self.log.min_phy_offset else -1
        point = consistent_point(entries, list(msg.entries), mx, msg.max_offset)
        if point < 0 and msg.entries:
            # no common epoch: the histories part where the older of the two first epochs starts (e.g. a slave
            # kept unconfirmed data of an epoch the new master never received anything of)
            first = min(entries[0].start_offset, msg.entries[0].start_offset)
            if self.log.min_phy_offset <= first <= mx:
                point = first
        return point

    def _on_frame(self, f: TransferFrame, now_ms: int) -> list[Action]:
        if self.state is not S.TRANSFER:
            return self._reset(f"transfer frame in state {self.state.name}")
        mx = self.log.max_phy_offset
        if mx != 0 and f.start_offset != mx:
            return self._reset(f"frame at {f.start_offset} but the log ends at {mx}")
        if f.epoch != self.log.last_epoch() or not self.log.epoch_entries():
            if not self.log.append_epoch(f.epoch, f.epoch_start_offset):
                return self._reset(f"epoch ({f.epoch}, {f.epoch_start_offset}) does not follow "
                                   f"{self.log.epoch_entries()[-1:]}")  # fmt: skip
        if len(f.body):
            self.log.append_raw(f.start_offset, f.body)
        self.log.set_confirm_offset(min(f.confirm_offset, self.log.max_phy_offset))
        return []  # on_messages reports once per batch

    def _report(self, now_ms: int, force: bool) -> list[Action]:
        mx = self.log.max_phy_offset
        if self.conn is None or (not force and mx <= self.reported):
            return []
        self.reported = mx
        self.last_write_ms = now_ms
        return [Send(self.conn, encode_parts(SlaveReport(mx)))]

    def _reset(self, reason: str) -> list[Action]:
        conn = self.conn
        self.conn, self.state = None, S.READY
        self.last_close_reason = reason
        return [] if conn is None else [Close(conn, reason)]
