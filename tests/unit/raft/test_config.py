"""RaftConfig validation: an invalid value raises ValueError naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from controller.raft.config import RaftConfig

PEERS = {"n1": "127.0.0.1:7001", "n2": "127.0.0.1:7002", "n3": "127.0.0.1:7003"}  # port-ok: data, nothing binds it


def cfg(**kw: Any) -> RaftConfig:
    base: dict[str, Any] = dict(group="g", self_id="n1", peers=PEERS, data_dir="/tmp/x")
    base.update(kw)
    return RaftConfig(**base)


def test_defaults_convert_to_ticks() -> None:
    c = cfg()
    core = c.core_config()
    assert (core.election_ticks, core.heartbeat_ticks, core.lease_ticks) == (10, 2, 8)
    assert core.peer_ids == ("n1", "n2", "n3") and core.quorum == 2


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"self_id": "n9"}, "self_id"),
        ({"peers": {"n1": "nohostport"}}, "peers"),
        ({"tick_ms": 0}, "tick_ms"),
        ({"heartbeat_interval_ms": 10}, "heartbeat_interval_ms"),
        ({"election_timeout_ms": 100}, "election_timeout_ms"),
        ({"lease_ratio": 1.0}, "lease_ratio"),
        ({"max_batch_entries": 0}, "max_batch_entries"),
        ({"max_follower_lag_entries": -1}, "max_follower_lag_entries"),
        ({"group": ""}, "group"),
    ],
)
def test_invalid_values_name_the_key(changes: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        cfg(**changes)
