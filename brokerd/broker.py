"""One broker instance: identity, config, store, metadata, client registries, processors, name-server registration.

A broker owns no sockets: the container binds its ports and routes their requests to `dispatcher`
(main port) and `fast_dispatcher` (listenPort - 2, everything but pulls, as in RocketMQ).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import structlog

from brokerd.acl import BROKER_ADMIN_CODES
from brokerd.acl.glue import AclGuard, signing_client
from brokerd.broker_config import BrokerConfig
from brokerd.clients import ConsumerManager, ProducerManager, RebalanceLockManager
from brokerd.config_file import build_config, config_to_properties, persist_properties, snake_to_camel
from brokerd.context import BrokerStats
from brokerd.ha.service import HAService
from brokerd.metadata import BrokerMetadata, MetadataChange
from brokerd.metadata.persist import PersistJob
from brokerd.metadata.topic import PERM_READ, PERM_WRITE
from brokerd.metadata.version import DataVersion
from brokerd.namesrv.client import RegisterBrokerResult, register_broker, unregister_broker
from brokerd.pop.module import PopModule
from brokerd.processors.admin_families import register_admin
from brokerd.processors.client import ClientProcessor, notify_consumer_ids_changed
from brokerd.processors.offsets import OffsetProcessor
from brokerd.processors.pull import PullProcessor
from brokerd.processors.query import QueryProcessor
from brokerd.processors.send import SendProcessor
from brokerd.processors.sendback import SendBackProcessor
from brokerd.processors.transaction import TransactionProcessor
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.connection import Dispatcher, Handler
from brokerd.replication import BrokerReplication
from brokerd.schedule import ScheduleService
from brokerd.stats import BrokerStatsManager, StatsSampler, observe_put_times, runtime_keys
from brokerd.store import syncer
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore
from brokerd.timer.recall import RecallProcessor
from brokerd.timer.service import TimerService

LIVE_KEYS = frozenset({"brokerPermission", "registerNameServerPeriod", "longPollingEnable", "shortPollingTimeMills",
                       "autoCreateTopicEnable", "autoCreateSubscriptionGroup", "namesrvAddr",
                       "notifyConsumerIdsChangedEnable", "traceOn", "regionId", "diskSpaceWarningLevelRatio",
                       "diskSpaceCleanForciblyRatio", "fileReservedTime", "deleteWhen", "enablePropertyFilter"})


def store_config_of(cfg: BrokerConfig) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=cfg.store_path_root_dir, mapped_file_size_commit_log=cfg.mapped_file_size_commit_log,
        mapped_file_size_consume_queue=cfg.mapped_file_size_consume_queue, flush_disk_type=cfg.flush_disk_type,
        flush_interval_commit_log_ms=cfg.flush_interval_commit_log, sync_flush_timeout_ms=cfg.sync_flush_timeout,
        file_reserved_time_hours=cfg.file_reserved_time, delete_when=cfg.delete_when,
        max_message_size=cfg.max_message_size, disk_space_warning_level_ratio=cfg.disk_space_warning_level_ratio,
        disk_space_clean_forcibly_ratio=cfg.disk_space_clean_forcibly_ratio,
        message_index_enable=cfg.message_index_enable, clean_resource_interval_ms=cfg.clean_resource_interval,
        max_hash_slot_num=cfg.max_hash_slot_num, max_index_num=cfg.max_index_num,
        flush_interval_consume_queue_ms=cfg.flush_interval_consume_queue, message_delay_level=cfg.message_delay_level,
        warm_mapped_file_enable=cfg.warm_mapped_file_enable,
    )


class Broker:
    def __init__(self, cfg: BrokerConfig, outer: RemotingClient, *, config_path: str | None = None,
                 namesrv_addrs: list[str] | None = None) -> None:
        if cfg.enable_controller_mode:  # the controller assigns the role: read-only until it does
            cfg = dataclasses.replace(cfg, broker_role="SLAVE")
        self.cfg = cfg
        self.config_path = config_path
        self.acl = AclGuard(cfg.acl_file_path, BROKER_ADMIN_CODES) if cfg.acl_enable else None
        self.outer = signing_client(cfg.acl_access_key, cfg.acl_secret_key) if cfg.acl_access_key else outer
        self._own_outer = self.outer is not outer
        self._namesrv_override = namesrv_addrs
        self.log = structlog.get_logger("broker").bind(broker=cfg.identity)
        self.stats = BrokerStats()
        self.stats_manager = BrokerStatsManager(cfg.broker_cluster_name, interval_ms=cfg.stats_sampling_interval)
        self.config_version = DataVersion()
        self.store = MessageStore(store_config_of(cfg), store_host=(cfg.broker_ip1, cfg.listen_port))
        self.meta = BrokerMetadata(
            os.path.join(cfg.store_path_root_dir, "config"), cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name, auto_create_topic_enable=cfg.auto_create_topic_enable,
            auto_create_subscription_group=cfg.auto_create_subscription_group,
            default_topic_queue_nums=cfg.default_topic_queue_nums)
        self.master_addr: str | None = None  # a slave's current master (remoting address); set by replication
        self.identity_listener: Callable[[str, str], None] | None = None  # (old, new) identity, e.g. the container
        self.replication = BrokerReplication(self)
        self.acks = self.replication.acks
        self.consumers = ConsumerManager(on_change=lambda g: notify_consumer_ids_changed(self, g))
        self.producers = ProducerManager()
        self.locks = RebalanceLockManager()
        self.schedule = ScheduleService(self)
        self.timers = TimerService(self)  # timer messages (RocketMQ 5, RIP-43; docs/timer.md)
        self.dispatcher = Dispatcher(cfg.identity)
        self.fast_dispatcher = Dispatcher(cfg.identity + ":fast")
        self.pull = PullProcessor(self)
        send = SendProcessor(self)
        self.transactions = TransactionProcessor(self)
        self.send_lane = send.lane
        self.send_admission = send.admission
        observe_put_times(send.admission, self.stats_manager)  # putMessageDistributeTime & co (brokerd/stats.py)
        self.dispatcher.lane = self.fast_dispatcher.lane = send.lane
        # a read kept past a loop turn is handled as soon as its sends would be refused (remoting/turns.py)
        self.dispatcher.stale_after = self.fast_dispatcher.stale_after = send.admission.stale_after
        if send.lane is not None:  # sends to a retry topic go to the DLQ while its group holds orderly locks
            self.locks.on_locked = send.lane.forget_retry
        self.dispatcher.guard = self.fast_dispatcher.guard = self.acl
        for proc in (send, self.transactions, self.pull, OffsetProcessor(self), ClientProcessor(self),
                     SendBackProcessor(self), QueryProcessor(self)):
            table: dict[int, Handler] = proc.handlers()  # type: ignore[assignment]
            self.dispatcher.register_all(table)
            self.fast_dispatcher.register_all({c: h for c, h in table.items() if c not in (11, 361)})
        register_admin(self, self.dispatcher, self.fast_dispatcher)  # the admin families (processors/admin_families.py)
        self.dispatcher.register_all(self.replication.handlers())
        recall = RecallProcessor(self, self.timers).handlers()  # RECALL_MESSAGE (370), on both ports
        self.dispatcher.register_all(recall)
        self.fast_dispatcher.register_all(recall)
        self.pop = PopModule(self)  # POP consumption (RocketMQ 5): 200050.. and 400-402, on both ports
        pop_handlers: dict[int, Handler] = self.pop.handlers()  # type: ignore[assignment]
        self.dispatcher.register_all(pop_handlers)
        self.fast_dispatcher.register_all(pop_handlers)
        self.pop.wrap_admin(self.dispatcher, self.fast_dispatcher)  # admin offset resets move POP positions
        # requests that reach the ports (bound by the container) before the store is recovered are answered
        # SYSTEM_BUSY: an answer from a half-loaded store (e.g. PULL_OFFSET_MOVED) would send consumers back
        self.dispatcher.not_ready = self.fast_dispatcher.not_ready = "broker starting: recovering its store"
        self._tasks: list[asyncio.Task[None]] = []
        self._register_soon: asyncio.Task[None] | None = None
        self._pending_topics: set[str] = set()
        self.status = "created"
        self.last_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.status = "starting"
        os.makedirs(self.cfg.store_path_root_dir, exist_ok=True)
        self.meta.load()
        await self.store.start()
        # a flush that finished is reported after the read that saw it, not after the whole busy loop iteration
        self.dispatcher.after_read = self.fast_dispatcher.after_read = syncer.poller()
        await self.replication.start()
        self.meta.hub.add_observer(self)
        self.schedule.start()
        await self.timers.start()
        self.transactions.start()
        self.pop.start()
        self._tasks = [asyncio.create_task(self._register_loop()), asyncio.create_task(self._housekeeping())]
        sampler = self._stats_sampler()
        sampler.baseline()  # puts are counted from now on (before the first request is served)
        self._tasks.append(asyncio.create_task(sampler.run()))
        self.status = "running"
        self.dispatcher.not_ready = self.fast_dispatcher.not_ready = None
        self.log.info("broker_started", addr=self.cfg.broker_addr, role=self.cfg.broker_role)

    async def listen_ha(self) -> None:
        """Bind the HA port (haListenPort, default listenPort + 1); the container calls it with the other ports."""
        await self.replication.ha.listen(self.cfg.ha_listen_host)

    async def unlisten_ha(self) -> None:
        await self.replication.ha.unlisten()

    async def shutdown(self) -> None:
        self.status = "stopping"
        await cancel_and_wait(self._tasks + ([self._register_soon] if self._register_soon else []))
        await self.replication.stop()
        await self.schedule.stop()
        await self.timers.stop()
        await self.transactions.stop()
        self.pop.stop()
        self.pull.hold.wake_all()
        await self._unregister_all()
        self.meta.persist_all()
        await self.store.shutdown()
        if self._own_outer:
            await self.outer.close()
        self.status = "stopped"
        self.log.info("broker_stopped")

    # -- metadata hook: a created/changed topic is registered with the name servers at once ---------------

    def on_change(self, change: MetadataChange) -> None:
        if change.kind == "subscription_group" and self.send_lane is not None:
            self.send_lane.forget_retry(change.key)  # its retryMaxTimes decides between retry topic and DLQ
        if change.kind == "topic":
            if self.send_lane is not None:
                self.send_lane.forget(change.key)
            tc = self.meta.topics.get(change.key) if change.op == "put" else None
            if tc is not None:  # create its files off the loop thread before the first send needs them
                self.store.prepare_topic(tc.topic_name, max(tc.read_queue_nums, tc.write_queue_nums))
            self._pending_topics.add(change.key)
            if self._register_soon is None or self._register_soon.done():
                self._register_soon = asyncio.get_running_loop().create_task(self._register_changed())

    async def _register_changed(self) -> None:
        await asyncio.sleep(0)  # sleep-ok: coalesce topics created in the same loop iteration
        topics, self._pending_topics = self._pending_topics, set()
        self.meta.topics.persist()
        await self.register_all(topics)

    # -- name server ---------------------------------------------------------------------------------------

    @property
    def namesrv_addrs(self) -> list[str]:
        return self._namesrv_override if self._namesrv_override is not None else self.cfg.namesrv_addrs

    async def register_all(self, topics: set[str] | None = None) -> RegisterBrokerResult | None:
        """Register (all topics, or the named ones) with every name server; returns the first answer. In
        controller mode nothing is registered before the controller assigned a role; a master's stateVersion
        is its master epoch, so the name servers prefer the newest master."""
        if not self.replication.role_known:
            return None
        wrapper = self.meta.topics.register_wrapper(sorted(topics) if topics else None)
        table = wrapper["topicConfigTable"]
        if not self.is_writeable():
            table = {k: {**v, "perm": v["perm"] & self.cfg.broker_permission} for k, v in table.items()}
        version = wrapper["dataVersion"]
        if self.cfg.enable_controller_mode:
            version = {**version, "stateVersion": self.replication.master_epoch}
        ha = f"{self.cfg.broker_ip1}:{self.replication.ha.port}"
        first: RegisterBrokerResult | None = None
        for addr in self.namesrv_addrs:
            try:
                res = await register_broker(self.outer, addr, cluster=self.cfg.broker_cluster_name,
                                            broker_name=self.cfg.broker_name, broker_addr=self.cfg.broker_addr,
                                            broker_id=self.cfg.broker_id, ha_server_addr=ha, topic_config_table=table,
                                            data_version=version)  # fmt: skip
            except Exception as e:  # noqa: BLE001 - one name server down must not stop the others
                self.log.warning("register_broker_failed", namesrv=addr, error=repr(e))
                continue
            first = first or res
            self.replication.on_registered(res)
        return first

    async def _unregister_all(self) -> None:
        for addr in self.namesrv_addrs:
            try:
                await unregister_broker(self.outer, addr, cluster=self.cfg.broker_cluster_name,
                                        broker_name=self.cfg.broker_name, broker_addr=self.cfg.broker_addr,
                                        broker_id=self.cfg.broker_id)
            except Exception as e:  # noqa: BLE001
                self.log.warning("unregister_broker_failed", namesrv=addr, error=repr(e))

    async def _register_loop(self) -> None:
        while True:
            await self.register_all()
            await asyncio.sleep(max(1.0, self.cfg.register_name_server_period / 1000.0))  # sleep-ok: period

    def _stats_sampler(self) -> StatsSampler:
        st = self.store
        return StatsSampler(self.stats_manager, queues=lambda: st.queue_store.queues, counting=self.is_master,
                            puts_total=lambda: self.stats.msgs_in, gets_total=lambda: self.stats.msgs_out,
                            dispatch_behind=lambda: max(0, st.max_phy_offset - st.dispatched_offset),
                            topics=self.meta.topics.all)

    async def _housekeeping(self) -> None:
        period = self.cfg.flush_consumer_offset_interval / 1000.0
        while True:
            await asyncio.sleep(period)  # sleep-ok: periodic timer
            try:
                jobs = self.meta.prepare_persist_all()  # encoded here; written and fsynced off the loop
                if jobs:
                    await asyncio.to_thread(_run_persist_jobs, jobs)
                self.consumers.expire(self.cfg.channel_expired_timeout / 1000.0)
                self.producers.expire(self.cfg.channel_expired_timeout / 1000.0)
            except Exception as e:  # noqa: BLE001 - contained to this broker, visible in its status
                self.last_error = repr(e)
                self.log.error("housekeeping_failed", error=repr(e))

    # -- state -----------------------------------------------------------------------------------------

    def master_broker_addr(self) -> str | None:
        return None if self.is_master() else self.master_addr

    @property
    def slave_sync(self) -> Any:
        return self.replication.metasync

    def is_master(self) -> bool:
        return self.cfg.broker_role != "SLAVE"

    def is_writeable(self) -> bool:
        """Master with PERM_WRITE whose epoch is not fenced (a newer master exists)."""
        return self.is_master() and bool(self.cfg.broker_permission & PERM_WRITE) and self.replication.ha.writable

    def is_readable(self) -> bool:
        return bool(self.cfg.broker_permission & PERM_READ)

    async def change_role(self, role: str, broker_id: int) -> None:
        """An admin's role change (classic mode): master <-> slave at runtime, replication following."""
        await self.replication.change_classic_role(role, broker_id)

    async def apply_role(self, role: str, broker_id: int) -> None:
        """Switch between master and slave at runtime (no restart): a master takes writes, a slave refuses them;
        the name servers learn the new id at once. The store keeps running."""
        new = build_config(BrokerConfig, {**self.config_properties(), "brokerRole": role, "brokerId": str(broker_id)})
        old = self.cfg
        if (old.broker_role, old.broker_id) == (new.broker_role, new.broker_id):
            return
        self.cfg = dataclasses.replace(old, broker_role=new.broker_role, broker_id=new.broker_id)
        self.log = structlog.get_logger("broker").bind(broker=self.cfg.identity)
        self.log.info("broker_role_changed", old_role=old.broker_role, old_id=old.broker_id, role=role,
                      broker_id=broker_id)
        if self.send_lane is not None:
            self.send_lane.forget()
        if old.identity != self.cfg.identity and self.identity_listener is not None:
            self.identity_listener(old.identity, self.cfg.identity)
        if not self.is_master():
            self.pull.hold.wake_all()
        self.pop.on_role()
        await self.register_all()

    def health(self) -> tuple[str, str]:
        """(status, last error): an I/O error inside the store shows as 'degraded', contained to this broker."""
        err = self.store.last_error or self.last_error or ""
        if self.status == "running" and (err or not self.store.is_writeable()):
            return "degraded", err or "store not writeable: " + ",".join(self.store.running_flags.names())
        return self.status, err

    @property
    def ha(self) -> HAService:
        """The HA service (GET_BROKER_HA_STATUS reports it)."""
        return self.replication.ha

    def ha_status(self) -> dict[str, Any]:
        return self.replication.status()

    def config_properties(self) -> dict[str, str]:
        return config_to_properties(self.cfg)

    def update_config(self, props: dict[str, str]) -> None:
        """Validate and apply runtime-changeable keys; the rest take effect at the next start."""
        merged = {**self.config_properties(), **props}
        new = build_config(BrokerConfig, merged)
        live = {f.name: getattr(new, f.name) for f in dataclasses.fields(new)
                if (f.metadata.get("key") or snake_to_camel(f.name)) in LIVE_KEYS}
        self.cfg = dataclasses.replace(self.cfg, **live)
        self.store.apply_live_config(store_config_of(self.cfg))
        self.config_version.next_version()
        if self.config_path:
            persist_properties(self.config_path, props)
        if "brokerPermission" in props:
            asyncio.get_running_loop().create_task(self.register_all())

    @property
    def acl_denied(self) -> int:
        return self.acl.validator.denied if self.acl is not None else 0

    def runtime_info(self) -> dict[str, Any]:
        st = self.store
        lane = self.send_lane
        return {
            "brokerVersion": "479", "brokerVersionDesc": "V5_3_3", "brokerRole": self.cfg.broker_role,
            "msgPutTotalTodayNow": self.stats.msgs_in, "msgGetTotalTodayNow": self.stats.msgs_out,
            "bytesIn": self.stats.bytes_in, "bytesOut": self.stats.bytes_out, "errors": self.stats.errors,
            "commitLogMaxOffset": st.max_phy_offset, "commitLogMinOffset": st.min_phy_offset,
            "confirmOffset": st.confirm_offset, "diskUsageBytes": st.logical_usage_bytes(),
            "haServerAddr": f"{self.cfg.broker_ip1}:{self.replication.ha.port}",
            "masterEpoch": self.replication.master_epoch, "masterAddr": self.master_addr or "",
            **self.replication.sync_counters(),
            **(self.replication.msync.snapshot_info() if self.replication.msync is not None else {}),
            **self.timers.runtime_info(),
            "sendLaneMsgs": lane.handled if lane is not None else 0, "aclDenied": self.acl_denied,
            **({f"sendLaneAclMiss.{k}": v for k, v in lane.acl_misses().items()} if lane and self.acl else {}),
            **runtime_keys(self.stats_manager),
            "bootTimestamp": self.stats_manager.boot_ms, "status": self.health()[0], "lastError": self.health()[1],
        }


def _run_persist_jobs(jobs: list[PersistJob]) -> None:
    """Write every job (a failed one stays dirty for the next round), then raise the first error."""
    first: OSError | None = None
    for job in jobs:
        try:
            job.run()
        except OSError as e:
            first = first or e
    if first is not None:
        raise first


async def cancel_and_wait(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until they are done, cancelling again any that swallowed the cancellation (Python
    3.11's ``asyncio.wait_for`` drops one that lands as the future it waits for completes: a registration loop
    that lost it would run on and hang the shutdown)."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
