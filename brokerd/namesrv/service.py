"""The name server: request table and the periodic expiry scan around the pure RouteInfoManager.

`NamesrvService` builds the request processors and hands each itself as a `NamesrvContext` (context.py);
`NamesrvConfig` lives in config.py and is re-exported here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from brokerd.acl.glue import namesrv_guard
from brokerd.config_file import build_config, config_to_properties, persist_properties
from brokerd.namesrv.config import NamesrvConfig
from brokerd.namesrv.kvconfig import KVConfigTable
from brokerd.namesrv.processors_admin import admin_handlers
from brokerd.namesrv.processors_broker import broker_handlers
from brokerd.namesrv.processors_kv import kv_handlers
from brokerd.namesrv.processors_route import route_handlers
from brokerd.namesrv.routeinfo import RemovedBroker, RouteInfoManager
from brokerd.remoting.connection import Connection, Dispatcher, Handler
from brokerd.remoting.server import RemotingServer

__all__ = ["NamesrvConfig", "NamesrvService", "start_server", "wall_clock_ms"]

log = structlog.get_logger(component="namesrv")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class NamesrvService:
    def __init__(self, cfg: NamesrvConfig, now_ms: Callable[[], int] = wall_clock_ms,
                 config_path: str | None = None) -> None:
        """``config_path``: the file the config came from (UPDATE_NAMESRV_CONFIG writes changed keys back)."""
        self.cfg = cfg
        self.config_path = config_path
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
        return {**broker_handlers(self), **route_handlers(self), **kv_handlers(self), **admin_handlers(self)}

    def update_config(self, props: dict[str, str]) -> None:
        """Validate the whole config with ``props`` applied (unknown keys refused), then switch to it (every key
        takes effect at its next use: expiry, scan interval, topic-list switches, ...); written back to
        ``config_path``. ``listenPort``/``bindAddress`` and the ACL keys are refused by the processor."""
        new = build_config(NamesrvConfig, {**config_to_properties(self.cfg), **props}, strict=True)
        self.cfg = new
        self.routes.default_timeout_ms = new.broker_channel_expired_ms
        self.routes.support_acting_master = new.support_acting_master
        self.routes.delete_topic_with_broker_registration = new.delete_topic_with_broker_registration
        if self.config_path:
            persist_properties(self.config_path, props)

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
        while True:  # the interval is read each time: UPDATE_NAMESRV_CONFIG may change it
            await asyncio.sleep(self.cfg.scan_not_active_broker_interval_ms / 1000)
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
                       port: int | None = None, config_path: str | None = None) -> tuple[NamesrvService, RemotingServer]:
    """Start a name server on `cfg.bind_address`:`port` (default `cfg.listen_port`; 0 picks a free port).
    Stop it with `await svc.stop(); await server.stop()`."""
    svc = NamesrvService(cfg, now_ms, config_path)
    dispatcher = Dispatcher("namesrv")
    dispatcher.register_all(svc.handlers())
    dispatcher.guard = namesrv_guard(cfg.acl_file_path) if cfg.acl_enable else None
    server = RemotingServer(dispatcher, cfg.bind_address, cfg.listen_port if port is None else port, name="namesrv")
    await server.start()
    await svc.start()
    return svc, server
