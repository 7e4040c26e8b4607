"""Chaos runs against real processes (docs/chaos.md). The short ones run in the default suite (about 50 s in
all); the long ones are opt-in (``-m slow``). Each run writes its report under the test's temp dir (printed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos.checked import run_checked
from tests.chaos.harness.net import netns_available
from tests.chaos.harness.runner import RunSpec
from tests.chaos.harness.workload import WorkloadSpec

pytestmark = pytest.mark.integration
NET = "netns" if netns_available() is None else "proxy"  # network faults: namespaces as root, else the proxy


def _run(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return run_checked(tmp_path, RunSpec(**kw), tail_s=1.5)


FAST = {"hold_s": (0.4, 0.8), "gap_s": (0.5, 1.0), "workload": WorkloadSpec(admin_every_s=0.5)}


def test_sigkill_under_load_with_sync_flush_loses_no_acknowledged_message(tmp_path: Path) -> None:
    r = _run(tmp_path, deployment="single", flush="SYNC_FLUSH", kinds=["kill"], cycles=2, **FAST)
    assert r["checks"]["acked_lost"]["acknowledged"] > 500
    assert r["checks"]["metadata_lost"]["acknowledged"] >= 4


def test_power_loss_with_async_flush_reports_what_it_lost(tmp_path: Path) -> None:
    r = _run(tmp_path, deployment="single", flush="ASYNC_FLUSH", kinds=["powerloss"], cycles=1, **FAST)
    lost = r["checks"]["acked_lost"]
    print(f"ASYNC_FLUSH power loss: {lost['lost_allowed_async']} of {lost['acknowledged']} acknowledged lost, "
          f"ages {lost['allowed_window_s']} s, restores {r['power_loss_restores']}")
    assert lost["lost"] == 0 and lost["allowed_within_flush_interval"]
    assert r["power_loss_restores"][0]["bytes_zeroed"] > 0  # the layer dropped unsynced data


def test_power_loss_with_sync_flush_loses_nothing_acknowledged(tmp_path: Path) -> None:
    r = _run(tmp_path, deployment="single", flush="SYNC_FLUSH", kinds=["powerloss"], cycles=2, **FAST)
    assert r["checks"]["acked_lost"]["lost"] == 0 and r["checks"]["acked_lost"]["acknowledged"] > 300
    assert r["checks"]["metadata_lost"]["acknowledged"] >= 4 and r["checks"]["corrupt"]["count"] == 0


@pytest.mark.skipif(NET != "netns", reason="the disk-full fault mounts a tmpfs (root)")
def test_a_full_disk_refuses_writes_and_the_container_lives_on(tmp_path: Path) -> None:
    """The store's filesystem is filled under load: sends are refused while it is full, nothing acknowledged is
    lost, the container never exits (consume-queue and index files are sparse: SIGBUS here killed it once)."""
    r = _run(tmp_path, deployment="single", net=NET, flush="SYNC_FLUSH", kinds=["diskfull"], cycles=2, tmpfs_mb=128,
             **FAST)  # fmt: skip
    assert r["checks"]["processes"]["unexpected_exits"] == 0
    assert r["checks"]["acked_lost"]["lost"] == 0 and r["checks"]["acked_lost"]["acknowledged"] > 300


def test_controller_leader_killed_paused_and_partitioned_stays_linearizable(tmp_path: Path) -> None:
    r = _run(tmp_path, deployment="controller", net=NET, kinds=["kill", "pause", "isolate"], cycles=3,
             targets=["leader"], **FAST)
    lin = r["checks"]["linearizable"]
    assert lin["ops"] > 300 and lin["verdict"] == "linearizable"
    assert sorted(f["kind"] for f in r["history"]["faults"]) == ["isolate", "kill", "pause"]


# ---------------------------------------------------------------------------------------------- long runs

LONG = {"hold_s": (0.5, 2.0), "gap_s": (1.0, 3.0)}


@pytest.mark.slow
def test_twenty_power_losses_with_sync_flush(tmp_path: Path) -> None:
    r = _run(tmp_path, deployment="single", flush="SYNC_FLUSH", kinds=["powerloss"], cycles=20,
             hold_s=(0.3, 0.8), gap_s=(0.5, 1.5), seed=11)
    assert r["checks"]["acked_lost"]["lost"] == 0


@pytest.mark.slow
def test_twenty_power_losses_with_async_flush_stay_within_the_flush_interval(tmp_path: Path) -> None:
    r = _run(tmp_path, deployment="single", flush="ASYNC_FLUSH", kinds=["powerloss"], cycles=20,
             hold_s=(0.3, 0.8), gap_s=(0.5, 1.5), seed=12)
    assert r["checks"]["acked_lost"]["allowed_within_flush_interval"]


@pytest.mark.slow
def test_single_container_mixed_faults(tmp_path: Path) -> None:
    kinds = ["kill", "pause", "powerloss", "isolate"] + (["diskfull"] if NET == "netns" else [])
    _run(tmp_path, deployment="single", net=NET, flush="SYNC_FLUSH", kinds=kinds, cycles=15, seed=13,
         tmpfs_mb=256 if NET == "netns" else 0, workload=WorkloadSpec(real_client=True), **LONG)


@pytest.mark.slow
def test_controller_mixed_faults_many_cycles(tmp_path: Path) -> None:
    _run(tmp_path, deployment="controller", net=NET, kinds=["kill", "pause", "isolate", "split", "oneway", "powerloss"],
         targets=["leader", "controller"], cycles=24, seed=14, **LONG)


@pytest.mark.slow
def test_controller_delay_and_loss_through_the_proxy(tmp_path: Path) -> None:
    _run(tmp_path, deployment="controller", net="proxy", kinds=["slow", "split", "oneway", "kill"],
         targets=["leader", "controller"], cycles=12, seed=15, **LONG)
