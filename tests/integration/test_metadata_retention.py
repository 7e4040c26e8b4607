"""No metadata change record lost to local expiry (issue 27), with real processes: the 2-container HA deployment
with tiering on (POSIX tier, 64 KiB segments and chunks) and incremental metadata sync. Metadata changes and
messages on broker-a's master, a failover (the slave takes over; its only snapshot is the one it installed from
its master when it joined, empty), more changes, then forced cleans on the new master (``updateBrokerConfig
diskSpaceCleanForciblyRatio=0.000001`` and TRIGGER_DELETE_FILES, as a full disk would do):

* each clean first writes a snapshot covering the change records in the segments it deletes, and the compaction
  job (``scripts/compact_metadata.py``, its tasks without Spark) on the new master's store gives the live image
  (the topic, group, consumer-offset and delay-offset tables as the broker serves them, DataVersions included);
* with the latest snapshot gone (an older one left), the records after it are only in the tier: the job reads
  them there and gives the live image again; without the tier (``--no-tier``) it stops: records expired.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import RemotingCommand, request
from brokerd.sync.image import SECTIONS, Image, image_from_docs
from brokerd.sync.snapshot import Snapshot, SnapshotStore
from scripts import compact_metadata as job
from tests.ha_cluster import HACluster
from tests.support import wait_for

pytestmark = pytest.mark.integration
ROOT = pathlib.Path(__file__).resolve().parents[2]
SEG = 64 * 1024
BODY = b"m" * 1000  # ~60 messages per segment


def call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    async def go() -> RemotingCommand:
        cli = RemotingClient()
        try:
            return await cli.invoke(addr, request(code, ext or {}, body), 10.0)
        finally:
            await cli.close()

    return asyncio.run(go())


def runtime(addr: str) -> dict[str, str]:
    r = call(addr, 28)
    return dict(orjson.loads(r.body or b"{}")["table"]) if r.code == 0 else {}


LIVE = (("topics", 21), ("subscriptionGroups", 201), ("consumerOffsets", 43), ("delayOffsets", 45))
COMPARED = tuple(SECTIONS[section][0] for section, _ in LIVE)


def live_image(addr: str) -> Image:
    """The broker's tables as it serves them (GET_ALL_TOPIC_CONFIG, ..._SUBSCRIPTIONGROUP, ..._CONSUMER_OFFSET,
    ..._DELAY_OFFSET); images are compared on these tables (``COMPARED``)."""
    return image_from_docs({section: orjson.loads(call(addr, code).body or b"{}") for section, code in LIVE})


def changes(addr: str, tag: str, n: int) -> None:
    """Topics and groups created (answered once replicated), consumer offsets committed, one of each deleted."""
    async def go() -> None:
        cli = RemotingClient()
        try:
            for i in range(n):
                ext = {"topic": f"{tag}T{i}", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
                assert (await cli.invoke(addr, request(17, ext), 10.0)).code == 0
                body = orjson.dumps({"groupName": f"{tag}G{i}", "retryMaxTimes": i})
                assert (await cli.invoke(addr, request(200, {}, body), 10.0)).code == 0
                for q in range(4):
                    ext = {"consumerGroup": f"{tag}G{i}", "topic": f"{tag}T{i}", "queueId": str(q),
                           "commitOffset": str(100 * i + q)}  # fmt: skip
                    assert (await cli.invoke(addr, request(15, ext), 10.0)).code == 0
            assert (await cli.invoke(addr, request(215, {"topic": f"{tag}T0"}), 10.0)).code == 0
            assert (await cli.invoke(addr, request(207, {"groupName": f"{tag}G0"}), 10.0)).code == 0
        finally:
            await cli.close()

    asyncio.run(go())


def messages(addr: str, n: int) -> None:
    """``n`` acknowledged sends of 1 KB (the segments fill and roll), 32 in flight."""
    async def go() -> None:
        cli = RemotingClient()
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            ext = {"a": "RetentionPG", "b": "RetentionPad", "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0",
                   "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}  # fmt: skip
            async with sem:
                r = await cli.invoke(addr, request(310, ext, BODY), 10.0)
                assert r.code == 0, r.remark

        try:
            ext = {"topic": "RetentionPad", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
            assert (await cli.invoke(addr, request(17, ext), 10.0)).code == 0
            await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await cli.close()

    asyncio.run(go())


def forced_clean(addr: str) -> int:
    """Disk pressure as a full disk would make it, then TRIGGER_DELETE_FILES; returns the segments deleted."""
    assert call(addr, 25, body=b"diskSpaceCleanForciblyRatio=0.000001\n").code == 0
    r = call(addr, 27)
    assert r.code == 0, r.remark
    return int((r.remark or "removed 0").split()[1])


def tiered_up_to_sealed(addr: str) -> bool:
    rt = runtime(addr)
    end = int(rt["commitLogMaxOffset"])
    return int(rt["tieredEnd"]) >= end - end % SEG


def compact(store: pathlib.Path, out: pathlib.Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "compact_metadata.py"), "--no-spark", "--out",
                           str(out), *extra, f"broker-a={store}"], capture_output=True, text=True, timeout=120)  # fmt: skip


def job_image(store: pathlib.Path) -> Image:
    [res] = job.run_local(job.make_plan([f"broker-a={store}"]))
    return res.image


def same(a: Image, b: Image) -> bool:
    return all(a[k].entries == b[k].entries and a[k].data_version == b[k].data_version for k in COMPARED)


def diff(a: Image, b: Image) -> str:
    out = []
    for kind in COMPARED:
        ea, eb = a[kind].entries, b[kind].entries
        out += [f"{kind} {k}: {ea.get(k)} != {eb.get(k)}" for k in sorted(set(ea) | set(eb)) if ea.get(k) != eb.get(k)]
        if a[kind].data_version != b[kind].data_version:
            out.append(f"{kind} dataVersion {a[kind].data_version} != {b[kind].data_version}")
    return "; ".join(out[:5])


def assert_same(a: Image, b: Image) -> None:
    assert same(a, b), diff(a, b)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Any:
    extra = {"allowMetadataIncrementalSync": "true", "metadataSnapshotInterval": 3_600_000,
             "tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix",
             "tieredStoreFilePath": str(tmp_path / "tier"), "mappedFileSizeCommitLog": SEG,
             "tieredChunkSize": SEG, "tieredUploadInterval": 50}  # fmt: skip
    cl = HACluster(tmp_path, containers=2, replicas=2, sets=1, broker_extra=extra)
    try:
        yield cl.start()
    finally:
        cl.stop()


def test_forced_cleans_after_a_failover_keep_the_store_plus_its_tier_enough(cluster: HACluster,
                                                                             tmp_path: pathlib.Path) -> None:
    cl = cluster
    first = cl.master_of("broker-a")
    assert first is not None
    cl.wait_in_sync("broker-a", 2)
    changes(first, "A", 8)
    messages(first, 150)
    cl.kill_container(cl.container_of(first))  # the slave, which never wrote a snapshot, takes over
    new = cl.wait_master("broker-a", not_addr=first, timeout=30)
    store = cl.tmp / f"c{cl.container_of(new)}" / "broker-a"
    snapshots = SnapshotStore(str(store / "config"))
    joined = snapshots.files()  # at most the one it installed from its master when it joined, empty

    changes(new, "B", 8)
    messages(new, 250)
    wait_for(lambda: tiered_up_to_sealed(new), 20, "the sealed segments in the tier")
    assert forced_clean(new) > 0
    rt = runtime(new)
    assert int(rt["commitLogMinOffset"]) > 0 and int(rt["metadataSnapshotLogOffset"]) > 0
    older = snapshots.files()[-1]  # written before the segments went, covering the records they held
    assert older not in joined

    changes(new, "C", 8)
    messages(new, 250)
    wait_for(lambda: tiered_up_to_sealed(new), 20, "the sealed segments in the tier")
    assert forced_clean(new) > 0
    latest = snapshots.files()[-1]
    assert latest != older and int(runtime(new)["metadataSnapshotLogOffset"]) > int(rt["metadataSnapshotLogOffset"])

    live = live_image(new)  # offsets reach their records within the flush interval: wait for the job to see them
    seen: list[Image] = []

    def job_sees_it() -> bool:
        seen.append(job_image(store))
        return same(seen[-1], live)

    try:
        wait_for(job_sees_it, 15, "the job's image equal to the live image")
    finally:
        assert seen and same(seen[-1], live), diff(seen[-1], live)
    proc = compact(store, tmp_path / "out1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [out] = json.loads(proc.stdout)["outputs"]
    assert_same(image_from_docs(Snapshot.decode(pathlib.Path(out["snapshot"]).read_bytes()).sections), live)

    # the latest snapshot lost: the records after the older one are in segments deleted by the second clean
    latest.unlink()
    proc = compact(store, tmp_path / "out2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [out] = json.loads(proc.stdout)["outputs"]
    assert_same(image_from_docs(Snapshot.decode(pathlib.Path(out["snapshot"]).read_bytes()).sections), live)
    proc = compact(store, tmp_path / "out3", "--no-tier")
    assert proc.returncode == 2 and "expired" in proc.stderr, proc.stderr[-3000:]
