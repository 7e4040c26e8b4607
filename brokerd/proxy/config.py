"""The gRPC endpoint's settings (RocketMQ ProxyConfig's names and defaults where it has them)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from brokerd.config_file import ConfigError
from brokerd.proxy.convert import Limits


@dataclass(frozen=True)
class GrpcProxyConfig:
    listen_host: str = "0.0.0.0"
    listen_port: int = 8081
    advertise_host: str = "127.0.0.1"  # the address QueryRoute names when a client sent no endpoints
    # worker processes serving the same port besides the container's own endpoint (SO_REUSEPORT; workers.py):
    # the endpoint's work spreads over cores; they reach the brokers over TCP remoting (cluster mode)
    workers: int = 0
    reuse_port: bool = False  # bind with SO_REUSEPORT (set when workers share the port)
    acl_file_path: str = ""  # "" = ACL off; else every RPC is authenticated against this plain_acl.yml
    limits: Limits = field(default_factory=Limits)
    # receive
    min_invisible_ms_for_recv: int = 10_000
    max_invisible_ms: int = 12 * 3600 * 1000
    default_invisible_ms: int = 60_000  # auto-renewed receives (PushConsumer)
    min_long_polling_ms: int = 5_000
    max_long_polling_ms: int = 20_000
    long_polling_batch_size: int = 32
    long_polling_reserve_ms: int = 100
    max_msg_nums_per_pop: int = 32
    enable_batch_ack: bool = True  # an AckMessage of several entries: one BATCH_ACK_MESSAGE per broker
    # renewing the invisible time of auto-renewed receives
    renew_ahead_ms: int = 10_000
    renew_period_ms: int = 5_000
    renew_max_ms: int = 3 * 3600 * 1000
    max_renew_retries: int = 3
    invisible_ms_when_clear: int = 1_000
    # producers
    producer_max_attempts: int = 3
    producer_backoff_initial_ms: int = 10
    producer_backoff_max_ms: int = 1_000
    producer_backoff_multiplier: float = 2.0
    validate_message_type: bool = True
    # clients, routes, transactions
    client_idle_ms: int = 120_000
    route_ttl_ms: int = 3_000
    broker_timeout_ms: int = 3_000
    transaction_data_expire_ms: int = 30_000
    transaction_data_max_num: int = 15

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"grpcListenPort: invalid port {self.listen_port}")
        if not self.listen_host.strip():
            raise ConfigError("grpcListenHost: must not be empty")
        if not 0 < self.min_long_polling_ms <= self.max_long_polling_ms:
            raise ConfigError("grpc long polling: min must be > 0 and <= max")
        if not 0 <= self.workers <= 64:
            raise ConfigError(f"grpcWorkers: must be in 0..64, not {self.workers}")


def config_from_wire(data: dict[str, Any]) -> GrpcProxyConfig:
    """A config from ``dataclasses.asdict`` (a worker's command line); unknown keys are ignored."""
    known = {f.name for f in fields(GrpcProxyConfig)}
    kw = {k: v for k, v in data.items() if k in known}
    if isinstance(kw.get("limits"), dict):
        lim = {f.name for f in fields(Limits)}
        kw["limits"] = Limits(**{k: v for k, v in kw["limits"].items() if k in lim})
    return GrpcProxyConfig(**kw)
