"""Chaos runs on the HA deployment (``ha-2c``: the controller group, which is also the name-server cluster, and
two containers in the cross layout of conf/container/2c-1m1s; controller mode, allAckInSyncStateSet, SYNC
replication). Network faults need network namespaces (root): without them the short run uses kills and pauses
only. The long run is opt-in (``-m slow``); docs/chaos.md quotes its report (docs/chaos-runs/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos.checked import run_checked
from tests.chaos.harness import realclient
from tests.chaos.harness.delayer import iptables
from tests.chaos.harness.nemesis import Fault
from tests.chaos.harness.net import netns_available
from tests.chaos.harness.runner import RunSpec
from tests.chaos.harness.workload import WorkloadSpec

pytestmark = pytest.mark.integration
NETNS = netns_available() is None
DELAY = NETNS and iptables() is not None  # the netns delay queues packets with iptables (NFQUEUE)
TARGETS = {"kill": 2.0, "partition": 5.0, "pause": 5.0, "delay": 5.0}  # p99 unavailability per broker set (s)


def _run(tmp_path: Path, spec: RunSpec) -> dict[str, Any]:
    return run_checked(tmp_path, spec, tail_s=3.0, keep_deploy=True)  # the tail as scripts/chaos.py


def test_ha_2c_survives_a_container_kill_a_pause_an_isolation_and_a_delay(tmp_path: Path) -> None:
    """Kill the container mastering broker-a (it fails over to c1), hang c1 (now master of both sets: both fail
    over to c0), then cut c0 off from every other process (both sets fail over back to c1; the harness still
    reaches c0, whose sends must not be acknowledged), then delay every packet of c1 100 ± 50 ms (NFQUEUE: it
    masters or replicates both sets, so every send takes two delayed round trips). Nothing acknowledged is lost,
    per-queue order holds, no two writable masters, unavailability within the targets. The isolation and the delay
    windows get the sends their checks need from the nemesis's probes (a window without them runs again)."""
    # each fault ~1 s after the previous one's recovery (the nemesis waits until the deployment is ready: a
    # fault never starts before; on a loaded machine it starts later)
    net_faults = [Fault(9.0, "isolate", "c0", 2.5), *([Fault(14.5, "delay", "c1", 2.0)] if DELAY else [])]
    spec = RunSpec(deployment="ha-2c", net="netns" if NETNS else "loopback", flush="ASYNC_FLUSH", seed=7,
                   schedule=[Fault(2.0, "kill", "c0", 1.0), Fault(5.0, "pause", "c1", 2.5),
                             *(net_faults if NETNS else [Fault(9.0, "kill", "c0", 1.0)])],
                   workload=WorkloadSpec(pace_s=0.02, admin_every_s=0.5), targets_s=TARGETS, label="ha-2c-short")
    r = _run(tmp_path, spec)
    checks = r["checks"]
    assert checks["acked_lost"]["acknowledged"] > 1000 and checks["acked_lost"]["lost"] == 0
    assert checks["two_masters"]["epochs"] >= 3  # broker-a failed over twice or more
    assert checks["metadata_lost"]["acknowledged"] >= 10 and checks["queue_order"]["violations"] == 0
    if NETNS:  # while c0 (master of both sets) was cut off, the nemesis drove sends at it until its window had some
        minority = checks["minority_acks"]
        assert minority["minority_sets_checked"] >= 2 and minority["sends_to_minority"] > 0
    if DELAY:  # ... and drove sends at both masters until each set had one acknowledged inside the delay window
        (delay,) = checks["delay_windows"]["windows"]
        assert "overruns=0" in delay["detail"], delay  # the delayer lost no packet notification
        assert all(st["acked"] > 0 and st["p50_ms"] >= 150 for st in delay["sets"].values()), delay


MIXED = ["kill", "pause", "powerloss", "isolate", "cut-ctl", "cut-peers", "oneway", "split", "loss", "delay"]


@pytest.mark.slow
@pytest.mark.skipif(not DELAY, reason="partitions and delays of the HA deployment need network namespaces (root) "
                    "and iptables")
def test_ha_2c_fifty_mixed_faults(tmp_path: Path) -> None:
    """50 cycles of kills, pauses, power losses, partitions (isolation, cut from the controllers, masters cut
    from their slaves, one-way, majority/minority splits), 5 % loss and 100 ± 50 ms delay of containers,
    controllers and the controller leader: the targets of issue 11."""
    spec = RunSpec(deployment="ha-2c", net="netns", flush="ASYNC_FLUSH", seed=50, kinds=MIXED, cycles=50,
                   targets=["container", "container", "container", "controller", "leader"], hold_s=(0.5, 2.5),
                   gap_s=(1.0, 3.0), targets_s=TARGETS, label="ha-2c-mixed",
                   workload=WorkloadSpec(pace_s=0.02, real_client=realclient.available()))
    r = _run(tmp_path, spec)
    assert r["checks"]["acked_lost"]["lost"] == 0 and r["checks"]["minority_acks"]["minority_sets_checked"] > 0
    assert r["checks"]["delay_windows"]["faults"] > 0


def test_ha_2c_with_tiered_storage_loses_nothing_and_keeps_the_tier_consistent(tmp_path: Path) -> None:
    """Tiered storage on (POSIX tier, 64 KiB segments and chunks, so uploads run through the whole run): kill the
    container mastering broker-a, then hang the other one. Nothing acknowledged is lost, and afterwards each set's
    tier is contiguous and byte-identical to its replicas' logs (no chunk written by a deposed master, none past
    what a replica holds)."""
    tier = {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix",
            "tieredStoreFilePath": str(tmp_path / "tier"), "mappedFileSizeCommitLog": 65536,
            "tieredChunkSize": 65536, "tieredUploadInterval": 100}  # fmt: skip
    spec = RunSpec(deployment="ha-2c", net="netns" if NETNS else "loopback", flush="ASYNC_FLUSH", seed=11,
                   schedule=[Fault(2.0, "kill", "c0", 1.0), Fault(5.0, "pause", "c1", 2.5)],
                   workload=WorkloadSpec(pace_s=0.01), broker_extra=tier, label="ha-2c-tiered")  # fmt: skip
    r = _run(tmp_path, spec)
    checks = r["checks"]
    assert checks["acked_lost"]["acknowledged"] > 1000 and checks["acked_lost"]["lost"] == 0
    tc = checks["tier_consistent"]
    assert tc["ok"], tc["problems"]
    assert all(st["chunks"] >= 3 and st["epoch"] >= 2 for st in tc["sets"].values()), tc["sets"]
