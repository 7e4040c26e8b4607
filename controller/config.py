"""Controller configuration: RocketMQ `key=value` properties files -> a frozen, validated dataclass.

RocketMQ's ControllerConfig keys are kept (controllerDLegerGroup, controllerDLegerPeers, controllerDLegerSelfId,
controllerStorePath, enableElectUncleanMaster, ...); the keys this implementation adds are documented in
docs/controller.md. Each peer address ("n0-127.0.0.1:9877") is where that member answers controller requests;
its Raft traffic uses the same host at port + raftPortOffset (default 1000).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from brokerd.remoting.client import split_addr

READ_MODES = ("read_index", "lease", "log")


class ConfigError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def _k(key: str, default: Any, *, updatable: bool = False, default_factory: Any = None) -> Any:
    meta = {"key": key, "updatable": updatable}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ControllerConfig:
    group: str = _k("controllerDLegerGroup", "")
    peers_spec: str = _k("controllerDLegerPeers", "")
    self_id: str = _k("controllerDLegerSelfId", "")
    store_path: str = _k("controllerStorePath", "", default_factory=lambda: os.path.expanduser("~/DledgerController"))
    listen_host: str = _k("controllerListenHost", "0.0.0.0")
    # RocketMQ ControllerConfig (spec 6.6)
    scan_not_active_broker_interval_ms: int = _k("scanNotActiveBrokerInterval", 5000, updatable=True)
    scan_inactive_master_interval_ms: int = _k("scanInactiveMasterInterval", 5000, updatable=True)
    elect_master_max_retry_count: int = _k("electMasterMaxRetryCount", 3, updatable=True)
    enable_elect_unclean_master: bool = _k("enableElectUncleanMaster", False, updatable=True)
    process_read_event: bool = _k("isProcessReadEvent", False, updatable=True)
    notify_broker_role_changed: bool = _k("notifyBrokerRoleChanged", True, updatable=True)
    thread_pool_nums: int = _k("controllerThreadPoolNums", 16)
    request_queue_capacity: int = _k("controllerRequestThreadPoolQueueCapacity", 50000, updatable=True)
    # added by this implementation
    legacy_mode: bool = _k("controllerLegacyMode", False)
    read_mode: str = _k("controllerReadMode", "read_index", updatable=True)
    follower_read: bool = _k("controllerFollowerRead", True, updatable=True)
    request_timeout_ms: int = _k("controllerRequestTimeoutMs", 5000, updatable=True)
    broker_heartbeat_timeout_ms: int = _k("brokerHeartbeatTimeoutMs", 3000, updatable=True)
    honor_broker_heartbeat_timeout: bool = _k("honorBrokerHeartbeatTimeout", False, updatable=True)
    channel_close_means_dead: bool = _k("channelCloseMeansBrokerDead", True, updatable=True)
    channel_close_confirm_ms: int = _k("channelCloseConfirmMs", 400, updatable=True)
    liveness_tick_ms: int = _k("livenessTickMs", 50)
    raft_port_offset: int = _k("raftPortOffset", 1000)
    raft_election_timeout_ms: int = _k("raftElectionTimeoutMs", 500)
    raft_heartbeat_interval_ms: int = _k("raftHeartbeatIntervalMs", 100)
    raft_tick_ms: int = _k("raftTickMs", 50)
    raft_max_batch_entries: int = _k("raftMaxBatchEntries", 256)
    raft_snapshot_threshold_entries: int = _k("raftSnapshotThresholdEntries", 10000)
    raft_snapshot_trailing_entries: int = _k("raftSnapshotTrailingEntries", 1000)
    raft_max_follower_lag_entries: int = _k("raftMaxFollowerLagEntries", 1000)
    raft_lease_ratio: float = _k("raftLeaseRatio", 0.8)
    raft_fsync: bool = _k("raftFsync", True)
    namesrv_listen_port: int | None = _k("namesrvListenPort", None)
    gc_freeze_interval_ms: int = _k("gcFreezeIntervalMs", 10000)
    gc_full_collect_interval_ms: int = _k("gcFullCollectIntervalMs", 3600000)
    metrics_port: int = _k("controllerMetricsPort", 0)  # /metrics (controller/metrics.py); 0: a free port, -1: off
    metrics_listen_host: str = _k("controllerMetricsListenHost", "127.0.0.1")
    # ACL (docs/acl.md): admin requests (1002, 1009-1011) need an admin account of aclFilePath; the name-server
    # role checks every request (its writes: admin)
    acl_enable: bool = _k("aclEnable", False)
    acl_file_path: str = _k("aclFilePath", "")

    def __post_init__(self) -> None:
        def need(cond: bool, key: str, msg: str) -> None:
            if not cond:
                raise ConfigError(key, msg)

        need(bool(self.group), "controllerDLegerGroup", "is required")
        need(bool(self.self_id), "controllerDLegerSelfId", "is required")
        peers = parse_peers(self.peers_spec)  # raises ConfigError naming controllerDLegerPeers
        need(self.self_id in peers, "controllerDLegerSelfId",
             f"{self.self_id!r} is not one of the peers {sorted(peers)}")
        need(bool(self.store_path), "controllerStorePath", "is required")
        need(not self.acl_enable or bool(self.acl_file_path), "aclFilePath", "is required when aclEnable=true")
        need(self.read_mode in READ_MODES, "controllerReadMode", f"must be one of {', '.join(READ_MODES)}")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and f.name not in ("raft_port_offset", "metrics_port"):
                zero_ok = f.name in ("namesrv_listen_port", "gc_freeze_interval_ms", "gc_full_collect_interval_ms")
                need(v >= 0 if zero_ok else v > 0, f.metadata["key"], f"must be {'>= 0' if zero_ok else 'positive'}, got {v}")
        need(0.0 < self.raft_lease_ratio < 1.0, "raftLeaseRatio", "must be between 0 and 1")
        need(self.raft_heartbeat_interval_ms < self.raft_election_timeout_ms, "raftHeartbeatIntervalMs",
             "must be smaller than raftElectionTimeoutMs")
        for pid, addr in peers.items():
            port = split_addr(addr)[1] + self.raft_port_offset
            need(0 < port < 65536, "raftPortOffset", f"puts {pid}'s Raft port at {port}, outside 1..65535")
        need(-1 <= self.metrics_port < 65536, "controllerMetricsPort", "must be a port number, 0 (any free) or -1 (off)")
        need(bool(self.metrics_listen_host.strip()), "controllerMetricsListenHost", "must not be empty")
        if self.namesrv_listen_port is not None:
            need(self.namesrv_listen_port < 65536, "namesrvListenPort", "must be a port number")

    # -- derived ---------------------------------------------------------------------------------------

    @property
    def peers(self) -> dict[str, str]:
        """id -> controller request address ("host:port")."""
        return parse_peers(self.peers_spec)

    @property
    def raft_peers(self) -> dict[str, str]:
        """id -> Raft traffic address: same host, port + raftPortOffset."""
        out = {}
        for pid, addr in self.peers.items():
            host, port = split_addr(addr)
            out[pid] = f"{host}:{port + self.raft_port_offset}"
        return out

    @property
    def self_addr(self) -> str:
        return self.peers[self.self_id]

    @property
    def listen_port(self) -> int:
        return split_addr(self.self_addr)[1]

    @property
    def data_dir(self) -> str:
        return os.path.join(os.path.expanduser(self.store_path), self.self_id)

    def with_updates(self, props: dict[str, str], *, runtime: bool = False) -> ControllerConfig:
        """A new validated config with `props` applied (RocketMQ keys). `runtime` refuses non-updatable keys."""
        changes: dict[str, Any] = {}
        by_key = {f.metadata["key"]: f for f in dataclasses.fields(self)}
        for key, raw in props.items():
            f = by_key.get(key)
            if f is None:
                raise ConfigError(key, "unknown controller config key")
            if runtime and not f.metadata["updatable"]:
                raise ConfigError(key, "cannot be changed at runtime")
            changes[f.name] = _convert(key, f.type, raw)
        return dataclasses.replace(self, **changes)

    def to_properties(self) -> dict[str, str]:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            out[f.metadata["key"]] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out


def parse_peers(spec: str) -> dict[str, str]:
    """"n0-127.0.0.1:9877;n1-127.0.0.1:9878" -> {"n0": "127.0.0.1:9877", ...}"""
    key = "controllerDLegerPeers"
    peers: dict[str, str] = {}
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        pid, sep, addr = part.partition("-")
        if not sep or not pid or not addr:
            raise ConfigError(key, f"bad peer {part!r}; expected id-host:port")
        try:
            host, port = split_addr(addr)
        except ValueError as e:
            raise ConfigError(key, f"bad peer {part!r}: {e}") from None
        if not 0 < port < 65536:
            raise ConfigError(key, f"bad port in {part!r}")
        if pid in peers:
            raise ConfigError(key, f"duplicate peer id {pid!r}")
        peers[pid] = f"{host}:{port}"
    if not peers:
        raise ConfigError(key, "is required (id-host:port;...)")
    return peers


def _convert(key: str, typ: Any, raw: str) -> Any:
    """Convert a properties value to the field's declared type (annotations are strings here)."""
    t = typ if isinstance(typ, str) else typ.__name__
    raw = raw.strip()
    if t == "bool":
        low = raw.lower()
        if low not in ("true", "false"):
            raise ConfigError(key, f"must be true or false, got {raw!r}")
        return low == "true"
    if t in ("int", "int | None"):
        if t == "int | None" and raw == "":
            return None
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(key, f"must be an integer, got {raw!r}") from None
    if t == "float":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(key, f"must be a number, got {raw!r}") from None
    return raw


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: key=value or key:value, # and ! comments, trailing-backslash continuation."""
    out: dict[str, str] = {}
    pending = ""
    for line in text.splitlines():
        line = pending + line.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        idx = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if idx < 0:
            out[line] = ""
            continue
        out[line[:idx].strip()] = line[idx + 1:].strip()
    return out


def load_config(path: str, overrides: dict[str, str] | None = None) -> ControllerConfig:
    with open(path, encoding="utf-8") as f:
        props = parse_properties(f.read())
    props.update(overrides or {})
    acl = props.get("aclFilePath")
    if acl and not os.path.isabs(acl):  # relative to the config file
        props["aclFilePath"] = os.path.join(os.path.dirname(os.path.abspath(path)), acl)
    return config_from_properties(props)


def config_from_properties(props: dict[str, str]) -> ControllerConfig:
    """Build and validate; unknown keys (other RocketMQ settings) are returned in `ignored_keys`."""
    known = {f.metadata["key"]: f for f in dataclasses.fields(ControllerConfig)}
    kwargs: dict[str, Any] = {}
    for key, raw in props.items():
        f = known.get(key)
        if f is None:
            continue
        kwargs[f.name] = _convert(key, f.type, raw)
    return ControllerConfig(**kwargs)


def ignored_keys(props: dict[str, str]) -> list[str]:
    known = {f.metadata["key"] for f in dataclasses.fields(ControllerConfig)}
    return sorted(k for k in props if k not in known)

