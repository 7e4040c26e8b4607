"""A broker's replication role: the HA service, its put acknowledgements, and who decides the role.

Two modes, as in RocketMQ:
* classic (``brokerRole`` ASYNC_MASTER / SYNC_MASTER / SLAVE): the role is the configuration's (or an admin's
  ``change_role``). A master starts a new epoch at every start (so slaves truncate by epoch exactly as under a
  controller) and keeps its SyncStateSet itself; a slave follows ``haMasterAddress`` or the master the name
  server names in its registration answer. SYNC_MASTER waits for at least one slave (RocketMQ 4.x semantics).
* controller mode (``enableControllerMode=true``): ``ControllerLink`` registers with the controller, heartbeats,
  and calls ``become_master`` / ``become_slave`` (``RoleTarget``) when the controller's epoch moves. The master
  registers with the name servers as id 0 with ``stateVersion = masterEpoch``; reads are capped at the confirm
  offset.

A slave keeps its metadata in step with its master by a periodic full pull (``SlaveMetadataSync``, the 4.x
baseline) and forwards consumer offsets committed on it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from brokerd.broker_config import BrokerConfig
from brokerd.context import BrokerContext
from brokerd.ha.acks import PutAcks
from brokerd.ha.config import HAConfig
from brokerd.ha.controller_link import ControllerLink, LinkConfig
from brokerd.ha.metasync import SlaveMetadataSync
from brokerd.ha.service import HAService, Role
from brokerd.namesrv.client import RegisterBrokerResult
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection
from brokerd.sync.service import MetadataSync, SyncConfig
from brokerd.tiered.backend import make_backend
from brokerd.tiered.config import TierConfig
from brokerd.tiered.service import TieredService

MASTER_ROLE_IN_CONTROLLER_MODE = "SYNC_MASTER"  # as RocketMQ's ReplicasManager sets it
DISCOVERY_PERIOD_S = 2.0  # a classic slave asks the name server for its master this often until it knows it


def ha_config_of(cfg: BrokerConfig) -> HAConfig:
    need = cfg.in_sync_replicas
    if not cfg.enable_controller_mode and cfg.broker_role == "SYNC_MASTER":
        need = max(2, need)  # classic SYNC_MASTER: acknowledged once a slave holds it (4.x behaviour)
    return HAConfig(
        ha_transfer_batch_size=cfg.ha_transfer_batch_size, ha_send_heartbeat_interval_ms=cfg.ha_send_heartbeat_interval,
        ha_housekeeping_interval_ms=cfg.ha_housekeeping_interval, ha_max_gap_not_in_sync=cfg.ha_max_gap_not_in_sync,
        ha_max_time_slave_not_catchup_ms=cfg.ha_max_time_slave_not_catchup,
        all_ack_in_sync_state_set=cfg.all_ack_in_sync_state_set and cfg.enable_controller_mode,
        in_sync_replicas=need, min_in_sync_replicas=cfg.min_in_sync_replicas,
        enable_auto_in_sync_replicas=cfg.enable_auto_in_sync_replicas,
        check_sync_state_set_period_ms=cfg.check_sync_state_set_period, sync_from_last_file=cfg.sync_from_last_file,
        async_learner=cfg.async_learner, mapped_file_size_commit_log=cfg.mapped_file_size_commit_log,
        sync_flush_timeout_ms=cfg.sync_flush_timeout,
        transfer_window_bytes=max(4 * 1024 * 1024, 4 * cfg.ha_transfer_batch_size),
        max_frame_body=max(16 * 1024 * 1024, cfg.ha_transfer_batch_size),
    )  # fmt: skip


class ReplicatedBroker(BrokerContext, Protocol):
    """What replication uses of its broker (``brokerd.broker.Broker``): what processors see, plus its role."""

    master_addr: str | None

    async def apply_role(self, role: str, broker_id: int) -> None:
        """Switch the broker's role and id (no restart) and register with the name servers."""

    async def register_all(self, topics: set[str] | None = None) -> RegisterBrokerResult | None: ...


class BrokerReplication:
    def __init__(self, broker: ReplicatedBroker) -> None:
        cfg = broker.cfg
        self.broker = broker
        self.controller_mode = cfg.enable_controller_mode
        self.ha = HAService(ha_config_of(cfg), broker.store, port=cfg.ha_port,
                            sync_master=self.controller_mode or cfg.broker_role == "SYNC_MASTER",
                            hold_reads_at_confirm=self.controller_mode, log=broker.log)  # fmt: skip
        self.acks = PutAcks(broker.store, self.ha)
        self.metasync = SlaveMetadataSync(broker, interval_ms=cfg.slave_sync_metadata_interval,
                                          on_change=self._on_tables_synced)
        self.msync: MetadataSync | None = None  # incremental metadata sync (RIP-81)
        if cfg.allow_metadata_incremental_sync:
            self.metasync.full_sync = False  # it still forwards offsets committed on this slave
            self.msync = MetadataSync(SyncConfig(cfg.metadata_offset_flush_interval, cfg.metadata_offset_flush_commits,
                                                 cfg.metadata_snapshot_interval),
                                      broker.store, broker.meta, (cfg.broker_ip1, cfg.listen_port), broker.outer,
                                      broker.master_broker_addr, broker.log)  # fmt: skip
        self.tiered = tiered_service_of(broker) if cfg.tiered_store_enable else None
        self.master_epoch = 0
        self.link: ControllerLink | None = None
        if self.controller_mode:
            link_cfg = LinkConfig(tuple(cfg.controller_addrs), cfg.broker_cluster_name, cfg.broker_name,
                                  cfg.broker_addr, cfg.store_path_root_dir, cfg.broker_heartbeat_interval,
                                  cfg.controller_heart_beat_timeout_mills, cfg.sync_broker_metadata_period,
                                  cfg.broker_election_priority)  # fmt: skip
            self.link = ControllerLink(link_cfg, broker.outer, self, broker.log)
            self.ha.alter = self.link.alter_sync_state_set
            self.ha.on_alter_failed = self.link.request_poll
        self._discovery: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    def _on_tables_synced(self, tables: frozenset[str]) -> None:
        if "topics" in tables:  # the name servers learn the slave's new topics (a route with no master left)
            task = asyncio.get_running_loop().create_task(self.broker.register_all())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.ha.start()
        if self.link is not None:
            await self.link.start()
        else:
            await self._apply_classic_role()

    async def stop(self) -> None:
        if self._discovery is not None:
            self._discovery.cancel()
            await asyncio.gather(self._discovery, return_exceptions=True)
        if self.link is not None:
            await self.link.stop()
        await self.metasync.stop()
        if self.msync is not None:
            await self.msync.stop()
        if self.tiered is not None:
            await self.tiered.stop()
        await self.ha.stop()

    @property
    def role_known(self) -> bool:
        """Controller mode: the controller has assigned a role (until then the broker does not register)."""
        return self.link is None or self.ha.role is not Role.NONE

    # ------------------------------------------------------------------ classic mode

    async def _apply_classic_role(self) -> None:
        cfg = self.broker.cfg
        if cfg.broker_role == "SLAVE":
            await self._follow(cfg.broker_id, self.broker.master_addr, cfg.ha_master_address)
            if self._discovery is None or self._discovery.done():
                self._discovery = asyncio.create_task(self._discover_master())
            return
        epoch = self.broker.store.epochs.last_epoch() + 1
        self._truncate_partial_tail()
        self.ha.become_master(0, epoch, frozenset({0}), 0)
        self.master_epoch = epoch
        await self._stop_metasync()
        if self.msync is not None:
            self.msync.on_master()
        if self.tiered is not None:
            self.tiered.on_master(epoch, 0)

    async def change_classic_role(self, role: str, broker_id: int) -> None:
        """An admin's role change (classic mode): the HA side follows the new configuration."""
        if self.controller_mode:
            raise ValueError("brokerRole: the controller assigns roles in controller mode")
        await self.broker.apply_role(role, broker_id)
        self.ha.sync_master = role == "SYNC_MASTER"
        await self._apply_classic_role()

    async def _discover_master(self) -> None:
        """A classic slave without haMasterAddress learns its master from the name servers' answers."""
        while self.broker.cfg.broker_role == "SLAVE":
            if self.ha.master_ha_addr is None or self.broker.master_addr is None:
                with contextlib.suppress(Exception):
                    await self.broker.register_all()
            await asyncio.sleep(DISCOVERY_PERIOD_S)  # sleep-ok: discovery period

    def on_registered(self, result: RegisterBrokerResult) -> None:
        """A name server answered a registration: a classic slave takes its master from it."""
        if self.controller_mode or self.broker.cfg.broker_role != "SLAVE":
            return
        if result.master_addr and result.master_addr != self.broker.master_addr:
            self.broker.master_addr = result.master_addr
            self.metasync.start()
        if result.ha_server_addr and not self.broker.cfg.ha_master_address:
            self.ha.set_master_address(result.ha_server_addr)

    async def _follow(self, broker_id: int, master_addr: str | None, ha_addr: str | None) -> None:
        if self.tiered is not None:
            self.tiered.on_slave()  # a deposed master stops uploading before anything else
            await self._bootstrap_from_tier()
        self.ha.become_slave(broker_id, ha_addr)
        self.broker.master_addr = master_addr
        if self.msync is not None:
            self.msync.on_slave()
        if master_addr is not None:
            self.metasync.start()

    async def _bootstrap_from_tier(self) -> None:
        """An empty slave takes what the tier holds first, then replicates only the rest from its master."""
        assert self.tiered is not None
        try:
            await self.tiered.bootstrap_from_tier_if_empty()
        except (OSError, ValueError) as exc:  # the master still has it all: replication fills in the rest
            self.broker.log.warning("tier_bootstrap_failed", error=str(exc))

    async def _stop_metasync(self) -> None:
        """This broker is master now: its own tables are the truth (offsets it held for a master are dropped)."""
        await self.metasync.stop()
        await self.metasync.forget_pending()

    def _truncate_partial_tail(self) -> None:
        """A former slave's log may end inside a record: a master writes only after whole records."""
        store = self.broker.store
        if store.valid_end < store.max_phy_offset:
            store.truncate_dirty_files(store.valid_end)

    # ------------------------------------------------------------------ controller mode (RoleTarget)

    async def become_master(self, controller_id: int, epoch: int, sss: frozenset[int], sss_epoch: int) -> None:
        self._truncate_partial_tail()
        self.ha.become_master(controller_id, epoch, sss, sss_epoch)
        self.master_epoch = epoch
        await self._stop_metasync()
        if self.msync is not None:
            self.msync.on_master()
        self.broker.master_addr = None
        if self.tiered is not None:
            self.tiered.on_master(epoch, controller_id)
        await self.broker.apply_role(MASTER_ROLE_IN_CONTROLLER_MODE, 0)

    async def become_slave(self, controller_id: int, master_id: int, master_addr: str, epoch: int) -> None:
        self.ha.observe_epoch(epoch)
        self.master_epoch = epoch
        await self._follow(controller_id, master_addr, None)
        await self.broker.apply_role("SLAVE", controller_id)
        ha_addr = await self._master_ha_addr(master_addr)
        if ha_addr is not None and self.broker.master_addr == master_addr:
            self.ha.set_master_address(ha_addr)

    def on_sync_state_set(self, sss: frozenset[int], sss_epoch: int, requested_at_ms: int | None) -> None:
        self.ha.on_sync_state_set(sss, sss_epoch, requested_at_ms)

    def replication_position(self) -> tuple[int, int, int]:
        store = self.broker.store
        return store.epochs.last_epoch(), store.max_phy_offset, store.confirm_offset

    async def _master_ha_addr(self, master_addr: str) -> str | None:
        """The master's HA address: asked of the master itself (EXCHANGE_BROKER_HA_INFO), retried until the
        master answers or another master is named."""
        delay = 0.05
        while self.broker.master_addr == master_addr:
            try:
                resp = await self.broker.outer.invoke(master_addr, request(RequestCode.EXCHANGE_BROKER_HA_INFO, {}), 2.0)
                addr = resp.ext.get("masterHaAddress") if resp.code == ResponseCode.SUCCESS else None
                if addr:
                    return addr
            except Exception:  # noqa: BLE001 - the master may still be starting
                pass
            await asyncio.sleep(delay)  # sleep-ok: retry back-off
            delay = min(delay * 2, 1.0)
        return None

    # ------------------------------------------------------------------ requests

    def handlers(self) -> dict[int, Any]:
        table: dict[int, Any] = {RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self._notify_role_changed,
                                 RequestCode.EXCHANGE_BROKER_HA_INFO: self._exchange_ha_info}
        if self.msync is not None:
            table.update(self.msync.handlers())
        return table

    def _notify_role_changed(self, conn: Connection, cmd: RemotingCommand) -> Any:
        if self.link is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "not in controller mode")
        return self._after(self.link.on_notify(cmd), cmd)

    async def _after(self, aw: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        await aw
        return None if cmd.is_oneway else cmd.response(ResponseCode.SUCCESS)

    def _exchange_ha_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cfg = self.broker.cfg
        own = f"{cfg.broker_ip1}:{self.ha.port}"
        master_ha = own if self.broker.is_master() else (self.ha.master_ha_addr or "")
        master = cfg.broker_addr if self.broker.is_master() else (self.broker.master_addr or "")
        return cmd.response(ResponseCode.SUCCESS, None, {"masterHaAddress": master_ha, "masterAddress": master,
                                                         "masterFlushOffset": str(self.broker.store.flushed_offset)})

    def sync_counters(self) -> dict[str, int]:
        """Incremental metadata sync and tiered storage counters for GET_BROKER_RUNTIME_INFO (when they are on)."""
        out: dict[str, int] = {}
        if self.msync is not None:
            journal = self.msync.journal
            out.update({"metadataRecordsWritten": journal.records_total if journal is not None else 0,
                        "metadataRecordBytesWritten": journal.bytes if journal is not None else 0,
                        "metadataRecordsApplied": self.msync.follower.applied,
                        "metadataSnapshotsInstalled": self.msync.follower.bootstraps})  # fmt: skip
        if self.tiered is not None:
            t, m = self.tiered, self.tiered.manifest
            out.update({"tieredVersion": m.version, "tieredEpoch": m.epoch, "tieredMinOffset": m.min_offset,
                        "tieredEnd": m.end, "tieredUploadedBytes": t.uploaded_bytes,
                        "tieredBootstrappedBytes": t.bootstrapped_bytes, "tieredFenced": int(t.fenced is not None),
                        "tieredReadFetches": t.reader.fetches})  # fmt: skip
        return out

    def status(self) -> dict[str, Any]:
        st = self.ha.status()
        st["controllerMode"] = self.controller_mode
        st["masterEpoch"] = self.master_epoch
        if self.link is not None:
            st.update(controllerId=self.link.controller_id, controllerRole=self.link.role, **self.link.stats,
                      controllerLeader=self.link.client.leader or "")
        st["metadataSync"] = {"syncs": self.metasync.syncs, "failures": self.metasync.failures,
                              "pendingOffsets": self.metasync.pending_count, "fullSync": self.metasync.full_sync}
        if self.msync is not None:
            st["incrementalSync"] = self.msync.status()
        if self.tiered is not None:
            st["tiered"] = self.tiered.status()
        return st


def tiered_service_of(broker: ReplicatedBroker) -> TieredService:
    cfg = broker.cfg
    backend = make_backend(cfg.tiered_backend_service_provider, path=cfg.tiered_store_file_path,
                           cluster=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                           endpoint=cfg.object_store_endpoint, bucket=cfg.object_store_bucket,
                           access_key=cfg.object_store_access_key, secret_key=cfg.object_store_secret_key,
                           region=cfg.object_store_region)  # fmt: skip
    tcfg = TierConfig(segment_size=cfg.mapped_file_size_commit_log, chunk_bytes=cfg.tiered_chunk_size,
                      upload_interval_ms=cfg.tiered_upload_interval,
                      reserved_hours=cfg.tiered_store_file_reserved_time, cache_bytes=cfg.tiered_read_cache_size,
                      read_ahead=cfg.tiered_read_ahead_chunks, bootstrap_from_tier=cfg.tiered_bootstrap_from_tier,
                      local_reserved_hours=cfg.file_reserved_time)  # fmt: skip
    return TieredService(tcfg, broker.store, backend, (cfg.broker_ip1, cfg.listen_port), broker.log)
