"""Container configuration (RocketMQ's BrokerContainerConfig keys plus ours)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from brokerd.config_file import ConfigError, build_config, read_properties


@dataclass(frozen=True)
class ContainerConfig:
    listen_port: int = 10811  # the container's admin port
    broker_container_ip: str = "127.0.0.1"
    namesrv_addr: str | None = None
    broker_config_paths: str = ""  # ':'-separated broker config files
    embedded_namesrv_enable: bool = True
    embedded_namesrv_port: int = 9876
    logs_root: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "logs", "rocketmqlogs"))
    isolate_log_enable: bool = False
    metrics_port: int = 8080  # aiohttp /metrics, /health and the dashboard; 0 = any free port, -1 = disabled
    dashboard_enable: bool = True  # the web dashboard on the metrics port (docs/dashboard.md)
    dashboard_sample_interval_ms: int = 2000  # how often the throughput charts sample the counters
    replicas_per_disk_partition: int = 1
    logical_disk_space_clean_forcibly_threshold: float = 0.80
    disk_partition_size_bytes: int = 0  # 0 = the real partition size (tests inject a small one)
    # brokers added at runtime (mqadmin addBroker), restored at every start until removed (mqadmin removeBroker) or
    # the file is deleted; relative to the working directory (as storePathRootDir); the shipped configs keep it in
    # ./data with the stores; "" = ~/store/container-<listenPort>-brokers.json (RocketMQ's default store root)
    container_state_file: str = ""
    admin_listen_host: str = "127.0.0.1"  # the admin port and /metrics stay on loopback unless configured
    metrics_listen_host: str = "127.0.0.1"  # where the metrics port (and the dashboard) listens; 0.0.0.0: everywhere
    # ACL (docs/acl.md): the admin port takes requests signed by an admin account only, the embedded name
    # server signed requests only (its writes by an admin account); brokers have their own aclEnable
    acl_enable: bool = False
    acl_file_path: str = ""  # plain_acl.yml; relative to this file; "" = plain_acl.yml next to it
    # RocketMQ 5's gRPC endpoint (brokerd/proxy) for the 5.x SDKs: every broker of the container, and
    # through the name server any other; client-facing like the brokers' ports (all interfaces unless configured).
    # With aclEnable=true its clients authenticate against aclFilePath.
    enable_grpc_proxy: bool = False
    grpc_listen_port: int = 8081  # 0 = any free port
    grpc_listen_host: str = "0.0.0.0"
    grpc_workers: int = 0  # gRPC worker processes on the same port besides the container's own (brokerd/proxy/workers.py)

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort: invalid port {self.listen_port}")
        if not 0 <= self.embedded_namesrv_port <= 65535:
            raise ConfigError(f"embeddedNamesrvPort: invalid port {self.embedded_namesrv_port}")
        if not -1 <= self.metrics_port <= 65535:
            raise ConfigError(f"metricsPort: invalid port {self.metrics_port}")
        if not 0 <= self.grpc_listen_port <= 65535:
            raise ConfigError(f"grpcListenPort: invalid port {self.grpc_listen_port}")
        if not self.grpc_listen_host.strip():
            raise ConfigError("grpcListenHost: must not be empty")
        if not 0 <= self.grpc_workers <= 64:
            raise ConfigError(f"grpcWorkers: must be in 0..64, not {self.grpc_workers}")
        if not self.metrics_listen_host.strip():
            raise ConfigError("metricsListenHost: must not be empty")
        if not 100 <= self.dashboard_sample_interval_ms <= 60000:
            raise ConfigError("dashboardSampleIntervalMs: must be in 100..60000")
        if self.replicas_per_disk_partition < 1:
            raise ConfigError("replicasPerDiskPartition: must be >= 1")
        if self.disk_partition_size_bytes < 0:
            raise ConfigError("diskPartitionSizeBytes: must be >= 0")
        if not 0.0 < self.logical_disk_space_clean_forcibly_threshold <= 1.0:
            raise ConfigError("logicalDiskSpaceCleanForciblyThreshold: must be in (0, 1]")
        if self.acl_enable and not self.acl_file_path:
            raise ConfigError("aclFilePath: required when aclEnable=true (the plain_acl.yml file)")

    @property
    def state_file(self) -> str:
        """The state file's absolute path (a relative ``containerStateFile`` is resolved at start-up's directory)."""
        return os.path.abspath(self.container_state_file or os.path.join(
            os.path.expanduser("~"), "store", f"container-{self.listen_port}-brokers.json"))

    @property
    def broker_paths(self) -> list[str]:
        return [p for p in self.broker_config_paths.split(":") if p.strip()]

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]


def load_container_config(path: str) -> ContainerConfig:
    props = read_properties(path)
    base = os.path.dirname(os.path.abspath(path))
    cfg = build_config(ContainerConfig, props)
    # relative broker config paths are relative to the container config file
    paths = [p if os.path.isabs(p) else os.path.join(base, p) for p in cfg.broker_paths]
    acl_path = props.get("aclFilePath") or "plain_acl.yml"
    return build_config(ContainerConfig, {**props, "brokerConfigPaths": ":".join(paths),
                                          "aclFilePath": os.path.join(base, acl_path)})
