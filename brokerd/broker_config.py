"""Broker configuration: RocketMQ key names, parsed into a frozen, validated dataclass."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from brokerd.config_file import ConfigError, build_config, read_properties

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """'1s 5s 10s ...' -> delays in ms, level 1 first."""
    out = []
    for tok in text.split():
        m = re.fullmatch(r"(\d+)([smhd])", tok)
        if not m:
            raise ConfigError(f"messageDelayLevel: bad level {tok!r} (expected e.g. 10s, 1m, 2h)")
        out.append(int(m.group(1)) * _UNITS[m.group(2)])
    if not out:
        raise ConfigError("messageDelayLevel: no levels")
    return tuple(out)


@dataclass(frozen=True)
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: str = "ASYNC_MASTER"
    broker_ip1: str = field(default="127.0.0.1", metadata={"key": "brokerIP1"})
    listen_port: int = 10911
    fast_listen_port_enable: bool = True  # also listen on listenPort - 2 (old Java clients' VIP channel)
    ha_listen_port: int = 0  # 0 = listenPort + 1
    namesrv_addr: str | None = None  # "host:port;host:port"
    store_path_root_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    sync_flush_timeout: int = 5000
    # overload shedding (RocketMQ's BrokerFastFailure): a send is answered SYSTEM_BUSY at once instead of queueing
    broker_fast_failure_enable: bool = True
    wait_time_mills_in_send_queue: int = 200  # the oldest unanswered send waited longer: refuse new ones
    send_thread_pool_queue_capacity: int = 10_000  # unanswered sends of the broker: refuse beyond
    os_page_cache_busy_time_out_mills: int = 1000  # a put that held the store longer: the page cache is busy
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    max_message_size: int = 4 * 1024 * 1024
    disk_space_warning_level_ratio: float = 0.90
    disk_space_clean_forcibly_ratio: float = 0.85
    message_index_enable: bool = True
    # smaller than RocketMQ's 5M/20M: index files are preallocated (~100 MiB each instead of ~500 MiB)
    max_hash_slot_num: int = 1_000_000
    max_index_num: int = 4_000_000
    flush_interval_consume_queue: int = 1000
    # RocketMQ's default (warmMapedFileEnable=false); measured on our VMs it does not pay (docs/benchmarks.md)
    warm_mapped_file_enable: bool = False
    clean_resource_interval: int = 10_000  # ms between expiry/quota checks
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    broker_permission: int = 6
    register_name_server_period: int = 30_000
    long_polling_enable: bool = True
    enable_property_filter: bool = False  # SQL92 subscriptions (RocketMQ's default: off)
    short_polling_time_mills: int = 1000
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    max_reconsume_times_default: int = 16
    channel_expired_timeout: int = 120_000
    notify_consumer_ids_changed_enable: bool = True
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    flush_consumer_offset_interval: int = 5000
    stats_sampling_interval: int = 10_000  # not a RocketMQ key: ms between broker statistics samples (RocketMQ: 10 s)
    transaction_time_out: int = 6000  # ms before an unfinished half message's producer is asked
    transaction_check_max: int = 15  # asks before the half message is given up (TRANS_CHECK_MAX_TIME_TOPIC)
    transaction_check_interval: int = 60_000  # ms between passes of the check service
    reject_transaction_message: bool = False
    enable_controller_mode: bool = False
    controller_addr: str | None = None
    # replication (RocketMQ MessageStoreConfig / BrokerConfig keys; docs/ha.md)
    ha_master_address: str | None = None  # classic slave: the master's HA address (else from the name server)
    ha_listen_host: str = "0.0.0.0"  # not a RocketMQ key: bind address of the HA port
    ha_transfer_batch_size: int = 32 * 1024
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    ha_max_time_slave_not_catchup: int = 15_000
    check_sync_state_set_period: int = 5000
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    sync_from_last_file: bool = False
    async_learner: bool = False
    broker_heartbeat_interval: int = 1000  # controller mode: BROKER_HEARTBEAT to every controller
    controller_heart_beat_timeout_mills: int = 10_000
    sync_broker_metadata_period: int = 5000  # controller mode: GET_REPLICA_INFO poll
    broker_election_priority: int = 2**31 - 1
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40
    slave_sync_metadata_interval: int = 3000  # not a RocketMQ key: a slave's GET_ALL_* pull period (4.x: 3 s tick)
    # incremental metadata sync (RIP-81; docs/metadata-sync.md); false keeps the 4.x full sync above
    allow_metadata_incremental_sync: bool = False
    metadata_offset_flush_interval: int = 100  # ms: coalesced consumer/delay offsets reach the log within this
    metadata_offset_flush_commits: int = 1000  # ... or after this many commits
    metadata_snapshot_interval: int = 60_000  # ms between a master's snapshot files
    # tiered storage under HA (docs/tiered.md)
    tiered_store_enable: bool = False
    tiered_backend_service_provider: str = "posix"  # posix (a directory on any mounted filesystem) or s3
    tiered_store_file_path: str = ""  # posix: the tier's root directory
    object_store_endpoint: str = ""  # s3: endpoint URL (empty: AWS)
    object_store_bucket: str = ""
    object_store_access_key: str = ""
    object_store_secret_key: str = ""
    object_store_region: str = "us-east-1"
    tiered_store_file_reserved_time: int = 72  # hours the tier keeps data (local: fileReservedTime)
    tiered_chunk_size: int = 16 * 1024 * 1024  # bytes of confirmed log per uploaded chunk (a segment's end cuts one)
    tiered_upload_interval: int = 500  # ms between upload checks when there is nothing to upload
    tiered_read_cache_size: int = 64 * 1024 * 1024  # bytes of tier chunks cached for reads
    tiered_read_ahead_chunks: int = 1
    tiered_bootstrap_from_tier: bool = True  # an empty slave fetches the tier's chunks before replicating
    # container-level knobs a broker may override
    replicas_per_disk_partition: int = 1
    logical_disk_space_clean_forcibly_threshold: float = 0.80
    isolate_log_enable: bool = False
    # ACL 1.0 (RocketMQ's aclEnable; docs/acl.md): every request signed by an account of aclFilePath
    acl_enable: bool = False
    acl_file_path: str = ""  # plain_acl.yml; "" = plain_acl.yml next to this broker's config file
    acl_access_key: str = ""  # not RocketMQ keys: the account this broker signs its own requests with
    acl_secret_key: str = ""  # (name-server registration, a slave's metadata pulls)
    # POP consumption (RocketMQ 5; docs/pop.md)
    pop_polling_size: int = 1024  # parked POP requests per topic, group and queue (more: POLLING_FULL)
    max_pop_polling_size: int = 100_000  # parked POP requests of the broker
    pop_inflight_message_threshold: int = 10_000  # messages in flight per POP queue: a queue past it is not popped
    enable_retry_topic_v2: bool = False  # POP retry topics %RETRY%group+topic instead of %RETRY%group_topic
    pop_from_retry_probability: int = 20  # % of pops that read the group's retry topic first
    default_message_request_mode: str = "PULL"  # QUERY_ASSIGNMENT's mode for a group and topic without one set
    default_pop_share_queue_num: int = -1
    server_load_balancer_enable: bool = True
    pop_min_invisible_time_mills: int = 1  # not RocketMQ keys: the invisibleTime a POP or a change may ask
    max_invisible_time_mills: int = 12 * 3_600_000
    pop_revive_snapshot_records: int = 10_000  # not a RocketMQ key: revive-log records between state snapshots
    pop_revive_snapshot_ops_per_checkpoint: int = 8  # not a RocketMQ key: and at least this many per checkpoint
    # timer messages (RocketMQ 5, RIP-43; docs/timer.md)
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000  # 100, 200, 500 or 1000 (RocketMQ's precisions)
    timer_max_delay_sec: int = 3 * 86_400  # a timer further ahead is refused (MESSAGE_ILLEGAL)
    timer_roll_window_slot: int = 2 * 86_400  # wheel slots (of timerPrecisionMs): timers further ahead are rolled
    timer_flush_interval_ms: int = 1000  # how often the timer index is snapshotted
    recall_message_enable: bool = False  # RECALL_MESSAGE (370) is answered (RocketMQ's default: off)
    allow_recall_when_broker_not_writeable: bool = True

    def __post_init__(self) -> None:
        if not self.broker_name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", self.broker_name):
            raise ConfigError(f"brokerName: invalid broker name {self.broker_name!r}")
        if not self.broker_cluster_name:
            raise ConfigError("brokerClusterName: must not be empty")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId: must be >= 0, got {self.broker_id}")
        if self.broker_role not in ROLES:
            raise ConfigError(f"brokerRole: must be one of {', '.join(ROLES)}, got {self.broker_role!r}")
        if self.broker_role == "SLAVE" and self.broker_id == 0 and not self.enable_controller_mode:
            raise ConfigError("brokerId: a SLAVE needs brokerId > 0")
        if self.flush_disk_type not in FLUSH_TYPES:
            raise ConfigError(f"flushDiskType: must be ASYNC_FLUSH or SYNC_FLUSH, got {self.flush_disk_type!r}")
        if not 0 <= self.listen_port <= 65535 or (self.fast_listen_port_enable and 0 < self.listen_port < 3):
            raise ConfigError(f"listenPort: invalid port {self.listen_port}")
        if self.mapped_file_size_commit_log < 64 * 1024:
            raise ConfigError("mappedFileSizeCommitLog: must be at least 65536")
        if self.mapped_file_size_consume_queue < 20 or self.mapped_file_size_consume_queue % 20:
            raise ConfigError("mappedFileSizeConsumeQueue: must be a positive multiple of 20")
        for key, val in (("flushIntervalCommitLog", self.flush_interval_commit_log),
                         ("syncFlushTimeout", self.sync_flush_timeout),
                         ("registerNameServerPeriod", self.register_name_server_period),
                         ("maxMessageSize", self.max_message_size),
                         ("defaultTopicQueueNums", self.default_topic_queue_nums),
                         ("cleanResourceInterval", self.clean_resource_interval),
                         ("maxHashSlotNum", self.max_hash_slot_num), ("maxIndexNum", self.max_index_num),
                         ("flushIntervalConsumeQueue", self.flush_interval_consume_queue),
                         ("transactionTimeOut", self.transaction_time_out),
                         ("transactionCheckMax", self.transaction_check_max),
                         ("transactionCheckInterval", self.transaction_check_interval),
                         ("haTransferBatchSize", self.ha_transfer_batch_size),
                         ("haSendHeartbeatInterval", self.ha_send_heartbeat_interval),
                         ("haHousekeepingInterval", self.ha_housekeeping_interval),
                         ("haMaxGapNotInSync", self.ha_max_gap_not_in_sync),
                         ("haMaxTimeSlaveNotCatchup", self.ha_max_time_slave_not_catchup),
                         ("checkSyncStateSetPeriod", self.check_sync_state_set_period),
                         ("inSyncReplicas", self.in_sync_replicas), ("minInSyncReplicas", self.min_in_sync_replicas),
                         ("brokerHeartbeatInterval", self.broker_heartbeat_interval),
                         ("controllerHeartBeatTimeoutMills", self.controller_heart_beat_timeout_mills),
                         ("syncBrokerMetadataPeriod", self.sync_broker_metadata_period),
                         ("slaveSyncMetadataInterval", self.slave_sync_metadata_interval),
                         ("metadataOffsetFlushInterval", self.metadata_offset_flush_interval),
                         ("metadataOffsetFlushCommits", self.metadata_offset_flush_commits),
                         ("metadataSnapshotInterval", self.metadata_snapshot_interval),
                         ("waitTimeMillsInSendQueue", self.wait_time_mills_in_send_queue),
                         ("sendThreadPoolQueueCapacity", self.send_thread_pool_queue_capacity),
                         ("osPageCacheBusyTimeOutMills", self.os_page_cache_busy_time_out_mills),
                         ("statsSamplingInterval", self.stats_sampling_interval)):
            if val <= 0:
                raise ConfigError(f"{key}: must be > 0, got {val}")
        for key, r in (("diskSpaceWarningLevelRatio", self.disk_space_warning_level_ratio),
                       ("diskSpaceCleanForciblyRatio", self.disk_space_clean_forcibly_ratio),
                       ("logicalDiskSpaceCleanForciblyThreshold", self.logical_disk_space_clean_forcibly_threshold)):
            if not 0.0 < r <= 1.0:
                raise ConfigError(f"{key}: must be in (0, 1], got {r}")
        if self.file_reserved_time <= 0:
            raise ConfigError(f"fileReservedTime: must be > 0 hours, got {self.file_reserved_time}")
        if not re.fullmatch(r"\d{1,2}(;\d{1,2})*", self.delete_when):
            raise ConfigError(f"deleteWhen: expected hours like 04 or 04;16, got {self.delete_when!r}")
        if self.replicas_per_disk_partition < 1:
            raise ConfigError("replicasPerDiskPartition: must be >= 1")
        if self.broker_permission not in range(0, 16):
            raise ConfigError("brokerPermission: must be a perm bit set (0..15)")
        parse_delay_levels(self.message_delay_level)
        if self.enable_controller_mode and not self.controller_addrs:
            raise ConfigError("controllerAddr: required when enableControllerMode=true (ip:port;ip:port)")
        if self.ha_master_address is not None and self.ha_master_address and ":" not in self.ha_master_address:
            raise ConfigError(f"haMasterAddress: expected host:port, got {self.ha_master_address!r}")
        if not 0 < self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError("accessMessageInMemoryMaxRatio: must be in 1..100")
        if self.acl_enable and not self.acl_file_path:
            raise ConfigError("aclFilePath: required when aclEnable=true (the plain_acl.yml file)")
        if bool(self.acl_access_key) != bool(self.acl_secret_key):
            raise ConfigError("aclAccessKey: aclAccessKey and aclSecretKey are set together")
        if self.tiered_store_enable:
            self._validate_tiered()
        self._validate_pop()
        self._validate_timer()

    def _validate_pop(self) -> None:
        for key, val in (("popPollingSize", self.pop_polling_size), ("maxPopPollingSize", self.max_pop_polling_size),
                         ("popInflightMessageThreshold", self.pop_inflight_message_threshold),
                         ("popMinInvisibleTimeMills", self.pop_min_invisible_time_mills),
                         ("popReviveSnapshotRecords", self.pop_revive_snapshot_records)):  # fmt: skip
            if val <= 0:
                raise ConfigError(f"{key}: must be > 0, got {val}")
        if self.pop_revive_snapshot_ops_per_checkpoint < 0:
            raise ConfigError("popReviveSnapshotOpsPerCheckpoint: must be >= 0, got "
                              f"{self.pop_revive_snapshot_ops_per_checkpoint}")
        if self.max_invisible_time_mills < self.pop_min_invisible_time_mills:
            raise ConfigError("maxInvisibleTimeMills: must be >= popMinInvisibleTimeMills")
        if not 0 <= self.pop_from_retry_probability <= 100:
            raise ConfigError("popFromRetryProbability: must be in 0..100")
        if self.default_message_request_mode not in ("PULL", "POP"):
            raise ConfigError("defaultMessageRequestMode: must be PULL or POP")

    def _validate_timer(self) -> None:
        if self.timer_precision_ms not in (100, 200, 500, 1000):
            raise ConfigError(f"timerPrecisionMs: must be 100, 200, 500 or 1000, got {self.timer_precision_ms}")
        for key, val in (("timerMaxDelaySec", self.timer_max_delay_sec), ("timerRollWindowSlot", self.timer_roll_window_slot),
                         ("timerFlushIntervalMs", self.timer_flush_interval_ms)):  # fmt: skip
            if val <= 0:
                raise ConfigError(f"{key}: must be > 0, got {val}")
        if self.timer_roll_window_slot > 50_000_000:
            raise ConfigError(f"timerRollWindowSlot: at most 50000000 (the wheel's slots live in memory), got "
                              f"{self.timer_roll_window_slot}")

    def _validate_tiered(self) -> None:
        provider = self.tiered_backend_service_provider
        if provider not in ("posix", "s3"):
            raise ConfigError(f"tieredBackendServiceProvider: must be posix or s3, got {provider!r}")
        if provider == "posix" and not self.tiered_store_file_path:
            raise ConfigError("tieredStoreFilePath: required with tieredBackendServiceProvider=posix")
        if provider == "s3" and not self.object_store_bucket:
            raise ConfigError("objectStoreBucket: required with tieredBackendServiceProvider=s3")
        if not 64 * 1024 <= self.tiered_chunk_size <= self.mapped_file_size_commit_log:
            raise ConfigError("tieredChunkSize: must be between 65536 and mappedFileSizeCommitLog")
        for key, val in (("tieredStoreFileReservedTime", self.tiered_store_file_reserved_time),
                         ("tieredUploadInterval", self.tiered_upload_interval),
                         ("tieredReadCacheSize", self.tiered_read_cache_size)):  # fmt: skip
            if val <= 0:
                raise ConfigError(f"{key}: must be > 0, got {val}")
        if self.tiered_read_ahead_chunks < 0:
            raise ConfigError("tieredReadAheadChunks: must be >= 0")

    @property
    def identity(self) -> str:
        return f"{self.broker_cluster_name}:{self.broker_name}:{self.broker_id}"

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_port(self) -> int:
        """haListenPort, default listenPort + 1 (0 when listenPort is 0: any free port)."""
        return self.ha_listen_port or (self.listen_port + 1 if self.listen_port else 0)

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in (self.controller_addr or "").replace(",", ";").split(";") if a.strip()]

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]


def load_broker_config(path: str, **overrides: Any) -> BrokerConfig:
    """A broker config file; a relative aclFilePath is relative to the file (default: its plain_acl.yml)."""
    props = read_properties(path)
    acl_path = props.get("aclFilePath") or "plain_acl.yml"
    if not os.path.isabs(acl_path):
        acl_path = os.path.join(os.path.dirname(os.path.abspath(path)), acl_path)
    return build_config(BrokerConfig, {**props, "aclFilePath": acl_path}, **overrides)
