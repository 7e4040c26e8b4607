"""Name-server settings (`NamesrvConfig`), validated at construction; keys in a config file are RocketMQ's
camelCase names. A leaf module: the service, its request processors and `mqnamesrv` all read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from brokerd.config_file import ConfigError
from brokerd.namesrv.routeinfo import DEFAULT_BROKER_CHANNEL_EXPIRED_MS


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
    # ACL (docs/acl.md): every request signed by an account of aclFilePath, the writes by an admin account
    acl_enable: bool = False
    acl_file_path: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort: must be 0..65535, got {self.listen_port}")
        if not self.bind_address:
            raise ConfigError("bindAddress: must not be empty")
        if self.scan_not_active_broker_interval_ms <= 0:
            raise ConfigError(f"scanNotActiveBrokerInterval: must be > 0, got {self.scan_not_active_broker_interval_ms}")
        if self.broker_channel_expired_ms <= 0:
            raise ConfigError(f"brokerChannelExpiredMs: must be > 0, got {self.broker_channel_expired_ms}")
        if self.acl_enable and not self.acl_file_path:
            raise ConfigError("aclFilePath: required when aclEnable=true (the plain_acl.yml file)")
        if self.wait_seconds_for_service < 0:
            raise ConfigError(f"waitSecondsForService: must be >= 0, got {self.wait_seconds_for_service}")
