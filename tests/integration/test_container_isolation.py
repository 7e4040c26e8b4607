"""Container isolation: per-broker logs, I/O errors contained to one broker, disk quota per partition share."""

from __future__ import annotations

import pathlib
import subprocess

import orjson
import pytest

from tests.support import VENV_BIN, Cluster, rpc, wait_for

pytestmark = pytest.mark.integration


def send(c: Cluster, i: int, size: int = 1000, topic: str = "T_iso") -> object:
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0", "h": "0"}
    return rpc(c.broker_addr(i), 310, ext, b"z" * size)


def runtime(c: Cluster, i: int) -> dict[str, str]:
    return orjson.loads(rpc(c.broker_addr(i), 28).body)["table"]


def test_isolated_logs_go_to_each_brokers_directory(tmp_path: pathlib.Path) -> None:
    c = Cluster(tmp_path, brokers=2, container_extra={"isolateLogEnable": "true"}).start()
    try:
        assert send(c, 0, topic="T_log").code == 0  # type: ignore[attr-defined]
        logs = tmp_path / "logs"
        a = logs / "DefaultCluster_broker-a_0_rocketmqlogs" / "broker.log"
        b = logs / "DefaultCluster_broker-b_0_rocketmqlogs" / "broker.log"
        wait_for(lambda: a.exists() and b.exists(), 10, "per-broker log files")
        wait_for(lambda: "T_log" in a.read_text(), 10, "broker-a's topic creation in its own log")
        assert "broker_started" in a.read_text() and "store_recovered" in a.read_text()
        assert "T_log" not in b.read_text()
        main = c.daemon.output() if c.daemon else ""
        assert "container_started" in main and "broker=DefaultCluster:broker-a:0" not in main
    finally:
        c.stop()


def test_store_io_error_is_contained_to_one_broker(tmp_path: pathlib.Path) -> None:
    c = Cluster(tmp_path, brokers=2, mappedFileSizeCommitLog=65536).start()
    commitlog = tmp_path / "store" / "broker-b" / "commitlog"
    try:
        assert send(c, 1).code == 0  # type: ignore[attr-defined]
        subprocess.run(["chattr", "+i", str(commitlog)], check=True)  # no new segment can be created now
        codes = {send(c, 1).code for _ in range(80)}  # type: ignore[attr-defined]
        assert codes - {0}, "rolling to a new segment must fail"
        out = subprocess.run([str(VENV_BIN / "mqadmin"), "listBrokers", "-c", f"127.0.0.1:{c.admin_port}"],
                             capture_output=True, text=True, timeout=30).stdout
        line_b = next(ln for ln in out.splitlines() if "broker-b" in ln)
        line_a = next(ln for ln in out.splitlines() if "broker-a" in ln)
        assert "degraded" in line_b and "running" in line_a
        for _ in range(80):  # the other broker keeps taking writes, across segment rolls
            assert send(c, 0).code == 0  # type: ignore[attr-defined]
        assert c.daemon is not None and c.daemon.alive()
    finally:
        subprocess.run(["chattr", "-i", str(commitlog)], check=False)
        c.stop()


QUOTA = {"diskPartitionSizeBytes": 4 * 1024 * 1024, "replicasPerDiskPartition": 2}
SMALL = {"mappedFileSizeConsumeQueue": 20 * 1000, "messageIndexEnable": "false", "cleanResourceInterval": 100,
         "fileReservedTime": 1000}


def test_over_quota_cleans_oldest_segments_first(tmp_path: pathlib.Path) -> None:
    c = Cluster(tmp_path, brokers=2, container_extra=QUOTA, mappedFileSizeCommitLog=256 * 1024, **SMALL).start()
    try:
        for _ in range(300):  # ~3 MiB into a 2 MiB quota (half of a 4 MiB partition)
            send(c, 0, size=10_000)
        wait_for(lambda: int(runtime(c, 0)["commitLogMinOffset"]) > 0, 10, "oldest segments cleaned")
        wait_for(lambda: int(runtime(c, 0)["diskUsageBytes"]) <= 2 * 1024 * 1024, 10, "usage back under quota")
        wait_for(lambda: send(c, 0).code == 0, 10, "broker-a accepting writes")  # type: ignore[attr-defined]
        assert int(runtime(c, 1)["commitLogMinOffset"]) == 0
    finally:
        c.stop()


def test_broker_over_warning_level_refuses_writes(tmp_path: pathlib.Path) -> None:
    # warning at 97 % of the 2 MiB quota, forced cleaning only at 100 %: broker-a fills up and must refuse writes.
    # (The same ratios apply to the real disk, so they sit high enough not to trip on this machine's disk.)
    c = Cluster(tmp_path, brokers=2, container_extra={**QUOTA, "logicalDiskSpaceCleanForciblyThreshold": 1.0},
                mappedFileSizeCommitLog=128 * 1024, diskSpaceWarningLevelRatio=0.97,
                diskSpaceCleanForciblyRatio=0.99, **SMALL).start()
    try:
        assert send(c, 0, size=10_000).code == 0  # type: ignore[attr-defined]
        # each check is a 10 KB send: no pause between them (the broker's clean pass runs every 100 ms)
        wait_for(lambda: send(c, 0, size=10_000).code == 14, 20, "broker-a refusing writes",  # type: ignore[attr-defined]
                 interval=0.0)
        r = send(c, 0)
        assert r.code == 14 and "disk" in (r.remark or "")  # type: ignore[attr-defined]
        assert send(c, 1).code == 0  # type: ignore[attr-defined]
    finally:
        c.stop()
