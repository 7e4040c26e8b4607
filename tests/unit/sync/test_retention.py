"""No metadata change record is lost to local expiry (issue 27), on real stores without sockets.

* The store's expiry stops where its retention guard says (and holds everything when the guard fails).
* A master whose oldest segments hold change records no snapshot covers writes a snapshot before a forced clean
  deletes them: the store alone (snapshot + records after it) still rebuilds the live image; a broker with no role
  (stopped sync) keeps those segments instead. A following slave does the same with the image it applied.
* Records that expired locally with no snapshot covering them (a store tiered before this rule) are read through
  the tier the store names, on POSIX and S3: the export and the compaction job rebuild the live image from the
  store plus its tier, and fail clearly without the tier.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from brokerd.message import MessageInner
from brokerd.metadata import BrokerMetadata
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import TopicConfig
from brokerd.remoting.client import RemotingClient
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore
from brokerd.sync.export import ExportReader, RecordsExpired, export_store, read_store
from brokerd.sync.image import Image, fold, image_from_docs, same_image
from brokerd.sync.journal import MetadataJournal
from brokerd.sync.records import SYNC_TOPICS
from brokerd.sync.retention import NOTHING_UNCOVERED
from brokerd.sync.service import MetadataSync, SyncConfig
from brokerd.sync.snapshot import Snapshot, SnapshotStore
from brokerd.tiered.archive import LOCATOR, read_locator
from brokerd.tiered.config import TierConfig
from brokerd.tiered.service import TieredService
from scripts import compact_metadata as job
from tests.support import until
from tests.tier_support import backend_of, tier_conf

HOST = ("127.0.0.1", 10911)  # port-ok: the host written into records, nothing binds it
SEG = 64 * 1024
PAD = b"p" * 1000  # the messages between the change records: ~60 per segment
HOUR_MS = 3_600_000


def store_cfg(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG,
                       mapped_file_size_consume_queue=20 * 256, max_hash_slot_num=100, max_index_num=400,
                       disk_space_warning_level_ratio=1.0, disk_space_clean_forcibly_ratio=1.0)  # fmt: skip


async def started(root: Path) -> MessageStore:
    store = MessageStore(store_cfg(root), store_host=HOST)
    await store.start()
    return store


def meta_at(root: Path) -> BrokerMetadata:
    m = BrokerMetadata(str(root / "config"), cluster_name="C", broker_name="b")
    m.load()
    return m


def image(m: BrokerMetadata) -> Image:
    return image_from_docs(m.export_sections())


def diff(a: Image, b: Image) -> str:
    out = []
    for kind in a:
        ea, eb = a[kind].entries, b[kind].entries
        out += [f"{kind} {k}: {ea.get(k)} != {eb.get(k)}" for k in sorted(set(ea) | set(eb)) if ea.get(k) != eb.get(k)]
        if a[kind].data_version != b[kind].data_version:
            out.append(f"{kind} dataVersion {a[kind].data_version} != {b[kind].data_version}")
    return "; ".join(out[:5])


def assert_same(a: Image, b: Image) -> None:
    assert same_image(a, b), diff(a, b)


def mutate(rng: random.Random, m: BrokerMetadata) -> None:
    op, topic, group = rng.random(), f"T{rng.randrange(12)}", f"G{rng.randrange(8)}"
    if op < 0.3:
        m.topics.update(TopicConfig(topic, rng.randrange(1, 8), rng.randrange(1, 8), perm=rng.choice([2, 4, 6])))
    elif op < 0.35:
        m.topics.delete(topic)
    elif op < 0.5:
        m.subscriptions.update(SubscriptionGroupConfig(group_name=group, retry_max_times=rng.randrange(1, 20)))
    elif op < 0.9:
        m.offsets.commit_offset("h", group, topic, rng.randrange(4), rng.randrange(10_000))
    else:
        m.delay_offsets.update(rng.randrange(1, 19), rng.randrange(10_000))


def pad(store: MessageStore, n: int) -> None:
    for _ in range(n):
        msg = MessageInner(topic="Pad", queue_id=0, body=PAD, flag=0, properties={}, sys_flag=0,
                           born_timestamp=1_700_000_000_000, born_host=HOST, store_host=HOST)  # fmt: skip
        assert store.append_message(msg).ok


def history(store: MessageStore, meta: BrokerMetadata, journal: MetadataJournal, steps: int, seed: int = 1) -> None:
    """Metadata changes spread over several segments, every change record flushed."""
    rng = random.Random(seed)
    for _ in range(steps):
        mutate(rng, meta)
        journal.flush()
        pad(store, 3)


def pressure(store: MessageStore) -> None:
    """What ``updateBrokerConfig diskSpaceCleanForciblyRatio=0.000001`` does: every clean frees space now."""
    store.apply_live_config(dataclasses.replace(store.cfg, disk_space_clean_forcibly_ratio=0.000001))


def snapshots(root: Path) -> SnapshotStore:
    return SnapshotStore(str(root / "config"))


def initial(root: Path, meta: BrokerMetadata) -> Image:
    """The broker's image before any change record (its built-in topics and groups), saved as the snapshot at
    positions 0 a master writes first."""
    snapshots(root).write(Snapshot(meta.export_sections(), {t: 0 for t in SYNC_TOPICS}, 1))
    return image(meta)


def first_record(store: MessageStore) -> int:
    """Commit-log offset of the store's first change record."""
    entries = [q.entry(0) for t in SYNC_TOPICS if (q := store.queue_store.get(t, 0)) is not None]
    return min(e[0] for e in entries if e is not None)


def master_sync(store: MessageStore, meta: BrokerMetadata) -> MetadataSync:
    return MetadataSync(SyncConfig(flush_interval_ms=10_000, flush_commits=10**9, snapshot_interval_ms=HOUR_MS),
                        store, meta, HOST, RemotingClient(), lambda: None)  # fmt: skip


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, BrokerMetadata, MetadataSync]]:
    store = await started(tmp_path / "m")
    meta = meta_at(tmp_path / "m")
    msync = master_sync(store, meta)
    msync.on_master()
    try:
        yield store, meta, msync
    finally:
        await msync.stop()
        await store.shutdown()


# ------------------------------------------------------------------------------------------- the store's hook


async def test_expiry_stops_where_the_retention_guard_says(tmp_path: Path) -> None:
    store = await started(tmp_path / "s")
    try:
        pad(store, 250)  # four full segments and the active one
        later = time.time_ns() // 1_000_000 + 100 * HOUR_MS
        asked: list[int] = []

        def guard(upto: int) -> int:
            asked.append(upto)
            return SEG + 10

        store.set_retention_guard(guard)
        assert store.clean_expired_files(force=True, now_ms=later) == 1 and store.min_phy_offset == SEG
        assert asked == [4 * SEG]  # it was asked about everything expiry wanted
        store.set_retention_guard(lambda upto: 1 // 0)
        assert store.clean_expired_files(force=True, now_ms=later) == 0 and store.min_phy_offset == SEG
        store.set_retention_guard(lambda upto: upto)
        assert store.clean_expired_files(force=True, now_ms=later) == 3 and store.min_phy_offset == 4 * SEG
    finally:
        await store.shutdown()


# ------------------------------------------------------------------------------------------- master, slave


async def test_a_forced_clean_on_a_master_writes_a_snapshot_first(master: Any) -> None:
    store, meta, msync = master
    root = store.root
    assert msync.journal is not None
    history(store, meta, msync.journal, 150)
    assert not snapshots(root).files() and msync.snapshot_info()["metadataSnapshotLogOffset"] == -1
    oldest = first_record(store)
    assert store.clean_expired_files(force=True) == 0  # nothing old enough, no pressure: nothing asked
    pressure(store)
    assert store.clean_expired_files() > 0
    assert store.min_phy_offset > oldest  # segments holding change records are gone ...
    [path] = snapshots(root).files()  # ... after a snapshot covering them was written
    snap = snapshots(root).latest()
    assert snap is not None and snap.positions == {t: store.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}
    info = msync.snapshot_info()
    assert info["metadataSnapshotLogOffset"] == snap.log_offset == store.dispatched_offset
    assert info["metadataSnapshotTime"] == snap.created_ms and info["metadataSnapshotsWritten"] == 1
    store.clean_expired_files()  # everything left is covered: no other snapshot is needed
    assert msync.snapshot_info()["metadataSnapshotsWritten"] == 1
    history(store, meta, msync.journal, 40, seed=2)  # more changes after it: the store still rebuilds them
    got = read_store(root, tier=None)
    assert got.snapshot == snap and not got.scan.expired
    assert_same(fold(image_from_docs(snap.sections), got.decoded()), image(meta))
    [res] = job.run_local(job.make_plan([str(root)]))
    assert_same(res.image, image(meta))
    assert res.positions == {t: store.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}


async def test_without_a_role_the_segments_holding_uncovered_records_stay(master: Any) -> None:
    store, meta, msync = master
    base = initial(store.root, meta)
    pad(store, 130)  # two segments of messages only: those may go
    history(store, meta, msync.journal, 100)
    await msync.stop()  # no role: no image to snapshot
    floor = msync.keeper.floor()
    assert 2 * SEG <= floor < store.max_phy_offset
    pressure(store)
    store.clean_expired_files()
    assert store.min_phy_offset == floor - floor % SEG  # the segment holding the first record stays
    assert len(snapshots(store.root).files()) == 1
    assert_same(fold(base, read_store(store.root, tier=None).decoded()), image(meta))


async def test_a_following_slave_snapshots_the_image_it_applied(tmp_path: Path) -> None:
    ms, ss = await started(tmp_path / "m"), await started(tmp_path / "s")
    meta, smeta = meta_at(tmp_path / "m"), meta_at(tmp_path / "s")
    ssync = MetadataSync(SyncConfig(), ss, smeta, HOST, RemotingClient(), lambda: None)
    try:
        journal = MetadataJournal(ms, HOST, flush_interval_ms=10_000, flush_commits=10**9)
        meta.hub.journal = journal
        ssync.follower.install(Snapshot(meta.export_sections(), {t: 0 for t in SYNC_TOPICS}))  # joined the master
        ssync.on_slave()  # follows its log from the installed positions
        history(ms, meta, journal, 150)
        while ss.max_phy_offset < ms.max_phy_offset:  # what the HA port does
            view = ms.read_range(ss.max_phy_offset, 1 << 20)
            ss.append_raw(ss.max_phy_offset, bytes(view))
            view.release()
        ends = {t: ms.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}
        await until(lambda: ssync.follower.positions == ends, "the slave applied every record")
        oldest = first_record(ss)
        pressure(ss)
        assert ss.clean_expired_files() > 0 and ss.min_phy_offset > oldest
        snap = snapshots(ss.root).latest()
        assert snap is not None and snap.positions == ends
        assert_same(fold(image_from_docs(snap.sections), read_store(ss.root, tier=None).decoded()), image(meta))
    finally:
        await ssync.stop()
        await ms.shutdown()
        await ss.shutdown()


# ------------------------------------------------------------------------------------------- through the tier


@pytest.fixture(params=["posix", "s3"])
def tier(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # a tool reading an S3 tier takes boto3's credentials
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with tier_conf(request.param, tmp_path) as conf:
        yield conf


async def test_records_expired_before_any_snapshot_are_read_through_the_tier(tmp_path: Path,
                                                                            tier: dict[str, Any]) -> None:
    """The issue's store: tiered, its change records' segments expired with no snapshot covering them (no guard
    here, as before it existed). The tier still holds every byte: export and job read them there."""
    root = tmp_path / "broker-a"
    store = await started(root)
    meta = meta_at(root)
    backend = backend_of(tier, "C", "broker-a")
    svc = TieredService(TierConfig(segment_size=SEG, chunk_bytes=SEG, upload_interval_ms=10), store, backend, HOST)
    try:
        assert read_locator(root) == {"format": 1, **backend.location()} and (root / LOCATOR).is_file()
        base = initial(root, meta)
        journal = MetadataJournal(store, HOST, flush_interval_ms=10_000, flush_commits=10**9)
        meta.hub.journal = journal
        store.append_epoch(1, 0)
        svc.on_master(1, 0)
        history(store, meta, journal, 120)
        pad(store, 70)  # the last change records' segment is sealed too
        await until(lambda: svc.manifest.end >= store.max_phy_offset - store.max_phy_offset % SEG, "segments tiered")
        oldest = first_record(store)
        pressure(store)
        assert store.clean_expired_files() > 0 and store.min_phy_offset > oldest
        with pytest.raises(RecordsExpired, match="from queue offset 0"):
            read_store(root, tier=None)
        got = read_store(root)  # the tier the store names
        assert not got.scan.expired and not got.scan.torn
        assert got.scan.ends == {t: store.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}
        assert_same(fold(base, got.decoded()), image(meta))
        stats, _ = export_store(root, tmp_path / "a.rip81")
        assert ExportReader(tmp_path / "a.rip81").read_all() == got.records and stats.records == len(got.records)
        [res] = job.run_local(job.make_plan([f"broker-a={root}"]))
        assert_same(res.image, image(meta))
        assert res.positions == got.scan.ends
        with pytest.raises(RecordsExpired):
            job.run_local(job.make_plan([str(root)], tier=False))
    finally:
        await svc.stop()
        await store.shutdown()


def test_the_locator_names_no_credentials(tmp_path: Path) -> None:
    from brokerd.tiered.archive import write_locator
    from brokerd.tiered.backend import PosixBackend

    assert write_locator(tmp_path / "store", PosixBackend(tmp_path / "tier")) is True
    assert write_locator(tmp_path / "store", PosixBackend(tmp_path / "tier")) is False  # unchanged: not rewritten
    doc = read_locator(tmp_path / "store")
    assert doc == {"format": 1, "provider": "posix", "path": str((tmp_path / "tier").resolve())}
    assert NOTHING_UNCOVERED > 2**62
