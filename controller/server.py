"""ControllerServer: the controller role on top of a Raft node — request handlers, liveness, elections, pushes.

Wire it into a `Dispatcher` with `handlers()`; the daemon (`controller.daemon`) owns sockets and the Raft node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Handler
from controller.config import ControllerConfig
from controller.context import HandlerContext
from controller.elector import Elector
from controller.executor import ConcurrentExecutor, ExecSettings, Executor, LegacyExecutor, NotLeaderReply
from controller.handlers import admin, election, heartbeat, query, register
from controller.handlers.wire import encode_body
from controller.liveness import BrokerKey, LivenessTracker
from controller.raft_port import RaftLike
from controller.statemachine.decide_admin import parse_broker_ids
from controller.statemachine.image import ControllerImage
from controller.statemachine.machine import ControllerStateMachine
from controller.statemachine.reply import header, sync_state_set_body

log = structlog.get_logger(component="controller")

LEGACY_HEARTBEAT_TIMEOUT_MS = 10000  # RocketMQ DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
STALL_WARN_S = 0.1
PUSH_FAIL_LOG_EVERY_S = 60.0

HANDLER_FAMILIES: tuple[Callable[[HandlerContext], dict[int, Handler]], ...] = (
    register.handlers, election.handlers, query.handlers, admin.handlers, heartbeat.handlers,
)


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class ControllerServer:
    def __init__(self, cfg: ControllerConfig, raft: RaftLike, sm: ControllerStateMachine, *,
                 client: RemotingClient | None = None, clock: Callable[[], float] = monotonic_ms) -> None:
        self.cfg = cfg
        self.raft = raft
        self.sm = sm
        self.client = client if client is not None else RemotingClient(connect_timeout=1.0)
        self._own_client = client is None
        legacy = cfg.legacy_mode
        self.live = LivenessTracker(clock, self.heartbeat_timeout_ms, cfg.liveness_tick_ms, incremental=not legacy)
        self.not_leader = NotLeaderReply(raft, cfg.peers)
        self._settings = self._make_settings(cfg)
        exec_cls = LegacyExecutor if legacy else ConcurrentExecutor
        self.executor: Executor = exec_cls(raft, lambda: self._settings, self.not_leader)
        self.elector = Elector(self)
        raft.on_leadership_change(self._on_leadership)
        self._tasks: list[asyncio.Task[None]] = []
        self._pushes: set[asyncio.Task[None]] = set()
        self.pushes_sent = 0
        self.pushes_failed = 0
        self._push_fail_logged: dict[str, float] = {}

    # -- configuration -----------------------------------------------------------------------------------

    @staticmethod
    def _make_settings(cfg: ControllerConfig) -> ExecSettings:
        return ExecSettings(read_mode=cfg.read_mode, follower_read=cfg.follower_read,
                            timeout_s=cfg.request_timeout_ms / 1000.0, max_inflight=cfg.request_queue_capacity,
                            legacy_read_through_log=cfg.process_read_event)

    @property
    def heartbeat_timeout_ms(self) -> int:
        return LEGACY_HEARTBEAT_TIMEOUT_MS if self.cfg.legacy_mode else self.cfg.broker_heartbeat_timeout_ms

    @property
    def honor_heartbeat_timeout(self) -> bool:
        return self.cfg.legacy_mode or self.cfg.honor_broker_heartbeat_timeout

    def update_config(self, props: dict[str, str]) -> None:
        """UPDATE_CONTROLLER_CONFIG: this member only; raises ConfigError naming a bad or frozen key."""
        new = self.cfg.with_updates(props, runtime=True)
        self.cfg = new
        self._settings = self._make_settings(new)
        self.live.timeout_ms = self.heartbeat_timeout_ms
        log.info("controller_config_updated", keys=sorted(props))

    # -- accessors used by handlers ---------------------------------------------------------------------------

    @property
    def image(self) -> ControllerImage:
        return self.sm.image

    def handlers(self) -> dict[int, Handler]:
        """Every request family's handlers, built on this server as their `HandlerContext`."""
        table: dict[int, Handler] = {}
        for build in HANDLER_FAMILIES:
            table.update(build(self))
        return table

    def metadata_header(self) -> dict[str, str]:
        lid = self.raft.leader_id
        peers = self.cfg.peers
        return header(group=self.cfg.group, controllerLeaderId=lid,
                      controllerLeaderAddress=peers.get(lid) if lid else None, isLeader=self.raft.is_leader,
                      peers="".join(f"{pid}:{addr};" for pid, addr in peers.items()))

    # -- liveness ------------------------------------------------------------------------------------------

    def on_broker_revived(self, broker_name: str, broker_id: int) -> None:
        self.elector.on_revived(broker_name, broker_id)

    def on_heartbeat_channel_closed(self, keys: set[BrokerKey]) -> None:
        """The connection heartbeats came over closed: its brokers are suspects at once, and dead unless a
        heartbeat (on any connection) arrives within ``channelCloseConfirmMs`` (0: dead at once, as RocketMQ).
        A killed broker never answers; a live one whose connection was merely reset heartbeats again within its
        heartbeat interval, so a blip does not move its masters."""
        if not self.cfg.channel_close_means_dead:
            return
        grace_ms = self.cfg.channel_close_confirm_ms
        if grace_ms <= 0:
            self._confirm_dead(keys, None)
            return
        closed_at = self.live.clock()
        asyncio.get_running_loop().call_later(grace_ms / 1000.0, self._confirm_dead, keys, closed_at)

    def _confirm_dead(self, keys: set[BrokerKey], closed_at: float | None) -> None:
        for name, bid in keys:
            info = self.live.get(name, bid)
            if info is None or (closed_at is not None and info.last_seen_ms > closed_at):
                continue  # heard from since the close: alive
            if self.live.mark_dead(name, bid) is not None:
                self.elector.on_dead(name, bid)

    def forget_brokers(self, broker_name: str, ids: str | None) -> None:
        try:
            parsed = parse_broker_ids(ids)
        except ValueError:
            return
        self.live.forget(broker_name, parsed)

    async def _liveness_loop(self) -> None:
        """New design: advance the timer wheel every tick; only due slots are visited."""
        tick = self.cfg.liveness_tick_ms / 1000.0
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + tick
            await asyncio.sleep(tick)
            lag = loop.time() - due
            if lag > STALL_WARN_S:  # the loop could not run for a while: liveness verdicts may be late
                log.warning("event_loop_stalled", lag_ms=round(lag * 1000))
            for info in self.live.expire():
                self.elector.on_dead(info.broker_name, info.broker_id)

    async def _legacy_scan_loop(self) -> None:
        """Old design: scan every broker every scanNotActiveBrokerInterval, every set every scanInactiveMasterInterval."""
        last_master_scan = time.monotonic()
        while True:
            await asyncio.sleep(self.cfg.scan_not_active_broker_interval_ms / 1000.0)
            for info in self.live.scan_all():
                self.elector.on_dead(info.broker_name, info.broker_id)
            if time.monotonic() - last_master_scan >= self.cfg.scan_inactive_master_interval_ms / 1000.0:
                last_master_scan = time.monotonic()
                self.elector.scan_all()

    def _on_leadership(self, leader: bool) -> None:
        log.info("controller_leadership_changed", leader=leader, term=self.raft.term)
        self.elector.on_leadership(leader)

    # -- role change push -------------------------------------------------------------------------------------

    def notify_role_change(self, broker_name: str) -> None:
        """Push NOTIFY_BROKER_ROLE_CHANGED (1008, one-way) to every live broker of the set (spec 6.5)."""
        if not self.cfg.notify_broker_role_changed:
            return
        bset = self.image.get(broker_name)
        if bset is None or bset.master_broker_id is None:
            return
        ext = header(masterAddress=bset.master_address, masterEpoch=bset.master_epoch,
                     syncStateSetEpoch=bset.sync_state_set_epoch, masterBrokerId=bset.master_broker_id)
        body = encode_body(sync_state_set_body(bset))
        for bid in self.live.alive_ids(broker_name):
            info = self.live.get(broker_name, bid)
            addr = bset.address_of(bid) or (info.address if info else "")
            if not addr:
                continue
            cmd = request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, dict(ext), body, oneway=True)
            task = asyncio.get_running_loop().create_task(self._push(addr, cmd, broker_name, bid))
            self._pushes.add(task)
            task.add_done_callback(self._pushes.discard)

    async def _push(self, addr: str, cmd: RemotingCommand, broker_name: str, broker_id: int) -> None:
        try:
            await self.client.invoke_oneway(addr, cmd)
            self.pushes_sent += 1
        except Exception as e:  # noqa: BLE001 - the broker also polls GET_REPLICA_INFO
            self.pushes_failed += 1
            now = time.monotonic()
            if now - self._push_fail_logged.get(addr, -PUSH_FAIL_LOG_EVERY_S) >= PUSH_FAIL_LOG_EVERY_S:
                self._push_fail_logged[addr] = now  # at most one line per address per interval
                log.info("role_change_push_failed", broker_name=broker_name, broker_id=broker_id, addr=addr,
                         error=str(e), failed_total=self.pushes_failed)

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.executor.start()
        loop = asyncio.get_running_loop()
        scan = self._legacy_scan_loop() if self.cfg.legacy_mode else self._liveness_loop()
        self._tasks.append(loop.create_task(scan, name="controller-liveness"))
        if self.raft.is_leader:
            self._on_leadership(True)
        log.info("controller_role_started", legacy=self.cfg.legacy_mode, read_mode=self.cfg.read_mode,
                 heartbeat_timeout_ms=self.heartbeat_timeout_ms)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.elector.stop()
        await self.executor.stop()
        for t in list(self._pushes):
            t.cancel()
        await asyncio.gather(*self._pushes, return_exceptions=True)
        if self._own_client:
            await self.client.close()
