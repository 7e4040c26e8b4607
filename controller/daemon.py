"""One controller member: Raft node + controller role on the peer address + (optionally) the name-server role.

Ports: the member answers controller requests on its own `controllerDLegerPeers` address (as in RocketMQ);
Raft traffic uses the same host at port + `raftPortOffset` (default 1000); the name-server role listens on
`namesrvListenPort` when that key is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import structlog

from brokerd.acl.glue import controller_guard, namesrv_guard
from brokerd.remoting.connection import Dispatcher
from brokerd.remoting.server import RemotingServer
from controller.config import ControllerConfig
from controller.gcpolicy import GcPolicy
from controller.metrics import ControllerMetricsServer, RequestStats
from controller.raft_port import RaftLike
from controller.server import ControllerServer
from controller.statemachine.machine import ControllerStateMachine

log = structlog.get_logger(component="controller_daemon")

RaftFactory = Callable[[ControllerConfig, ControllerStateMachine], RaftLike]


def real_raft(cfg: ControllerConfig, sm: ControllerStateMachine) -> RaftLike:
    """The Raft package's asyncio driver (docs/RAFT-CONTRACT.md)."""
    from controller.raft.api import RaftConfig
    from controller.raft.driver import RaftNode

    rcfg = RaftConfig(
        group=cfg.group, self_id=cfg.self_id, peers=cfg.raft_peers, data_dir=os.path.join(cfg.data_dir, "raft"),
        election_timeout_ms=cfg.raft_election_timeout_ms, heartbeat_interval_ms=cfg.raft_heartbeat_interval_ms,
        tick_ms=cfg.raft_tick_ms, max_batch_entries=cfg.raft_max_batch_entries,
        snapshot_threshold_entries=cfg.raft_snapshot_threshold_entries,
        snapshot_trailing_entries=cfg.raft_snapshot_trailing_entries, lease_ratio=cfg.raft_lease_ratio,
        max_follower_lag_entries=cfg.raft_max_follower_lag_entries, fsync=cfg.raft_fsync,
    )
    node: RaftLike = RaftNode(rcfg, sm, client_addrs=cfg.peers)
    return node


class ControllerDaemon:
    def __init__(self, cfg: ControllerConfig, raft_factory: RaftFactory = real_raft) -> None:
        self.cfg = cfg
        self.raft_factory = raft_factory
        self.sm = ControllerStateMachine()
        self.raft: RaftLike | None = None
        self.server: ControllerServer | None = None
        self.remoting: RemotingServer | None = None
        self.namesrv: Any = None
        self.namesrv_remoting: RemotingServer | None = None
        self.gc = GcPolicy(cfg.gc_freeze_interval_ms / 1000.0, cfg.gc_full_collect_interval_ms / 1000.0)
        self.request_stats = RequestStats()
        self.metrics: ControllerMetricsServer | None = None

    async def start(self) -> None:
        cfg = self.cfg
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.raft = self.raft_factory(cfg, self.sm)
        self.server = ControllerServer(cfg, self.raft, self.sm)
        dispatcher = Dispatcher("controller")
        dispatcher.register_all(self.request_stats.wrap_all(self.server.handlers()))
        self.raft.on_leadership_change(self.request_stats.on_leadership)
        dispatcher.guard = controller_guard(cfg.acl_file_path) if cfg.acl_enable else None
        self.remoting = RemotingServer(dispatcher, cfg.listen_host, cfg.listen_port, name="controller")
        await self.server.start()
        await self.raft.start()
        await self.remoting.start()
        if cfg.namesrv_listen_port is not None:
            await self._start_namesrv(cfg.namesrv_listen_port)
        if cfg.metrics_port >= 0:
            self.metrics = ControllerMetricsServer(cfg.self_id, self.raft, self.server, self.request_stats,
                                                   cfg.metrics_listen_host, cfg.metrics_port)
            await self.metrics.start()
        self.gc.start()
        log.info("controller_started", self_id=cfg.self_id, group=cfg.group, port=self.remoting.port,
                 metrics_port=self.metrics.port if self.metrics else None,
                 raft_addr=cfg.raft_peers[cfg.self_id], namesrv_port=self.namesrv_port, legacy=cfg.legacy_mode,
                 data_dir=cfg.data_dir)

    async def _start_namesrv(self, port: int) -> None:
        # ---- NAME SERVER ROLE: provided by the lead's brokerd.namesrv (NamesrvService); tested by the lead ----
        from brokerd.namesrv.service import NamesrvConfig, NamesrvService

        svc = NamesrvService(NamesrvConfig(listen_port=port, bind_address=self.cfg.listen_host))
        dispatcher = Dispatcher("namesrv")
        dispatcher.register_all(svc.handlers())
        dispatcher.guard = namesrv_guard(self.cfg.acl_file_path) if self.cfg.acl_enable else None
        self.namesrv_remoting = RemotingServer(dispatcher, self.cfg.listen_host, port, name="namesrv")
        await self.namesrv_remoting.start()
        await svc.start()
        self.namesrv = svc

    @property
    def namesrv_port(self) -> int | None:
        return self.namesrv_remoting.port if self.namesrv_remoting is not None else None

    async def stop(self) -> None:
        await self.gc.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        if self.namesrv is not None:
            await self.namesrv.stop()
        if self.namesrv_remoting is not None:
            await self.namesrv_remoting.stop(grace=1.0)
        if self.remoting is not None:
            await self.remoting.stop(grace=2.0)
        if self.server is not None:
            await self.server.stop()
        if self.raft is not None:
            await self.raft.stop()
        log.info("controller_stopped", self_id=self.cfg.self_id)
