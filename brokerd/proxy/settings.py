"""Client settings (GrpcClientSettingsManager): what a client announces over Telemetry, merged with what the
endpoint and the consumer group dictate (backoff policy, receive batch size, long-polling timeout, the group's
FIFO flag and its retry policy). Pure, except the group-config cache's fetch."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from brokerd.proxy import pb
from brokerd.proxy.config import GrpcProxyConfig

# RocketMQ's default CustomizedRetryPolicy: the delay levels from 1s
DEFAULT_RETRY_NEXT_MS: tuple[int, ...] = tuple(s * 1000 for s in (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200))


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """What the endpoint needs of a SubscriptionGroupConfig."""

    orderly: bool = False
    retry_max_times: int = 16
    exponential: tuple[int, int, float] | None = None  # (initial ms, max ms, multiplier) with an EXPONENTIAL policy
    customized: tuple[int, ...] = DEFAULT_RETRY_NEXT_MS


def parse_group_config(d: dict[str, Any]) -> GroupConfig:
    policy = d.get("groupRetryPolicy") or {}
    exponential = None
    customized = DEFAULT_RETRY_NEXT_MS
    if isinstance(policy, dict) and str(policy.get("type", "")).upper() == "EXPONENTIAL":
        e = policy.get("exponentialRetryPolicy") or {}
        exponential = (int(e.get("initial", 5000)), int(e.get("max", 7_200_000)), float(e.get("multiplier", 2)))
    elif isinstance(policy, dict) and isinstance(policy.get("customizedRetryPolicy"), dict):
        nxt = policy["customizedRetryPolicy"].get("next")
        if isinstance(nxt, list) and nxt:
            customized = tuple(int(x) for x in nxt)
    return GroupConfig(bool(d.get("consumeMessageOrderly", False)), int(d.get("retryMaxTimes", 16)), exponential,
                       customized)


def group_config_from_body(group: str, body: bytes | None, all_groups: bool) -> GroupConfig | None:
    """A GET_SUBSCRIPTIONGROUP_CONFIG (352) body, or a GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) one."""
    try:
        obj = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        return None
    if all_groups:
        obj = (obj.get("subscriptionGroupTable") or {}).get(group)
    return parse_group_config(obj) if isinstance(obj, dict) and obj else None


def _backoff_from_group(rp: Any, g: GroupConfig) -> None:
    rp.max_attempts = g.retry_max_times + 1
    if g.exponential is not None:
        init, mx, mult = g.exponential
        rp.exponential_backoff.CopyFrom(pb.ExponentialBackoff(initial=pb.duration(init), max=pb.duration(mx),
                                                              multiplier=mult))
    else:
        rp.customized_backoff.CopyFrom(pb.CustomizedBackoff(next=[pb.duration(ms) for ms in g.customized]))


def merged(raw: Any, group: GroupConfig | None, cfg: GrpcProxyConfig) -> Any:
    """The settings the endpoint answers (and applies) for a client's ``raw`` settings."""
    s = pb.Settings()
    s.CopyFrom(raw)
    if s.HasField("publishing"):
        s.backoff_policy.max_attempts = cfg.producer_max_attempts
        s.backoff_policy.exponential_backoff.CopyFrom(pb.ExponentialBackoff(
            initial=pb.duration(cfg.producer_backoff_initial_ms), max=pb.duration(cfg.producer_backoff_max_ms),
            multiplier=cfg.producer_backoff_multiplier))
        s.publishing.validate_message_type = cfg.validate_message_type
        s.publishing.max_body_size = cfg.limits.max_message_size
    elif s.HasField("subscription"):
        g = group or GroupConfig()
        s.subscription.receive_batch_size = cfg.long_polling_batch_size
        s.subscription.long_polling_timeout.CopyFrom(pb.duration(cfg.max_long_polling_ms))
        s.subscription.fifo = g.orderly
        _backoff_from_group(s.backoff_policy, g)
    s.metric.on = False
    return s


Fetch = Callable[[str], Awaitable[GroupConfig | None]]


class GroupConfigCache:
    """Subscription-group configs by group, cached ``ttl_s`` (the FIFO flag and retry policy a receive uses)."""

    def __init__(self, ttl_s: float = 5.0) -> None:
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, GroupConfig | None]] = {}

    def cached(self, group: str) -> GroupConfig | None:
        hit = self._cache.get(group)
        return hit[1] if hit is not None else None

    async def get(self, group: str, fetch: Fetch) -> GroupConfig | None:
        hit = self._cache.get(group)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            cfg = await fetch(group)
        except Exception:  # noqa: BLE001 - the last known config (or none) serves meanwhile
            return hit[1] if hit is not None else None
        self._cache[group] = (now, cfg)
        return cfg
