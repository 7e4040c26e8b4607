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
from tests.support import ClientRun, Cluster, rpc, wait_for
from tests.tier_support import backend_of, tier_conf

pytestmark = pytest.mark.skipif(not os.environ.get("ROCKETMQ_CLIENT_PYTHON"), reason="real client venv not set")

SEGMENT = 64 * 1024
SMALL_SEGMENTS = {"mappedFileSizeCommitLog": SEGMENT, "tieredChunkSize": SEGMENT, "tieredUploadInterval": 100,
                  "cleanResourceInterval": 200, "diskSpaceCleanForciblyRatio": 0.000001,
                  "autoCreateTopicEnable": "true"}  # fmt: skip
# diskSpaceCleanForciblyRatio near 0: space pressure expires local segments at once, but only those in the tier


def latest_manifest(backend: Any) -> Manifest:
    names = backend.list(MANIFEST_PREFIX)
    return Manifest.decode(backend.get(names[-1])) if names else Manifest()


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
            for i in range(400):
                body = got[f"key-{i}"]["body"]
                assert body.startswith(f"body-{i}-é✓") and len(body.encode()) == 1000

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
            status = orjson.loads(rpc(cluster.broker_addr(), 28).body)
            assert status  # the broker answers runtime info with the tier attached
        finally:
            cluster.stop()
