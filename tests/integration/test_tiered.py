"""Tiered storage with real processes (docs/tiered.md): data gone from local disk is consumed from the tier with the
real client, byte-identical; view by id, query by key and search by timestamp reach the tier too. Each test runs
against a POSIX directory and a local S3-compatible server."""

from __future__ import annotations

import os
import pathlib
import struct
from typing import Any

import orjson
import pytest

from brokerd.tiered.manifest import MANIFEST_PREFIX, Manifest
from tests.integration.test_ha import bodies
from tests.support import ClientRun, Cluster, rpc, wait_for
from tests.tier_support import backend_of, tier_conf

pytestmark = pytest.mark.skipif(not os.environ.get("ROCKETMQ_CLIENT_PYTHON"), reason="real client venv not set")

SEGMENT = 64 * 1024
SMALL_SEGMENTS = {"mappedFileSizeCommitLog": SEGMENT, "tieredChunkSize": SEGMENT, "tieredUploadInterval": 100,
                  "cleanResourceInterval": 200, "autoCreateTopicEnable": "true"}  # fmt: skip
# diskSpaceCleanForciblyRatio near 0 (set at runtime): space pressure expires local segments at once, but only
# those the tier holds
PRESSURE = b"diskSpaceCleanForciblyRatio=0.000001"


def latest_manifest(backend: Any) -> Manifest:
    names = backend.list(MANIFEST_PREFIX)
    return Manifest.decode(backend.get(names[-1])) if names else Manifest()


def scrape(cluster: Cluster) -> dict[str, float]:
    """broker-a's series on the container's /metrics (its port from the boot line)."""
    import re
    import urllib.request

    assert cluster.daemon is not None
    m = wait_for(lambda: re.search(r"metrics port (\d+)", cluster.daemon.output()), 30, "the boot line")  # type: ignore[union-attr]
    text = urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics", timeout=10).read().decode()
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("rocketmq_tiered") and "broker-a" in line}  # fmt: skip


def local_segments(store: pathlib.Path) -> list[int]:
    return sorted(int(p.name) for p in (store / "commitlog").iterdir() if p.name.isdigit())


@pytest.mark.parametrize("kind", ["posix", "s3"])
def test_old_data_is_consumed_from_the_tier_byte_identical(tmp_path: pathlib.Path, kind: str) -> None:
    with tier_conf(kind, tmp_path) as tier:
        cluster = Cluster(tmp_path, 1, **SMALL_SEGMENTS, **tier).start()
        try:
            env = cluster.client_env(TOPIC="TierTopic", GROUP="tier_g", COUNT=400, BODY_SIZE=1000)
            rc, rows = ClientRun("produce", env, tmp_path / "p").wait(120)
            sent = [r for r in rows if "sent" in r and r.get("status") == "OK"]
            assert rc == 0 and len(sent) == 400
            backend = backend_of(tier, "DefaultCluster", "broker-a")
            store = tmp_path / "store" / "broker-a"
            assert rpc(cluster.broker_addr(), 25, body=PRESSURE).code == 0
            # the tier holds every sealed segment, and those left the local disk
            wait_for(lambda: latest_manifest(backend).end >= SEGMENT * 5 and local_segments(store)[0] >= SEGMENT * 5,
                     60, "segments uploaded and expired locally")  # fmt: skip
            m = latest_manifest(backend)
            assert m.min_offset == 0 and all(a.end == b.start for a, b in zip(m.chunks, m.chunks[1:], strict=False))

            # a new group from the first offset: everything, including what only the tier holds, byte-identical
            env = cluster.client_env(TOPIC="TierTopic", GROUP="tier_reader", COUNT=400, TIMEOUT=90)
            rc, rows = ClientRun("push", env, tmp_path / "c").wait(120)
            got = {r["recv"]["keys"]: r["recv"] for r in rows if "recv" in r}
            assert len(got) == 400, f"consumed {len(got)} of 400"
            for i in range(400):  # the bodies the producer sent, exactly (tests/clients/rmq_client.py pads them)
                sent_body = f"body-{i}-é✓"
                assert got[f"key-{i}"]["body"] == sent_body + "x" * (1000 - len(sent_body.encode()))

            # query by key and view by id of a record the local disk no longer has: answered from the tier
            q = rpc(cluster.broker_addr(), 12, {"topic": "TierTopic", "key": "key-1", "maxNum": "4",
                                                "beginTimestamp": "0", "endTimestamp": str(2**62)})  # fmt: skip
            assert q.code == 0 and b"key-1" in q.body
            size, phys = struct.unpack_from(">i", q.body, 0)[0], struct.unpack_from(">q", q.body, 28)[0]
            assert phys < local_segments(store)[0]
            view = rpc(cluster.broker_addr(), 33, {"offset": str(phys)})
            assert view.code == 0 and view.body == q.body[:size]
            ts = rpc(cluster.broker_addr(), 29, {"topic": "TierTopic", "queueId": "0", "timestamp": "0"})
            assert ts.code == 0 and int(ts.ext["offset"]) == 0
            metrics = scrape(cluster)  # the tier's progress and reads on /metrics
            assert metrics["rocketmq_tiered_end_offset"] == latest_manifest(backend).end
            assert metrics["rocketmq_tiered_read_fetches_total"] > 0 and metrics["rocketmq_tiered_fenced"] == 0
            status = orjson.loads(rpc(cluster.broker_addr(), 28).body)
            assert status  # the broker answers runtime info with the tier attached
        finally:
            cluster.stop()


def runtime(addr: str) -> dict[str, str]:
    table: dict[str, str] = orjson.loads(rpc(addr, 28).body)["table"]
    return table


def segment_bytes(store: pathlib.Path, start: int, end: int) -> bytes:
    """Bytes [start, end) of a broker's local commit log, read from its segment file (one segment)."""
    base = start - start % SEGMENT
    with open(store / "commitlog" / f"{base:020d}", "rb") as f:
        f.seek(start - base)
        return f.read(end - start)


@pytest.mark.parametrize("kind", ["posix", "s3"])
def test_failover_resume_fencing_and_empty_slave_bootstrap(tmp_path: pathlib.Path, kind: str) -> None:
    """One broker set on two containers with a controller group: the master uploads; SIGKILLed mid-upload, its
    slave is elected, claims the tier with its epoch and resumes at the breakpoint (no gap, no duplicate, the tier
    equals the new master's log byte for byte); the old master returns as a slave and never writes the tier; its
    disk wiped, it bootstraps from the tier (not from the master) and serves the whole range."""
    from tests.ha_cluster import HACluster

    send = {"a": "pg", "b": "T_tier", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}
    with tier_conf(kind, tmp_path) as tier:
        extra = {**SMALL_SEGMENTS, **tier}
        cl = HACluster(tmp_path, containers=2, replicas=2, sets=1, broker_extra=extra)
        try:
            cl.start()
            old = cl.master_of("broker-a")
            assert old is not None
            body = b"y" * 900
            for i in range(300):
                assert rpc(old, 310, {**send, "e": str(i % 4)}, body + b"%05d" % i).code == 0
            backend = backend_of(tier, "DefaultCluster", "broker-a")
            wait_for(lambda: latest_manifest(backend).end >= 3 * SEGMENT, 30, "the master's uploads")
            slave = next(cl.broker_addr("broker-a", c) for c in range(2) if cl.broker_addr("broker-a", c) != old)
            wait_for(lambda: int(runtime(slave)["tieredEnd"]) >= 3 * SEGMENT, 30,
                     "the slave knows the tier's progress from its replicated log")  # fmt: skip
            for i in range(300, 400):  # more to upload: the kill lands while uploads go on
                assert rpc(old, 310, {**send, "e": str(i % 4)}, body + b"%05d" % i).code == 0
            old_c = cl.container_of(old)
            cl.kill_container(old_c)
            new = cl.wait_master("broker-a", not_addr=old, timeout=30)
            before = latest_manifest(backend)
            wait_for(lambda: latest_manifest(backend).epoch > before.epoch or latest_manifest(backend).epoch
                     == int(runtime(new)["masterEpoch"]), 30, "the new master's claim")  # fmt: skip
            for i in range(400, 700):
                assert rpc(new, 310, {**send, "e": str(i % 4)}, body + b"%05d" % i).code == 0
            wait_for(lambda: latest_manifest(backend).end >= 9 * SEGMENT, 30, "the new master's uploads")
            new_store = tmp_path / f"c{cl.container_of(new)}" / "broker-a"
            m = latest_manifest(backend)
            assert m.min_offset == 0 and all(a.end == b.start for a, b in zip(m.chunks, m.chunks[1:], strict=False))
            for c in m.chunks:
                assert backend.get(c.name) == segment_bytes(new_store, c.start, c.end), c.name
            claim_version = min(v.version for v in map(Manifest.decode, (backend.get(n) for n in
                                backend.list(MANIFEST_PREFIX))) if v.epoch == m.epoch)  # fmt: skip

            # the old master comes back: a slave now, it never writes the tier
            cl.start_container(old_c)
            wait_for(lambda: runtime(old).get("brokerRole") == "SLAVE", 60, "the old master rejoined as a slave")
            for i in range(700, 800):
                assert rpc(new, 310, {**send, "e": str(i % 4)}, body + b"%05d" % i).code == 0
            wait_for(lambda: int(runtime(old)["tieredEnd"]) == latest_manifest(backend).end, 30, "slave follows")
            versions = [Manifest.decode(backend.get(n)) for n in backend.list(MANIFEST_PREFIX)]
            assert all(v.epoch == m.epoch for v in versions if v.version >= claim_version)
            assert runtime(old)["tieredUploadedBytes"] == "0"

            # its disk wiped, it bootstraps from the tier and replicates only the rest from the master
            cl.kill_container(old_c)
            import shutil

            shutil.rmtree(tmp_path / f"c{old_c}" / "broker-a")
            tier_end = latest_manifest(backend).end
            cl.start_container(old_c)
            wait_for(lambda: runtime(old).get("commitLogMaxOffset") == runtime(new).get("commitLogMaxOffset"), 60,
                     "the wiped slave caught up")  # fmt: skip
            assert int(runtime(old)["tieredBootstrappedBytes"]) >= tier_end
            for q in range(4):
                assert bodies(old, "T_tier", q) == bodies(new, "T_tier", q)
            assert sum(len(bodies(old, "T_tier", q)) for q in range(4)) == 800
        finally:
            cl.stop()
