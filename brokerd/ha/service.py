"""One broker's replication, driven by asyncio: the HA port, the master core or the slave core, the replica
waiters, and the timers. Roles are set from outside (``become_master`` / ``become_slave``), by the classic
static role or by the controller link (``controller_link.py``); this class never decides a role itself.

Threading: event loop thread only. The store calls ``_on_append`` after every local append; pushing new bytes to
the slaves happens once per loop iteration (``call_soon``), so a burst of appends costs one pump.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any, Protocol

import structlog

from brokerd.ha.acks import Acked, ReplicaWaiters
from brokerd.ha.actions import Action, AlterSyncStateSet, Close, ReplicationProgress, Send, become_master
from brokerd.ha.config import HAConfig
from brokerd.ha.master import HAMaster, WaitOutcome
from brokerd.ha.net import HAConnection, HAServer, connect
from brokerd.ha.slave import HASlave
from brokerd.ha.store_log import ReplicaStore, StoreReplicaLog
from brokerd.store.results import PutStatus

TICK_S = 0.1
CONNECT_TIMEOUT_S = 3.0
RECONNECT_S = 0.5

AlterFn = Callable[[AlterSyncStateSet], Awaitable[tuple[frozenset[int], int]]]
"""Sends CONTROLLER_ALTER_SYNC_STATE_SET; returns the controller's (new set, new set epoch) or raises."""

_WAIT_STATUS = {
    WaitOutcome.OK: PutStatus.PUT_OK,
    WaitOutcome.SLAVE_NOT_AVAILABLE: PutStatus.SLAVE_NOT_AVAILABLE,
    WaitOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH: PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
}


class Role(Enum):
    NONE = "NONE"
    MASTER = "MASTER"
    SLAVE = "SLAVE"


class HAStore(ReplicaStore, Protocol):
    def set_append_listener(self, cb: Callable[[], None] | None) -> None: ...

    def set_dispatch_behind_confirm(self, flag: bool) -> None: ...


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _SlaveSide:
    """The ``ConnSink`` of the slave's outgoing connection."""

    def __init__(self, svc: HAService) -> None:
        self.svc = svc

    def conn_made(self, conn: HAConnection) -> None:
        self.svc.slave_conn_made(conn)

    def conn_data(self, conn: HAConnection, data: bytes) -> None:
        self.svc.slave_conn_data(conn, data)

    def conn_lost(self, conn: HAConnection) -> None:
        self.svc.slave_conn_lost(conn)


class HAService:
    def __init__(self, cfg: HAConfig, store: HAStore, *, port: int, sync_master: bool,
                 hold_reads_at_confirm: bool = False, alter: AlterFn | None = None,
                 on_alter_failed: Callable[[], None] | None = None, log: Any = None) -> None:  # fmt: skip
        self.cfg = cfg
        self.store = store
        self.log_adapter = StoreReplicaLog(store)
        self.sync_master = sync_master
        self.hold_reads_at_confirm = hold_reads_at_confirm
        self.alter = alter
        self.on_alter_failed = on_alter_failed
        self.log = log if log is not None else structlog.get_logger("ha")
        self.role = Role.NONE
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.master_ha_addr: str | None = None
        self.conns: dict[int, HAConnection] = {}
        self.slave_conn: HAConnection | None = None
        self.waiters = ReplicaWaiters(cfg.sync_flush_timeout_ms)
        self.server: HAServer | None = None
        self._port = port
        self.last_progress: ReplicationProgress | None = None
        self._slave_side = _SlaveSide(self)
        self._slave_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._alters: set[asyncio.Task[None]] = set()
        self._pump_scheduled = False
        self._confirm_scheduled = False
        self._connect_failures = 0
        self.stats = {"frames_in": 0, "bytes_in": 0, "connects": 0, "resets": 0, "alters": 0, "alter_failures": 0}

    # ------------------------------------------------------------------ lifecycle

    async def listen(self, host: str) -> None:
        """Bind the HA port (the container does, as it binds the broker's other ports; raises OSError)."""
        if self.server is None:
            server = HAServer(self, host, self._port)
            await server.start()
            self.server, self._port = server, server.port

    async def start(self) -> None:
        self.store.set_append_listener(self._on_append)
        if self.hold_reads_at_confirm:  # consumers see only confirmed data (0 until a role sets it)
            self.store.set_confirm_offset(0)
            self.store.set_dispatch_behind_confirm(True)
        self._tasks = [asyncio.create_task(self._tick_loop()), asyncio.create_task(self._slave_loop())]
        self.log.info("ha_service_started", ha_port=self.port, listening=self.server is not None)

    async def stop(self) -> None:
        for t in [*self._tasks, *self._alters]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._alters, return_exceptions=True)
        self._tasks, self._alters = [], set()
        self.store.set_append_listener(None)
        self._drop_master(PutStatus.FLUSH_SLAVE_TIMEOUT)
        self._drop_slave()
        await self.unlisten()

    async def unlisten(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    @property
    def port(self) -> int:
        """The HA port (the bound one once ``listen`` ran)."""
        return self._port

    # ------------------------------------------------------------------ roles

    def become_master(self, broker_id: int, epoch: int, sync_state_set: frozenset[int], sss_epoch: int) -> None:
        """Take writes as master of ``epoch`` (the store's tail must be whole: recovery truncated torn data).
        Raises ValueError when this log cannot start ``epoch`` (it wrote data in a later one)."""
        if self.master is not None and self.master.epoch == epoch and not self.master.fenced:
            self.master.broker_id = broker_id
            self._execute(self.master.on_sync_state_set(sync_state_set, sss_epoch, now_ms()))
            return
        self._drop_slave()
        self._drop_master(PutStatus.FLUSH_SLAVE_TIMEOUT)
        become_master(self.log_adapter, epoch)
        self.master = HAMaster(self.cfg, self.log_adapter, broker_id, epoch, sync_state_set, sss_epoch, now_ms())
        self.role = Role.MASTER
        self._execute(self.master.on_local_append(now_ms()))
        self.log.info("ha_became_master", epoch=epoch, sync_state_set=sorted(self.master.remote_set),
                      max_offset=self.store.max_phy_offset)  # fmt: skip

    def become_slave(self, broker_id: int, master_ha_addr: str | None) -> None:
        """Follow the master at ``master_ha_addr`` (None: not known yet, see ``set_master_address``)."""
        self._drop_master(PutStatus.FLUSH_SLAVE_TIMEOUT)
        if self.slave is None or self.slave.broker_id != broker_id:
            self._drop_slave()
            self.slave = HASlave(self.cfg, self.log_adapter, broker_id, now_ms())
        self.role = Role.SLAVE
        self.set_master_address(master_ha_addr)

    def set_master_address(self, addr: str | None) -> None:
        if addr == self.master_ha_addr:
            self._slave_wake.set()
            return
        self.master_ha_addr = addr
        if self.slave_conn is not None:
            self._close_slave_conn("master changed")
        self.log.info("ha_master_address", master_ha_addr=addr)
        self._slave_wake.set()

    def on_sync_state_set(self, members: frozenset[int], sss_epoch: int, requested_at_ms: int | None = None) -> None:
        if self.master is not None:
            self._execute(self.master.on_sync_state_set(members, sss_epoch, now_ms(), requested_at_ms=requested_at_ms))

    def observe_epoch(self, epoch: int) -> None:
        """A master epoch seen elsewhere: a newer one fences this master (writes refused from now on)."""
        if self.master is not None:
            acts = self.master.observe_epoch(epoch)
            if self.master.fenced:
                self.waiters.fail_all(PutStatus.FLUSH_SLAVE_TIMEOUT)
            self._execute(acts)

    def _drop_master(self, status: PutStatus) -> None:
        if self.master is not None:
            self._execute(self.master.step_down())
            self.master = None
        for conn in list(self.conns.values()):
            conn.close()
        self.conns.clear()
        self.waiters.fail_all(status)
        if self.role is Role.MASTER:
            self.role = Role.NONE

    def _drop_slave(self) -> None:
        if self.slave_conn is not None:
            self._close_slave_conn("role changed")
        self.slave = None
        self.master_ha_addr = None
        if self.role is Role.SLAVE:
            self.role = Role.NONE

    # ------------------------------------------------------------------ writes

    @property
    def writable(self) -> bool:
        return self.master is not None and self.master.writable

    @property
    def waits_for_replicas(self) -> bool:
        return self.master is not None and (self.sync_master or self.cfg.all_ack_in_sync_state_set)

    def replica_ack(self, end: int, done: Acked) -> PutStatus | None:
        m = self.master
        if m is None or not self.waits_for_replicas:
            return PutStatus.PUT_OK
        if m.fenced:
            return PutStatus.FLUSH_SLAVE_TIMEOUT
        d = m.wait_for_replicas(end, sync_master=True)
        if d.outcome is WaitOutcome.WAIT:
            self.waiters.add(end, d.need, done)
            return None
        return _WAIT_STATUS[d.outcome]

    def _on_append(self) -> None:
        m = self.master
        if m is not None and not self._pump_scheduled and not m.confirm_alone():  # a slave: push once per loop turn
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_scheduled = False
        if self.master is not None:
            self._execute(self.master.on_local_append(now_ms()))

    # ------------------------------------------------------------------ master side connections (ConnSink)

    def conn_made(self, conn: HAConnection) -> None:
        if self.master is None or self.master.fenced:
            self.log.info("ha_connection_refused", peer=conn.peer, role=self.role.value)
            conn.close()
            return
        self.conns[conn.id] = conn
        self._execute(self.master.on_connected(conn.id, now_ms()))

    def conn_data(self, conn: HAConnection, data: bytes) -> None:
        if self.master is not None and conn.id in self.conns:
            self._execute(self.master.on_data(conn.id, data, now_ms()))
            if not self._confirm_scheduled:  # the acks of this loop iteration move the confirm offset once
                self._confirm_scheduled = True
                asyncio.get_running_loop().call_soon(self._send_confirm)

    def _send_confirm(self) -> None:
        self._confirm_scheduled = False
        if self.master is not None:
            self._execute(self.master.confirm_frames(now_ms()))

    def conn_lost(self, conn: HAConnection) -> None:
        if self.conns.pop(conn.id, None) is not None and self.master is not None:
            self._execute(self.master.on_disconnected(conn.id, now_ms()))

    # ------------------------------------------------------------------ slave side connection

    def slave_conn_made(self, conn: HAConnection) -> None:
        slave = self.slave
        if slave is None or self.slave_conn is not None or not slave.needs_connection:
            conn.close()
            return
        self.slave_conn = conn
        self.stats["connects"] += 1
        self._connect_failures = 0
        self.log.info("ha_slave_connected", master_ha_addr=self.master_ha_addr, max_offset=self.store.max_phy_offset)
        self._execute(slave.on_connected(conn.id, now_ms()))

    def slave_conn_data(self, conn: HAConnection, data: bytes) -> None:
        slave = self.slave
        if slave is None or conn is not self.slave_conn:
            return
        self.stats["bytes_in"] += len(data)
        try:
            acts = slave.on_data(conn.id, data, now_ms())
        except (ValueError, OSError, RuntimeError) as exc:  # the store refused the bytes: start over
            self.log.warning("ha_slave_append_failed", error=str(exc))
            acts = [Close(conn.id, f"append failed: {exc}")]
            slave.on_disconnected(conn.id, now_ms())
        self._execute(acts)

    def slave_conn_lost(self, conn: HAConnection) -> None:
        if conn is self.slave_conn:
            self.slave_conn = None
            if self.slave is not None:
                self._execute(self.slave.on_disconnected(conn.id, now_ms()))
            self.log.info("ha_slave_disconnected", master_ha_addr=self.master_ha_addr)
            self._slave_wake.set()

    def _close_slave_conn(self, reason: str) -> None:
        conn, self.slave_conn = self.slave_conn, None
        if conn is None:
            return
        conn.close()
        if self.slave is not None:
            self.slave.on_disconnected(conn.id, now_ms())
        self.log.info("ha_slave_connection_closed", reason=reason)

    async def _slave_loop(self) -> None:
        while True:
            await self._slave_wake.wait()
            self._slave_wake.clear()
            while self.slave is not None and self.slave.needs_connection and self.slave_conn is None:
                addr = self.master_ha_addr
                if addr is None:
                    break
                try:
                    await connect(self._slave_side, addr, CONNECT_TIMEOUT_S)
                except (OSError, TimeoutError, ValueError) as exc:
                    self._connect_failures += 1
                    if self._connect_failures == 1:
                        self.log.warning("ha_slave_connect_failed", master_ha_addr=addr, error=repr(exc))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._slave_wake.wait(), RECONNECT_S)
                    self._slave_wake.clear()
                    continue
                if self.slave_conn is None:  # connected but refused by slave_conn_made (role changed meanwhile)
                    break

    # ------------------------------------------------------------------ actions and timers

    def _conn(self, conn_id: int) -> HAConnection | None:
        sc = self.slave_conn
        if sc is not None and sc.id == conn_id:
            return sc
        return self.conns.get(conn_id)

    def _execute(self, actions: list[Action]) -> None:
        """Run the core's actions in order; the frames for one connection go out in one write per call."""
        pending: dict[int, list[Any]] = {}
        for a in actions:
            if isinstance(a, Send):
                pending.setdefault(a.conn, []).extend(a.parts)
                continue
            if pending:
                self._flush_sends(pending)
            if isinstance(a, ReplicationProgress):
                self.last_progress = a
                self.waiters.release(a)
            elif isinstance(a, Close):
                self._on_close_action(a)
            else:
                self._start_alter(a)
        if pending:
            self._flush_sends(pending)

    def _flush_sends(self, pending: dict[int, list[Any]]) -> None:
        for conn_id, parts in pending.items():
            conn = self._conn(conn_id)
            if conn is not None:
                conn.send(parts)
        pending.clear()

    def _on_close_action(self, a: Close) -> None:
        conn = self._conn(a.conn)
        if conn is None:
            return
        self.log.info("ha_connection_closed", peer=conn.peer, reason=a.reason)
        if conn is self.slave_conn:
            self.slave_conn = None
            self.stats["resets"] += 1
            self._slave_wake.set()
        else:
            self.conns.pop(conn.id, None)
        conn.close()

    def _start_alter(self, a: AlterSyncStateSet) -> None:
        self.stats["alters"] += 1
        task = asyncio.get_running_loop().create_task(self._alter(a))
        self._alters.add(task)
        task.add_done_callback(self._alters.discard)

    async def _alter(self, a: AlterSyncStateSet) -> None:
        master = self.master
        try:
            if self.alter is None:  # no controller (classic roles): the set is this master's own
                members, epoch = a.new_sync_state_set, a.sync_state_set_epoch + 1
            else:
                members, epoch = await self.alter(a)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - refused or unreachable: the core keeps the union set
            self.stats["alter_failures"] += 1
            self.log.warning("ha_alter_sync_state_set_failed", proposed=sorted(a.new_sync_state_set), error=str(exc))
            if master is self.master and master is not None:
                self._execute(master.on_alter_failed(now_ms()))
                if self.on_alter_failed is not None:
                    self.on_alter_failed()
            return
        self.log.info("ha_sync_state_set_altered", sync_state_set=sorted(members), sync_state_set_epoch=epoch)
        if master is self.master and master is not None:
            self._execute(master.on_sync_state_set(members, epoch, now_ms()))

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)  # sleep-ok: timer period
            try:
                now = now_ms()
                if self.master is not None:
                    self._execute(self.master.tick(now))
                if self.slave is not None:
                    self._execute(self.slave.tick(now))
                self.waiters.expire()
            except Exception:  # noqa: BLE001 - never let the timer die
                self.log.exception("ha_tick_failed")

    # ------------------------------------------------------------------ observability

    def status(self) -> dict[str, Any]:
        st: dict[str, Any] = {"role": self.role.value, "haPort": self.port, "maxOffset": self.store.max_phy_offset,
                              "confirmOffset": self.store.confirm_offset, "waiters": len(self.waiters),
                              "replicaTimeouts": self.waiters.timeouts, **self.stats}  # fmt: skip
        if self.master is not None:
            m = self.master
            st.update(epoch=m.epoch, syncStateSet=sorted(m.effective_set()), syncStateSetEpoch=m.sss_epoch,
                      slaves={str(c.slave_id): {"ack": c.ack, "state": c.state.name} for c in m.conns.values()})
        if self.slave is not None:
            st.update(masterHaAddr=self.master_ha_addr, connected=self.slave_conn is not None,
                      state=self.slave.state.name, lastCloseReason=self.slave.last_close_reason)
        return st
