"""The name server: configuration, request table and the periodic expiry scan around the pure RouteInfoManager."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from brokerd.config_file import ConfigError
from brokerd.namesrv.kvconfig import KVConfigTable
from brokerd.namesrv.routeinfo import DEFAULT_BROKER_CHANNEL_EXPIRED_MS, RemovedBroker, RouteInfoManager
from brokerd.remoting.connection import Connection, Dispatcher, Handler
from brokerd.remoting.server import RemotingServer

log = structlog.get_logger(component="namesrv")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class NamesrvConfig:
    """Name-server settings; keys in a config file are RocketMQ's camelCase names (`listenPort`, ...)."""

    listen_port: int = 9876
    bind_address: str = "0.0.0.0"
    scan_not_active_broker_interval_ms: int = field(default=5000, metadata={"key": "scanNotActiveBrokerInterval"})
    broker_channel_expired_ms: int = DEFAULT_BROKER_CHANNEL_EXPIRED_MS
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    order_message_enable: bool = False
    return_order_topic_config_to_broker: bool = True
    support_acting_master: bool = False
    delete_topic_with_broker_registration: bool = False
    need_wait_for_service: bool = False
    wait_seconds_for_service: int = 45
    kv_config_path: str = ""  # empty: KV config kept in memory only

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort: must be 0..65535, got {self.listen_port}")
        if not self.bind_address:
            raise ConfigError("bindAddress: must not be empty")
        if self.scan_not_active_broker_interval_ms <= 0:
            raise ConfigError(f"scanNotActiveBrokerInterval: must be > 0, got {self.scan_not_active_broker_interval_ms}")
        if self.broker_channel_expired_ms <= 0:
            raise ConfigError(f"brokerChannelExpiredMs: must be > 0, got {self.broker_channel_expired_ms}")
        if self.wait_seconds_for_service < 0:
            raise ConfigError(f"waitSecondsForService: must be >= 0, got {self.wait_seconds_for_service}")


class NamesrvService:
    def __init__(self, cfg: NamesrvConfig, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.cfg = cfg
        self.now_ms = now_ms
        self.routes = RouteInfoManager(
            now_ms,
            default_timeout_ms=cfg.broker_channel_expired_ms,
            support_acting_master=cfg.support_acting_master,
            delete_topic_with_broker_registration=cfg.delete_topic_with_broker_registration,
        )
        self.kv = KVConfigTable(cfg.kv_config_path)
        self.started_ms = now_ms()
        self._scan_task: asyncio.Task[None] | None = None

    def handlers(self) -> dict[int, Handler]:
        from brokerd.namesrv.processors_broker import broker_handlers
        from brokerd.namesrv.processors_kv import kv_handlers
        from brokerd.namesrv.processors_route import route_handlers

        return {**broker_handlers(self), **route_handlers(self), **kv_handlers(self)}

    @property
    def ready(self) -> bool:
        """False during the `waitSecondsForService` start-up window when `needWaitForService` is on."""
        if not self.cfg.need_wait_for_service:
            return True
        return self.now_ms() - self.started_ms >= self.cfg.wait_seconds_for_service * 1000

    # -- connections -------------------------------------------------------------------------------------

    def track_channel(self, conn: Connection) -> None:
        """Remove the brokers registered over `conn` when it closes (hooked once per connection)."""
        if conn.attrs.get("namesrv_close_hook"):
            return
        conn.attrs["namesrv_close_hook"] = True
        conn.add_close_callback(self._on_channel_close)

    def _on_channel_close(self, conn: Connection) -> None:
        removed = self.routes.on_channel_close(conn)
        self._log_removed("broker_channel_closed", removed)

    @staticmethod
    def _log_removed(event: str, removed: list[RemovedBroker]) -> None:
        for r in removed:
            log.info(event, cluster=r.cluster, broker_addr=r.broker_addr, broker_name=r.broker_name,
                     broker_id=r.broker_id)

    # -- expiry --------------------------------------------------------------------------------------------

    def scan_not_active_brokers(self) -> list[RemovedBroker]:
        removed = self.routes.scan_not_active_brokers()
        self._log_removed("broker_expired", removed)
        return removed

    async def _scan_loop(self) -> None:
        interval = self.cfg.scan_not_active_broker_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.scan_not_active_brokers()
            except Exception as e:  # noqa: BLE001 - keep scanning
                log.error("broker_scan_failed", error=repr(e))

    async def start(self) -> None:
        if self._scan_task is None:
            self._scan_task = asyncio.create_task(self._scan_loop(), name="namesrv-scan")
        log.info("namesrv_started", scan_interval_ms=self.cfg.scan_not_active_broker_interval_ms,
                 broker_expired_ms=self.cfg.broker_channel_expired_ms)

    async def stop(self) -> None:
        task, self._scan_task = self._scan_task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        log.info("namesrv_stopped")


async def start_server(cfg: NamesrvConfig, now_ms: Callable[[], int] = wall_clock_ms,
                       port: int | None = None) -> tuple[NamesrvService, RemotingServer]:
    """Start a name server on `cfg.bind_address`:`port` (default `cfg.listen_port`; 0 picks a free port).
    Stop it with `await svc.stop(); await server.stop()`."""
    svc = NamesrvService(cfg, now_ms)
    dispatcher = Dispatcher("namesrv")
    dispatcher.register_all(svc.handlers())
    server = RemotingServer(dispatcher, cfg.bind_address, cfg.listen_port if port is None else port, name="namesrv")
    await server.start()
    await svc.start()
    return svc, server
