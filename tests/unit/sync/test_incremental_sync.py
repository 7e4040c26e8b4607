"""Incremental metadata sync (RIP-81) without sockets: a master's metadata with the journal writing change records
into a real store, its log replicated into a slave's store byte for byte, the slave following it.

Random mutation histories: the slave's image equals the master's after every step that flushed, the pure fold of
the records equals both, and a snapshot plus the records after it equals the whole history — also a snapshot
encoded in steps (as the loop writes it) while the master keeps changing between the steps.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from brokerd.message import decode_records
from brokerd.metadata import BrokerMetadata
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import TopicConfig
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore
from brokerd.sync import snapshot as snapshot_module
from brokerd.sync.follower import MetadataFollower
from brokerd.sync.image import empty_image, fold, image_from_docs, same_image
from brokerd.sync.journal import JournalError, MetadataJournal
from brokerd.sync.records import SYNC_TOPICS, SyncRecord
from brokerd.sync.snapshot import ENTRIES_PER_STEP, Snapshot, encode_steps

HOST = ("127.0.0.1", 10911)  # port-ok: the host written into records, nothing binds it


def store_cfg(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20, max_hash_slot_num=1000,
                       max_index_num=4000, disk_space_warning_level_ratio=1.0, disk_space_clean_forcibly_ratio=1.0)


def meta_at(root: Path) -> BrokerMetadata:
    m = BrokerMetadata(str(root / "config"), cluster_name="C", broker_name="b")
    m.load()
    return m


def replicate(master: MessageStore, slave: MessageStore) -> None:
    """Copy the master's new log bytes into the slave (what the HA port does)."""
    while slave.max_phy_offset < master.max_phy_offset:
        chunk = bytes(master.read_range(slave.max_phy_offset, 64 << 10))
        slave.append_raw(slave.max_phy_offset, chunk)


def image(m: BrokerMetadata) -> Any:
    return image_from_docs(m.export_sections())


def diff(a: Any, b: Any) -> str:
    out = []
    for kind in a:
        ea, eb = a[kind].entries, b[kind].entries
        for k in sorted(set(ea) | set(eb)):
            if ea.get(k) != eb.get(k):
                out.append(f"{kind} {k}: {ea.get(k)} != {eb.get(k)}")
        if a[kind].data_version != b[kind].data_version:
            out.append(f"{kind} dataVersion {a[kind].data_version} != {b[kind].data_version}")
    return "; ".join(out[:5])


def records_of(store: MessageStore, positions: dict[str, int] | None = None) -> list[SyncRecord]:
    """Every change record of the log after ``positions``, in log order (across the four topics)."""
    out: list[SyncRecord] = []
    for topic in SYNC_TOPICS:
        offset = (positions or {}).get(topic, 0)
        while True:
            res = store.get_message(topic, 0, offset, 256, 1 << 24)
            if not res.buffers:
                break
            for buf in res.buffers:
                out += [SyncRecord.decode(m.body, m.commit_log_offset) for m in decode_records(bytes(buf))]
            offset = res.next_begin_offset
    return sorted(out, key=lambda r: r.log_offset)


def mutate(rng: random.Random, m: BrokerMetadata) -> None:
    op = rng.random()
    topic = f"T{rng.randrange(12)}"
    group = f"G{rng.randrange(8)}"
    if op < 0.25:
        m.topics.update(TopicConfig(topic, rng.randrange(1, 8), rng.randrange(1, 8), perm=rng.choice([2, 4, 6])))
    elif op < 0.32:
        m.topics.delete(topic)
    elif op < 0.45:
        m.subscriptions.update(SubscriptionGroupConfig(group_name=group, retry_max_times=rng.randrange(1, 20)))
    elif op < 0.5:
        m.subscriptions.delete(group)
    elif op < 0.9:
        m.offsets.commit_offset("h", group, topic, rng.randrange(4), rng.randrange(10_000))
    elif op < 0.95:
        m.offsets.remove(group, topic)
    else:
        m.delay_offsets.update(rng.randrange(1, 19), rng.randrange(10_000))


@pytest.mark.parametrize("seed", range(12))
async def test_the_slave_follows_every_mutation_history(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ms, ss = MessageStore(store_cfg(tmp_path / "m"), store_host=HOST), MessageStore(store_cfg(tmp_path / "s"),
                                                                                      store_host=HOST)  # fmt: skip
    await ms.start()
    await ss.start()
    try:
        master, slave = meta_at(tmp_path / "m"), meta_at(tmp_path / "s")
        journal = MetadataJournal(ms, HOST, flush_interval_ms=10_000, flush_commits=rng.choice([1, 5, 1000]))
        base = Snapshot(master.export_sections(), {t: 0 for t in SYNC_TOPICS})
        master.hub.journal = journal
        follower = MetadataFollower(ss, slave)
        follower.install(base)
        assert follower.start()
        snap_at = rng.randrange(50, 250)
        snap: Snapshot | None = None
        for step in range(300):
            mutate(rng, master)
            if step == snap_at:
                journal.flush()
                snap = Snapshot(master.export_sections(), {t: ms.max_offset_in_queue(t, 0) for t in SYNC_TOPICS})
            if rng.random() < 0.1:
                journal.flush()
                replicate(ms, ss)
                follower.drain()
                assert same_image(image(slave), image(master)), f"seed {seed} step {step}: {diff(image(slave), image(master))}"
        journal.flush()
        replicate(ms, ss)
        follower.drain()
        assert same_image(image(slave), image(master))
        everything = records_of(ms)
        assert same_image(fold(image_from_docs(base.sections), everything), image(master))
        assert snap is not None
        tail = records_of(ms, snap.positions)
        assert same_image(fold(image_from_docs(snap.sections), tail), image(master))
        fresh = meta_at(tmp_path / "fresh")  # a new slave: the snapshot, then the records after it
        late = MetadataFollower(ss, fresh)
        late.install(snap)
        assert late.start() and same_image(image(fresh), image(master))
    finally:
        await ms.shutdown()
        await ss.shutdown()


async def test_a_change_whose_record_cannot_be_written_does_not_happen(tmp_path: Path) -> None:
    store = MessageStore(store_cfg(tmp_path / "m"), store_host=HOST)
    await store.start()
    master = meta_at(tmp_path / "m")
    master.hub.journal = MetadataJournal(store, HOST)
    master.topics.update(TopicConfig("Kept", 4, 4))
    await store.shutdown()  # the commit log refuses from now on
    with pytest.raises(JournalError):
        master.topics.update(TopicConfig("Refused", 4, 4))
    with pytest.raises(JournalError):
        master.topics.delete("Kept")
    assert master.topics.get("Refused") is None and master.topics.get("Kept") is not None


async def test_offsets_are_coalesced_per_queue(tmp_path: Path) -> None:
    store = MessageStore(store_cfg(tmp_path / "m"), store_host=HOST)
    await store.start()
    try:
        master = meta_at(tmp_path / "m")
        journal = MetadataJournal(store, HOST, flush_interval_ms=10_000, flush_commits=10**9)
        master.hub.journal = journal
        for i in range(5000):
            master.offsets.commit_offset("h", "G", "T", i % 4, i)
        journal.flush()
        recs = records_of(store)
        assert len(recs) == 1 and recs[0].value == {0: 4996, 1: 4997, 2: 4998, 3: 4999}
        assert journal.coalesced == 4999
        assert fold(empty_image(), recs)["consumer_offset"].entries == {"G@T": {0: 4996, 1: 4997, 2: 4998, 3: 4999}}
    finally:
        await store.shutdown()


async def test_a_slave_whose_records_expired_installs_a_snapshot(tmp_path: Path) -> None:
    """A follower whose position points below its log (the segments holding its next records were deleted) needs
    a snapshot; after installing the master's it follows again and equals the master."""
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "m"), mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=100, max_index_num=400,
                      disk_space_warning_level_ratio=1.0, disk_space_clean_forcibly_ratio=1.0)  # fmt: skip
    store = MessageStore(cfg, store_host=HOST)
    await store.start()
    try:
        master, behind = meta_at(tmp_path / "m"), meta_at(tmp_path / "s")
        master.hub.journal = MetadataJournal(store, HOST, flush_commits=1)
        follower = MetadataFollower(store, behind)
        follower.install(Snapshot(master.export_sections(), {t: 0 for t in SYNC_TOPICS}))
        for i in range(400):  # ~300 KiB of topic records: several segments
            master.topics.update(TopicConfig(f"T{i}", 4, 4, attributes={"pad": "x" * 600}))
        later = time.time_ns() // 1_000_000 + 100 * 3_600_000  # the segments are 100 h old by then
        assert store.clean_expired_files(force=True, now_ms=later) > 0 and store.min_offset_in_queue(
            "RMQ_SYS_TOPIC_CONFIG_SYNC", 0) > 0  # fmt: skip
        assert follower.needs_bootstrap() and not follower.start()
        follower.install(Snapshot(master.export_sections(), {t: store.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}))
        master.topics.update(TopicConfig("After", 4, 4))
        follower.drain()
        assert not follower.needs_bootstrap() and same_image(image(behind), image(master))
    finally:
        await store.shutdown()


def test_a_snapshot_encoded_in_steps_is_the_whole_snapshot(tmp_path: Path) -> None:
    m = meta_at(tmp_path)
    rng = random.Random(7)
    for _ in range(500):
        mutate(rng, m)
    for i in range(1000):  # a large offset table
        m.offsets.commit_offset("h", f"Wide{i}", "T0", i % 8, i)
    positions, created, log_offset = {t: 3 for t in SYNC_TOPICS}, 1_700_000_000_123, 4096
    steps = encode_steps(m.export_parts(), positions, created, log_offset)
    yields = 0
    try:
        while True:
            next(steps)
            yields += 1
    except StopIteration as done:
        data = done.value
    assert data == Snapshot(m.export_sections(), positions, created, log_offset).encode()
    assert yields >= 1000 // ENTRIES_PER_STEP


@pytest.mark.parametrize("seed", range(6))
async def test_a_snapshot_encoded_while_the_master_changes_plus_the_records_after_it_is_the_live_image(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(snapshot_module, "ENTRIES_PER_STEP", 1)  # a step per entry: changes between every two
    rng = random.Random(seed)
    ms = MessageStore(store_cfg(tmp_path / "m"), store_host=HOST)
    await ms.start()
    try:
        master = meta_at(tmp_path / "m")
        master.hub.journal = journal = MetadataJournal(ms, HOST, flush_interval_ms=10_000,
                                                       flush_commits=rng.choice([1, 5, 1000]))
        for _ in range(600):
            mutate(rng, master)
        if rng.random() < 0.5:
            journal.flush()  # else buffered offsets are in the tables and their records come after the positions
        positions = {t: ms.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}
        steps = encode_steps(master.export_parts(), positions, 1, -1)
        while True:  # the master changes between the encoder's steps (other callbacks of the loop)
            for _ in range(rng.randrange(4)):
                mutate(rng, master)
            try:
                next(steps)
            except StopIteration as done:
                snap = Snapshot.decode(done.value)
                break
        journal.flush()
        tail = records_of(ms, snap.positions)
        assert same_image(fold(image_from_docs(snap.sections), tail), image(master)), \
            f"seed {seed}: {diff(fold(image_from_docs(snap.sections), tail), image(master))}"
    finally:
        await ms.shutdown()
