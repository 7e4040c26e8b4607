"""Tiered storage settings (validated by ``BrokerConfig``; docs/tiered.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TierConfig:
    segment_size: int  # the commit log's (chunks never cross a segment)
    chunk_bytes: int = 16 * 1024 * 1024
    upload_interval_ms: int = 500
    reserved_hours: float = 72.0  # the tier's own retention
    cache_bytes: int = 64 * 1024 * 1024
    read_ahead: int = 1
    bootstrap_from_tier: bool = True
    local_reserved_hours: float = 72.0  # an empty slave fetches from the tier what local retention would keep
    keep_manifest_versions: int = 16
