"""Metadata compaction (RIP-81): the store reader and export file (``brokerd/sync/export.py``) and the PySpark job
(``scripts/compact_metadata.py``).

Random mutation histories made on a real ``BrokerMetadata`` whose journal records each change as the master
would: the job's result (its tasks in-process, and on Spark ``local[2]``) == the sequential ``image.fold`` of the
records == the master's live image; a snapshot plus the records after it == the whole history; the snapshot file
the job writes loads into a fresh broker and equals the fold. End to end on a real store: the journal writes
into a ``MessageStore`` and the reader returns exactly those records, also while the store runs. Only one Spark
test runs by default (it needs pyspark and java); the others are ``slow``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerd.message import MessageInner
from brokerd.metadata import BrokerMetadata
from brokerd.metadata.hook import (
    KIND_CONSUMER_OFFSET,
    KIND_DELAY_OFFSET,
    KIND_SUBSCRIPTION_GROUP,
    KIND_TOPIC,
    OP_DELETE,
)
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import TopicConfig
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore
from brokerd.store.results import PutMessageResult
from brokerd.sync.export import (
    TOPICS,
    ExportReader,
    RawRecord,
    RecordsExpired,
    StoreReader,
    decode_in_log_order,
    export_store,
    read_store,
    write_export,
)
from brokerd.sync.image import Image, empty_image, fold, image_from_docs, same_image
from brokerd.sync.journal import MetadataJournal
from brokerd.sync.records import CREATED, DELETED, UPDATED, SyncRecord
from brokerd.sync.snapshot import Snapshot, SnapshotStore
from scripts import compact_metadata as job

HOST = ("127.0.0.1", 10911)  # port-ok: the host written into records, nothing binds it
ROOT = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------- histories


class LogJournal:
    """A master's journal without a store: every change becomes a record at once, with queue offsets per sync
    topic and increasing commit-log offsets, as the real journal would place them in the log."""

    def __init__(self) -> None:
        self.raws: list[RawRecord] = []
        self.next = {t: 0 for t in TOPICS}
        self.log_offset = 4096
        self.last_end = 0  # commit-log end of the last record (ChangeJournal)

    def write(self, kind: str, op: str, key: str, value: Any, data_version: dict[str, int], created: bool) -> None:
        change = DELETED if op == OP_DELETE else (CREATED if created else UPDATED)
        rec = SyncRecord(kind, change, key, value, dict(data_version), 1_700_000_000_000 + len(self.raws))
        body = rec.encode()
        size = 120 + len(body)
        self.raws.append(RawRecord(rec.topic, self.next[rec.topic], self.log_offset, size, body))
        self.next[rec.topic] += 1
        self.log_offset += size
        self.last_end = self.log_offset

    def records(self, start: int = 0) -> list[SyncRecord]:
        return [r.record() for r in self.raws[start:]]


def new_meta(config_dir: Path, *, offset_step: int = 3) -> BrokerMetadata:
    m = BrokerMetadata(str(config_dir), cluster_name="C", broker_name="b", persist_on_change=False,
                       consumer_offset_version_step=offset_step, delay_offset_version_step=2)  # fmt: skip
    m.load()
    return m


def mutate(rng: random.Random, m: BrokerMetadata, topics: int = 12, groups: int = 8, queues: int = 16) -> None:
    """One random mutation: topics and groups created/updated/deleted, offsets committed on many queues and
    removed, delay offsets."""
    op, topic, group = rng.random(), f"T{rng.randrange(topics)}", f"G{rng.randrange(groups)}"
    if op < 0.15:
        m.topics.update(TopicConfig(topic, rng.randrange(1, 9), rng.randrange(1, 9), perm=rng.choice([2, 4, 6]),
                                    attributes={"+k": str(rng.randrange(3))}))  # fmt: skip
    elif op < 0.2:
        m.topics.delete(topic)
        m.offsets.remove_topic(topic)
    elif op < 0.3:
        m.subscriptions.update(SubscriptionGroupConfig(group_name=group, retry_max_times=rng.randrange(1, 20)))
    elif op < 0.33:
        m.subscriptions.delete(group)
        m.offsets.remove_offset(group)
    elif op < 0.8:
        m.offsets.commit_offset("h", group, topic, rng.randrange(queues), rng.randrange(100_000))
    elif op < 0.87:
        m.offsets.commit_offsets("h", group, topic, {q: rng.randrange(100_000) for q in rng.sample(range(queues), 3)})
    elif op < 0.9:
        m.offsets.remove(group, topic)
    else:
        m.delay_offsets.update(rng.randrange(1, 19), rng.randrange(100_000))


def live(m: BrokerMetadata) -> Image:
    return image_from_docs(m.export_sections())


class History:
    """A master that made ``steps`` random mutations, its records, and snapshots taken at ``cuts``."""

    def __init__(self, tmp: Path, seed: int, steps: int, cuts: tuple[int, ...] = ()) -> None:
        rng = random.Random(seed)
        self.meta = new_meta(tmp / f"history-{seed}", offset_step=rng.choice([1, 3, 500]))
        self.journal = LogJournal()
        self.base = Snapshot(self.meta.export_sections(), dict(self.journal.next), 1)
        self.meta.hub.journal = self.journal
        self.cuts: dict[int, tuple[Snapshot, int]] = {}
        for step in range(steps):
            if step in cuts:
                snap = Snapshot(self.meta.export_sections(), dict(self.journal.next), 2 + step)
                self.cuts[step] = (snap, len(self.journal.raws))
            mutate(rng, self.meta)

    def export(self, path: Path, *, cut: int | None = None, broker: str = "broker-a", end: int | None = None) -> Path:
        snap, first = (self.base, 0) if cut is None else self.cuts[cut]
        write_export(path, broker, snap, self.journal.raws[first:end], block_records=97)
        return path


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


# ------------------------------------------------------------------------------------------- the job's tasks


@pytest.mark.parametrize("seed", range(8))
def test_compaction_equals_the_fold_and_the_masters_live_image(tmp_path: Path, seed: int) -> None:
    h = History(tmp_path, seed, 400)
    records = h.journal.records()
    folded = fold(image_from_docs(h.base.sections), records)
    assert_same(folded, live(h.meta))
    plan = job.make_plan([str(h.export(tmp_path / "a.rip81"))])
    [res] = job.run_local(plan, partitions=1 + 2 * (seed % 4))
    assert_same(res.image, folded)
    assert res.positions == h.journal.next and res.records == len(records) and res.bad == 0
    assert res.log_end == h.journal.log_offset


def test_a_snapshot_plus_the_records_after_it_equals_the_whole_history(tmp_path: Path) -> None:
    h = History(tmp_path, 11, 500, cuts=(0, 137, 499))
    whole = live(h.meta)
    for cut, (snap, first) in h.cuts.items():
        assert_same(fold(image_from_docs(snap.sections), h.journal.records(first)), whole)
        [res] = job.run_local(job.make_plan([str(h.export(tmp_path / f"cut{cut}.rip81", cut=cut))]))
        assert_same(res.image, whole)
        # the whole log with the snapshot given as the base: the records it covers are skipped
        [res] = job.run_local(job.make_plan([str(h.export(tmp_path / "all.rip81"))], base=snap))
        assert_same(res.image, whole)
        assert res.records == len(h.journal.raws) - first and res.positions == h.journal.next


def test_the_snapshot_the_job_writes_loads_into_a_fresh_broker(tmp_path: Path) -> None:
    h = History(tmp_path, 5, 600, cuts=(300,))
    [res] = job.run_local(job.make_plan([str(h.export(tmp_path / "a.rip81", cut=300))]))
    job.write_results([res], tmp_path / "out")
    files = list((tmp_path / "out").glob("snapshot-*.msgpack"))
    assert [str(f) for f in files] == [res.path]
    snap = Snapshot.decode(files[0].read_bytes())
    assert snap.positions == h.journal.next and snap.log_offset == h.journal.log_offset
    fresh = new_meta(tmp_path / "fresh")
    fresh.adopt_sections(snap.sections)
    assert_same(live(fresh), fold(image_from_docs(h.base.sections), h.journal.records()))
    assert_same(live(fresh), live(h.meta))


def test_several_brokers_each_get_their_own_snapshot(tmp_path: Path) -> None:
    a, b = History(tmp_path, 21, 300), History(tmp_path, 22, 200)
    specs = [f"a={a.export(tmp_path / 'x.rip81')}", f"b={b.export(tmp_path / 'y.rip81')}"]
    results = job.run_local(job.make_plan(specs), partitions=5)
    assert [r.name for r in results] == ["a", "b"]
    assert_same(results[0].image, live(a.meta))
    assert_same(results[1].image, live(b.meta))
    assert results[0].positions == a.journal.next and results[1].positions == b.journal.next
    job.write_results(results, tmp_path / "out")
    assert [p.parent.name for p in sorted((tmp_path / "out").glob("*/snapshot-*.msgpack"))] == ["a", "b"]
    with pytest.raises(ValueError, match="same broker name"):
        job.make_plan([str(tmp_path / "x.rip81"), str(tmp_path / "x.rip81")])


def test_merged_replicas_equal_the_masters_fold(tmp_path: Path) -> None:
    """A master's log and a lagging replica of it (same records at the same offsets), folded into one image."""
    h = History(tmp_path, 31, 400, cuts=(100,))
    n = len(h.journal.raws)
    master = h.export(tmp_path / "master.rip81")
    slave = h.export(tmp_path / "slave.rip81", cut=100, broker="slave", end=n * 2 // 3)
    [res] = job.run_local(job.make_plan([str(slave), str(master)], merge=True, name="g"), partitions=3)
    assert res.name == "g"
    assert_same(res.image, live(h.meta))
    assert res.positions == h.journal.next


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([KIND_TOPIC, KIND_SUBSCRIPTION_GROUP, KIND_CONSUMER_OFFSET,
                                           KIND_DELAY_OFFSET]), st.integers(0, 5), st.integers(0, 3),
                          st.dictionaries(st.integers(0, 7), st.integers(0, 10**6), min_size=1, max_size=3)),
                max_size=80), st.integers(1, 9))  # fmt: skip
def test_any_record_sequence_compacts_to_its_fold(tmp_path: Path, ops: list[tuple[Any, ...]], parts: int) -> None:
    raws, nxt = [], {t: 0 for t in TOPICS}
    for i, (kind, k, action, queues) in enumerate(ops):
        key = f"g{k}@t{k % 2}" if kind == KIND_CONSUMER_OFFSET else str(k + 1)
        value = None if action == 0 else (queues if kind == KIND_CONSUMER_OFFSET else
                                          i if kind == KIND_DELAY_OFFSET else {"n": i})  # fmt: skip
        rec = SyncRecord(kind, DELETED if action == 0 else UPDATED, key, value, {"counter": i, "stateVersion": 0}, i)
        raws.append(RawRecord(rec.topic, nxt[rec.topic], 100 * i, 100, rec.encode()))
        nxt[rec.topic] += 1
    path = tmp_path / f"h{len(ops)}-{parts}.rip81"
    write_export(path, "x", None, raws, block_records=7)
    [res] = job.run_local(job.make_plan([str(path)]), partitions=parts)
    assert_same(res.image, fold(empty_image(), [r.record() for r in raws]))
    assert res.positions == nxt


def test_records_are_partitioned_by_kind_and_key_whatever_their_encoding() -> None:
    for key in ("k", "x" * 40, "y" * 300, "ключ@topic"):
        rec = SyncRecord(KIND_TOPIC, UPDATED, key, {"a": 1}, {"counter": 1}, 5)
        assert job.record_hash(3, rec.encode()) == job.key_hash(3, KIND_TOPIC, key)
        odd = b"\xdc\x00\x07" + rec.encode()[1:]  # the same record, its list as an array16
        assert SyncRecord.decode(odd) == rec and job.record_hash(3, odd) == job.key_hash(3, KIND_TOPIC, key)


def test_unreadable_bodies_are_skipped_and_counted(tmp_path: Path) -> None:
    h = History(tmp_path, 3, 100)
    raws = list(h.journal.raws)
    bad = raws[10]
    raws[10] = bad._replace(body=b"\xc1junk")
    write_export(tmp_path / "bad.rip81", "x", h.base, raws)
    [res] = job.run_local(job.make_plan([str(tmp_path / "bad.rip81")]))
    records = [r.record() for i, r in enumerate(h.journal.raws) if i != 10]
    assert_same(res.image, fold(image_from_docs(h.base.sections), records))
    assert res.bad == 1 and res.positions == h.journal.next  # the slave skips it too and goes on


# ------------------------------------------------------------------------------------------- export files


def test_export_round_trip_and_a_torn_file(tmp_path: Path) -> None:
    h = History(tmp_path, 7, 300)
    path = h.export(tmp_path / "a.rip81")
    reader = ExportReader(path)
    assert reader.header.broker == "broker-a" and reader.header.snapshot == h.base
    assert reader.read_all() == h.journal.raws and reader.complete and reader.positions == h.journal.next
    data = path.read_bytes()
    (tmp_path / "torn.rip81").write_bytes(data[: len(data) * 3 // 5])
    torn = ExportReader(tmp_path / "torn.rip81")
    got = torn.read_all()
    assert not torn.complete and 0 < len(got) < len(h.journal.raws)
    assert got == h.journal.raws[: len(got)]  # whole records, up to where the file was cut
    [res] = job.run_local(job.make_plan([str(tmp_path / "torn.rip81")]))
    assert_same(res.image, fold(image_from_docs(h.base.sections), decode_in_log_order(got)))
    (tmp_path / "junk").write_bytes(b"not an export")
    with pytest.raises(ValueError, match="not a metadata export"):
        ExportReader(tmp_path / "junk")


# ------------------------------------------------------------------------------------------- a real store


def store_cfg(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20,
                       mapped_file_size_consume_queue=20 * 200, max_hash_slot_num=1000, max_index_num=4000,
                       disk_space_warning_level_ratio=1.0, disk_space_clean_forcibly_ratio=1.0)  # fmt: skip


class CapturingStore:
    """The journal's store, keeping what it appended (topic, queue offset, log offset, size, body)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.raws: list[RawRecord] = []

    def append_message(self, msg: MessageInner) -> PutMessageResult:
        res = self.store.append_message(msg)
        if res.ok:
            self.raws.append(RawRecord(msg.topic, res.queue_offset, res.wrote_offset, res.wrote_bytes, msg.body))
        return res


def by_topic(raws: list[RawRecord]) -> list[RawRecord]:
    """In the reader's order: topic after topic (sorted), each in queue order."""
    return sorted(raws, key=lambda r: (TOPICS.index(r.topic), r.queue_offset))


async def test_the_reader_returns_exactly_what_the_journal_wrote(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(store_cfg(root), store_host=HOST)
    await store.start()
    try:
        rng = random.Random(1)
        meta = new_meta(root / "config")
        base = Snapshot(meta.export_sections(), {t: 0 for t in TOPICS}, 1)
        SnapshotStore(str(root / "config")).write(base)
        capture = CapturingStore(store)
        journal = MetadataJournal(capture, HOST, flush_interval_ms=10_000, flush_commits=rng.choice([7, 50]))
        meta.hub.journal = journal
        for step in range(700):
            mutate(rng, meta)
            if step == 400:
                journal.flush()
                snap = Snapshot(meta.export_sections(), {t: store.max_offset_in_queue(t, 0) for t in TOPICS}, 2)
                before = len(capture.raws)
        journal.flush()
        # the store is running: read it as it is, without its lock
        got = read_store(root, positions={t: 0 for t in TOPICS})
        assert got.snapshot == base and got.records == by_topic(capture.raws)
        assert got.scan.ends == {t: store.max_offset_in_queue(t, 0) for t in TOPICS} and not got.scan.torn
        assert [(r.kind, r.change, r.key, r.value, r.data_version, r.timestamp, r.log_offset) for r in got.decoded()] \
            == [(r.kind, r.change, r.key, r.value, r.data_version, r.timestamp, r.log_offset)
                for r in decode_in_log_order(capture.raws)]  # fmt: skip
        assert_same(fold(image_from_docs(base.sections), got.decoded()), live(meta))
        SnapshotStore(str(root / "config")).write(snap)  # a newer snapshot: only the records after it are read
        tail = read_store(root)
        assert tail.snapshot == snap and tail.records == by_topic(capture.raws[before:])
        assert_same(fold(image_from_docs(snap.sections), tail.decoded()), live(meta))
        stats, _ = export_store(root, tmp_path / "x.rip81")
        assert ExportReader(tmp_path / "x.rip81").read_all() == tail.records and stats.positions == tail.scan.ends
        [res] = job.run_local(job.make_plan([str(root)]))
        assert_same(res.image, live(meta))
        assert res.positions == {t: store.max_offset_in_queue(t, 0) for t in TOPICS}
    finally:
        await store.shutdown()


def sync_message(rec: SyncRecord) -> MessageInner:
    return MessageInner(topic=rec.topic, queue_id=0, body=rec.encode(), flag=0, properties={}, sys_flag=0,
                        born_timestamp=rec.timestamp, born_host=HOST, store_host=HOST)  # fmt: skip


async def filled_store(root: Path, n: int) -> list[RawRecord]:
    """A stopped store holding ``n`` topic records (queue offsets 0..n-1 of the topic sync topic)."""
    store = MessageStore(store_cfg(root), store_host=HOST)
    await store.start()
    capture = CapturingStore(store)
    for i in range(n):
        rec = SyncRecord(KIND_TOPIC, UPDATED, f"T{i % 50}", {"topicName": f"T{i % 50}", "perm": i},
                         {"counter": i, "stateVersion": 0, "timestamp": i}, i)  # fmt: skip
        capture.append_message(sync_message(rec))
    await store.shutdown()
    return capture.raws


async def test_a_torn_last_record_ends_the_read(tmp_path: Path) -> None:
    raws = await filled_store(tmp_path, 30)
    last = raws[-1]
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with segment.open("r+b") as fh:  # the last record half-written: its tail never reached the file
        fh.seek(last.log_offset + last.size // 2)
        fh.write(bytes(last.size - last.size // 2))
    got = read_store(tmp_path)
    assert got.records == raws[:-1] and got.scan.torn == {"RMQ_SYS_TOPIC_CONFIG_SYNC": 29}
    assert got.scan.ends["RMQ_SYS_TOPIC_CONFIG_SYNC"] == 29
    with segment.open("r+b") as fh:  # a consume-queue entry whose record is not in the log at all
        fh.seek(last.log_offset)
        fh.write(bytes(last.size))
    assert read_store(tmp_path).records == raws[:-1]


async def test_expired_records_are_reported(tmp_path: Path) -> None:
    raws = await filled_store(tmp_path, 450)  # 200 entries per consume-queue file: three files
    queue = tmp_path / "consumequeue" / "RMQ_SYS_TOPIC_CONFIG_SYNC" / "0"
    (queue / f"{0:020d}").unlink()  # the head of the queue was cleaned
    with pytest.raises(RecordsExpired, match="from queue offset 0"):
        read_store(tmp_path)
    got = read_store(tmp_path, allow_gaps=True)
    assert got.records == raws[200:] and got.scan.expired["RMQ_SYS_TOPIC_CONFIG_SYNC"] == (0, 200)
    assert read_store(tmp_path, positions={t: 250 for t in TOPICS}).records == raws[250:]  # nothing missing
    with StoreReader(tmp_path) as reader:
        assert reader.snapshot() is None


# ------------------------------------------------------------------------------------------- Spark


def _spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


needs_spark = pytest.mark.skipif(not _spark_available(), reason="pyspark and java are needed (scripts/compact-metadata "
                                                                 "installs them)")


@pytest.fixture(scope="module")
def sc() -> Iterator[Any]:
    context = job.spark_context("local[2]", "rip81-tests", {"spark.driver.memory": "1g"})
    yield context
    context.stop()


@needs_spark
def test_spark_compaction_equals_the_fold_and_the_live_images(tmp_path: Path, sc: Any) -> None:
    """Two brokers in one job on local[2]: each output == its sequential fold == its master's live image."""
    a, b = History(tmp_path, 41, 500, cuts=(200,)), History(tmp_path, 42, 300)
    specs = [f"a={a.export(tmp_path / 'a.rip81', cut=200)}", f"b={b.export(tmp_path / 'b.rip81')}"]
    plan = job.make_plan(specs)
    results = job.run_spark(sc, plan, partitions=3)
    for res, h in zip(results, (a, b), strict=True):
        assert_same(res.image, fold(image_from_docs(h.base.sections), h.journal.records()))
        assert_same(res.image, live(h.meta))
        assert res.positions == h.journal.next
    assert [(r.records, r.positions) for r in results] == [(r.records, r.positions) for r in job.run_local(plan)]
    job.write_results(results, tmp_path / "out")
    fresh = new_meta(tmp_path / "fresh")  # the snapshot written for broker a, loaded by a new broker
    fresh.adopt_sections(Snapshot.decode(Path(results[0].path).read_bytes()).sections)
    assert_same(live(fresh), live(a.meta))


@pytest.mark.slow
@needs_spark
@pytest.mark.parametrize("seed", range(6))
def test_spark_compaction_of_random_histories(tmp_path: Path, sc: Any, seed: int) -> None:
    rng = random.Random(seed)
    h = History(tmp_path, 100 + seed, 800, cuts=(rng.randrange(1, 700),))
    [cut] = h.cuts
    n = len(h.journal.raws)
    replica = h.export(tmp_path / "replica.rip81", cut=cut, end=rng.randrange(n // 2, n))
    for specs, merge in (([str(h.export(tmp_path / "m.rip81", cut=cut))], False),
                         ([str(replica), str(h.export(tmp_path / "full.rip81"))], True)):  # fmt: skip
        [res] = job.run_spark(sc, job.make_plan(specs, merge=merge), partitions=rng.choice([2, 5]))
        assert_same(res.image, live(h.meta))
        assert res.positions == h.journal.next


@pytest.mark.slow
@needs_spark
async def test_the_wrapper_compacts_a_store_into_a_snapshot_a_broker_loads(tmp_path: Path) -> None:
    root = tmp_path / "broker-a"
    store = MessageStore(store_cfg(root), store_host=HOST)
    await store.start()
    try:
        meta = new_meta(root / "config")
        SnapshotStore(str(root / "config")).write(Snapshot(meta.export_sections(), {t: 0 for t in TOPICS}, 1))
        journal = MetadataJournal(store, HOST, flush_interval_ms=10_000, flush_commits=20)
        meta.hub.journal = journal
        rng = random.Random(9)
        for _ in range(500):
            mutate(rng, meta)
        journal.flush()
        env = {**os.environ, "SPARK_DRIVER_MEMORY": "1g"}
        proc = subprocess.run([str(ROOT / "scripts" / "compact-metadata"), "--master", "local[2]", "--out",
                               str(tmp_path / "out"), str(root)], capture_output=True, text=True, env=env,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        [out] = report["outputs"]
        assert out["broker"] == "broker-a" and out["positions"] == {t: store.max_offset_in_queue(t, 0) for t in TOPICS}
    finally:
        await store.shutdown()
    fresh = new_meta(tmp_path / "fresh")
    fresh.adopt_sections(Snapshot.decode(Path(out["snapshot"]).read_bytes()).sections)
    assert_same(live(fresh), live(meta))


def test_the_job_runs_without_spark_from_the_command_line(tmp_path: Path) -> None:
    h = History(tmp_path, 8, 200)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "compact_metadata.py"), "--no-spark", "--out",
                           str(tmp_path / "out"), str(h.export(tmp_path / "a.rip81"))], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [out] = json.loads(proc.stdout)["outputs"]
    assert_same(image_from_docs(Snapshot.decode(Path(out["snapshot"]).read_bytes()).sections), live(h.meta))
