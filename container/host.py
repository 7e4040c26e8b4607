"""The broker container: one event loop, one shared outbound client, many broker instances, each with its own
listening sub-servers (listenPort and listenPort - 2) and processor tables; plus the admin port and an optional
embedded name server. It builds the admin table, the metrics server and the disk quota and hands each itself as
the narrow protocol of `container/context.py` they use; none of them imports this module."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from dataclasses import dataclass, field
from typing import Any

import structlog

from brokerd.acl import load_plain_acl
from brokerd.acl.glue import AclGuard, namesrv_guard
from brokerd.broker import Broker
from brokerd.broker_config import BrokerConfig, load_broker_config
from brokerd.config_file import ConfigError
from brokerd.logging_setup import ROUTER
from brokerd.namesrv.config import NamesrvConfig
from brokerd.namesrv.service import NamesrvService
from brokerd.native import IMPLEMENTATION
from brokerd.proxy import GrpcEndpoint, GrpcProxyConfig
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.connection import Dispatcher
from brokerd.remoting.server import RemotingServer
from container.admin import register_admin
from container.config import ContainerConfig
from container.dashboard.context import AdminCredentials
from container.dashboard.server import Dashboard
from container.errors import ContainerError
from container.metrics import MetricsServer, render_grpc
from container.quota import DiskQuota

__all__ = ["BrokerContainer", "BrokerSlot", "ContainerError"]

log = structlog.get_logger("container")
SLOW_STOP_S = 8.0  # a broker still stopping after this long: its tasks' stacks are logged (broker_stop_slow)


def log_slow_stop(identity: str) -> None:
    """What a broker's stop is waiting for: every pending asyncio task and where it is suspended."""
    waiting = []
    for task in asyncio.all_tasks():
        chain: list[str] = []
        coro: Any = task.get_coro()
        while coro is not None and len(chain) < 8:  # the await chain, outermost first
            frame = getattr(coro, "cr_frame", None)
            if frame is not None:
                chain.append(f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
            coro = getattr(coro, "cr_await", None)
        waiting.append(f"{task.get_name()}: {' -> '.join(chain)}")
    log.warning("broker_stop_slow", broker=identity, seconds=SLOW_STOP_S, tasks=sorted(waiting))


@dataclass
class BrokerSlot:
    broker: Broker
    servers: list[RemotingServer] = field(default_factory=list)
    config_path: str | None = None


class BrokerContainer:
    def __init__(self, cfg: ContainerConfig, admin_credentials: AdminCredentials | None = None) -> None:
        """`admin_credentials`: the accounts that may use the dashboard's admin actions (default: the ACL file's
        admin accounts when aclEnable=true; none: read-only)."""
        self.cfg = cfg
        self.outer = RemotingClient()
        self.brokers: dict[str, BrokerSlot] = {}
        self.admin_dispatcher = Dispatcher("container")
        self.admin_server: RemotingServer | None = None
        self.namesrv_server: RemotingServer | None = None
        self.namesrv: NamesrvService | None = None
        self.metrics: MetricsServer | None = None
        self.grpc: GrpcEndpoint | None = None  # RocketMQ 5's gRPC endpoint (enableGrpcProxy)
        # ACL on: the admin port serves admin accounts only (AclConfigError, a ConfigError, names a bad file), and
        # the same accounts may log in to the dashboard's admin actions
        self.acl = AclGuard(cfg.acl_file_path, admin_only=True) if cfg.acl_enable else None
        self.admin_dispatcher.guard = self.acl
        if admin_credentials is None:
            admin_credentials = self.acl
        self.dashboard = (Dashboard(self, admin_credentials, sample_interval_s=cfg.dashboard_sample_interval_ms / 1000)
                          if cfg.dashboard_enable else None)
        self.quota = DiskQuota(self, cfg)
        self._lock = asyncio.Lock()
        self._stopping = False
        ROUTER.enabled = cfg.isolate_log_enable

    @property
    def namesrv_addrs(self) -> list[str]:
        if self.cfg.namesrv_addrs:
            return self.cfg.namesrv_addrs
        if self.namesrv_server is not None:
            return [f"127.0.0.1:{self.namesrv_server.port}"]
        return []

    async def start(self) -> None:
        if self.cfg.embedded_namesrv_enable:
            self.namesrv = NamesrvService(NamesrvConfig(listen_port=self.cfg.embedded_namesrv_port))
            d = Dispatcher("namesrv")
            d.register_all(self.namesrv.handlers())
            d.guard = namesrv_guard(self.cfg.acl_file_path) if self.cfg.acl_enable else None
            self.namesrv_server = RemotingServer(d, port=self.cfg.embedded_namesrv_port, name="namesrv")
            await self.namesrv_server.start()
            await self.namesrv.start()
        register_admin(self, self.admin_dispatcher)
        self.admin_server = RemotingServer(self.admin_dispatcher, self.cfg.admin_listen_host, self.cfg.listen_port,
                                           name="container-admin")
        await self.admin_server.start()
        if self.cfg.metrics_port >= 0:
            dash = self.dashboard
            self.metrics = MetricsServer(self, self.cfg.metrics_port, self.cfg.metrics_listen_host,
                                         extra_text=self._extra_metrics,
                                         setup_app=dash.install if dash else None)
            await self.metrics.start()
        restored = [p for p in self._load_state() if p not in self.cfg.broker_paths]
        for path in self.cfg.broker_paths + restored:
            try:
                await self.add_broker(path, persist=False)
            except ContainerError as e:
                if path in self.cfg.broker_paths:
                    raise
                log.error("restore_added_broker_failed", path=path, error=str(e), state_file=self.cfg.state_file)
        self._forget_missing(restored)
        if self.cfg.enable_grpc_proxy:
            await self._start_grpc()
        log.info("container_started", admin_port=self.admin_server.port, brokers=sorted(self.brokers),
                 hot_path=IMPLEMENTATION, state_file=self.cfg.state_file, restored=len(restored))

    async def _start_grpc(self) -> None:
        cfg = self.cfg
        self.grpc = GrpcEndpoint(GrpcProxyConfig(
            listen_host=cfg.grpc_listen_host, listen_port=cfg.grpc_listen_port, advertise_host=cfg.broker_container_ip,
            workers=cfg.grpc_workers,
            acl_file_path=cfg.acl_file_path if cfg.acl_enable else ""), self, lambda: self.namesrv_addrs)
        try:
            await self.grpc.start()
        except (OSError, RuntimeError) as e:
            raise ContainerError(ResponseCode.SYSTEM_ERROR, f"cannot listen on gRPC port {cfg.grpc_listen_port}: {e}") from e
        if self.dashboard is not None:
            self.dashboard.grpc = self.grpc

    def local_dispatcher(self, addr: str) -> Dispatcher | None:
        """The in-process dispatcher serving ``addr``: a hosted broker's or the embedded name server's (the gRPC
        endpoint hands them its remoting commands without a socket)."""
        for slot in self.brokers.values():
            if slot.broker.cfg.broker_addr == addr:
                return slot.broker.dispatcher
        if self.namesrv_server is not None and addr in self.namesrv_addrs:
            return self.namesrv_server.dispatcher
        return None

    async def _extra_metrics(self) -> str:
        text = await self.dashboard.metrics_text() if self.dashboard is not None else ""
        return text + (render_grpc(self.grpc.stats, self.grpc.client_counts()) if self.grpc else "")

    async def stop(self) -> None:
        self._stopping = True
        if self.grpc is not None:
            await self.grpc.stop()
        for ident in list(self.brokers):
            await self.remove_broker(ident)
        if self.admin_server is not None:
            await self.admin_server.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        if self.namesrv is not None:
            await self.namesrv.stop()
        if self.namesrv_server is not None:
            await self.namesrv_server.stop()
        await self.outer.close()
        log.info("container_stopped")

    # -- brokers -------------------------------------------------------------------------------------------

    def load_broker_config(self, path: str) -> BrokerConfig:
        if not path:
            raise ContainerError(ResponseCode.SYSTEM_ERROR, "addBroker config path is empty")
        if not os.path.isfile(path):
            raise ContainerError(ResponseCode.SYSTEM_ERROR, f"broker config file not found or unreadable: {path}")
        try:
            cfg = load_broker_config(path)
            if cfg.acl_enable:
                load_plain_acl(cfg.acl_file_path)  # a missing or malformed file fails here, naming it
            return cfg
        except ConfigError as e:
            raise ContainerError(ResponseCode.SYSTEM_ERROR, f"invalid broker config {path}: {e}") from e

    async def add_broker(self, path: str, persist: bool = True) -> Broker:
        path = os.path.abspath(path) if path else path
        cfg = self.load_broker_config(path)
        async with self._lock:
            if cfg.identity in self.brokers:
                raise ContainerError(ResponseCode.SYSTEM_ERROR, f"broker {cfg.identity} already exists in this container")
            for slot in self.brokers.values():
                if os.path.abspath(slot.broker.cfg.store_path_root_dir) == os.path.abspath(cfg.store_path_root_dir):
                    raise ContainerError(ResponseCode.SYSTEM_ERROR,
                                         f"storePathRootDir {cfg.store_path_root_dir} is used by {slot.broker.cfg.identity}")
            broker = Broker(cfg, self.outer, config_path=path, namesrv_addrs=self.namesrv_addrs)
            broker.identity_listener = self._rekey
            slot = BrokerSlot(broker, config_path=path)
            if cfg.isolate_log_enable or self.cfg.isolate_log_enable:
                ROUTER.enabled = True
                ident = cfg.identity.replace(":", "_")
                ROUTER.register(cfg.identity, os.path.join(self.cfg.logs_root, f"{ident}_rocketmqlogs", "broker.log"),
                                [cfg.broker_addr, cfg.broker_name])
            try:
                await self._bind(slot)
                await broker.start()
            except BaseException as e:
                for s in slot.servers:
                    await s.stop(grace=0)
                await broker.unlisten_ha()
                if broker.status != "created":
                    await broker.store.shutdown()
                ROUTER.unregister(cfg.identity)
                if isinstance(e, ContainerError):
                    raise
                raise ContainerError(ResponseCode.SYSTEM_ERROR, f"start broker {cfg.identity} failed: {e}") from e
            self.brokers[cfg.identity] = slot
            self.quota.install(broker)
            if persist:
                self._save_state()
        return broker

    async def _bind(self, slot: BrokerSlot) -> None:
        cfg = slot.broker.cfg
        ports = [(cfg.listen_port, slot.broker.dispatcher)]
        if cfg.fast_listen_port_enable:
            ports.append((cfg.listen_port - 2, slot.broker.fast_dispatcher))
        for port, disp in ports:
            server = RemotingServer(disp, port=port, name=cfg.identity)
            try:
                await server.start()
            except OSError as e:
                reason = "port in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
                raise ContainerError(ResponseCode.SYSTEM_ERROR, f"cannot listen on port {port}: {reason}") from e
            slot.servers.append(server)
        try:
            await slot.broker.listen_ha()
        except OSError as e:
            reason = "port in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
            raise ContainerError(ResponseCode.SYSTEM_ERROR, f"cannot listen on HA port {cfg.ha_port}: {reason}") from e

    async def remove_broker(self, identity: str) -> None:
        async with self._lock:
            slot = self.brokers.pop(identity, None)
            if slot is None:
                raise ContainerError(ResponseCode.BROKER_NOT_EXIST, f"broker {identity} does not exist in this container")
            # stop accepting and finish in-flight requests, then flush and close the store, unregister
            watchdog = asyncio.get_running_loop().call_later(SLOW_STOP_S, log_slow_stop, identity)
            try:
                slot.broker.pull.hold.wake_all()
                for s in slot.servers:
                    await s.stop()
                await slot.broker.shutdown()
            finally:
                watchdog.cancel()
            ROUTER.unregister(identity)
            if not self._stopping:
                self._save_state()

    async def change_role(self, identity: str, role: str, broker_id: int) -> str:
        """Change a hosted broker's role/id at runtime; returns its new identity (cluster:name:id)."""
        async with self._lock:
            slot = self.brokers.get(identity)
            if slot is None:
                raise ContainerError(ResponseCode.BROKER_NOT_EXIST, f"broker {identity} does not exist in this container")
            new_identity = f"{slot.broker.cfg.broker_cluster_name}:{slot.broker.cfg.broker_name}:{broker_id}"
            if new_identity != identity and new_identity in self.brokers:
                raise ContainerError(ResponseCode.SYSTEM_ERROR, f"broker {new_identity} already exists")
            try:
                await slot.broker.change_role(role, broker_id)
            except (ConfigError, ValueError) as e:
                raise ContainerError(ResponseCode.SYSTEM_ERROR, str(e)) from e
            return slot.broker.cfg.identity

    def _rekey(self, old: str, new: str) -> None:
        """A hosted broker's identity (cluster:name:id) changed with its role (admin or controller)."""
        slot = self.brokers.pop(old, None)
        if slot is not None:
            self.brokers[new] = slot

    # -- brokers added at runtime come back after a restart ------------------------------------------------

    def _load_state(self) -> list[str]:
        try:
            with open(self.cfg.state_file, encoding="utf-8") as f:
                paths = json.load(f).get("addedBrokerConfigPaths", [])
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            log.error("container_state_unreadable", path=self.cfg.state_file, error=str(e))
            return []
        return [p for p in paths if isinstance(p, str)]

    def _forget_missing(self, restored: list[str]) -> None:
        """Brokers whose config file is gone are forgotten (a failure of another kind is tried at the next start)."""
        gone = [p for p in restored if not os.path.isfile(p)]
        if gone:
            log.warning("added_brokers_forgotten", paths=gone, state_file=self.cfg.state_file)
            self._write_state([p for p in self._load_state() if p not in gone])

    def _save_state(self) -> None:
        self._write_state([s.config_path for s in self.brokers.values()
                           if s.config_path and s.config_path not in self.cfg.broker_paths])

    def _write_state(self, added: list[str]) -> None:
        path = self.cfg.state_file
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"addedBrokerConfigPaths": added}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
