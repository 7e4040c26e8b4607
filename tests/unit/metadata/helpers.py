"""Shared helpers for the metadata unit tests (deterministic clock, hub and broker factories)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from brokerd.metadata import BrokerMetadata, MetadataHub


def fake_clock(start: int = 1_700_000_000_000) -> Callable[[], int]:
    """Deterministic ms clock: +1 ms per read."""
    counter = itertools.count(start)
    return lambda: next(counter)


def make_hub(stream_id: str = "master-1") -> MetadataHub:
    return MetadataHub(stream_id=stream_id, clock_ms=fake_clock())


def make_broker(config_dir: str | Path, *, stream_id: str = "master-1", **kwargs: Any) -> BrokerMetadata:
    bm = BrokerMetadata(str(config_dir), cluster_name="DefaultCluster", broker_name="broker-a",
                        hub=make_hub(stream_id), **kwargs)
    bm.load()
    return bm
