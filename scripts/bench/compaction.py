"""Metadata compaction benchmark (RIP-81, the PySpark job): prints one JSON object.

  .venv/bin/python scripts/bench/compaction.py [--records 10000000] [--master local[2]] [--partitions N]
                                               [--dir PATH] [--keep]

Generates an export file: a base snapshot (2,000 topics, 1,000 groups, 10,000 offset keys) and N change records
after it, in log order, mixed as a busy master writes them (92% consumer offsets on 20,000 group@topic keys x 16
queues, 3% topics, 3% groups, 2% delay offsets; a tenth of the topic and group records are deletes; DataVersions
as the managers stamp them). Then compacts it with ``scripts/compact_metadata.py`` on ``--master`` (timed: the
SparkContext start, and the job from reading the file to the encoded snapshot), folds the same records
sequentially with ``brokerd.sync.image.fold`` in this process (timed: decoding + applying, one core), and checks that both images (with
their DataVersions) and positions are equal. Target (issue 12): 10 million records on local[2] in < 2 min.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from brokerd.metadata.hook import (  # noqa: E402 - after the path set-up
    KIND_CONSUMER_OFFSET,
    KIND_DELAY_OFFSET,
    KIND_SUBSCRIPTION_GROUP,
    KIND_TOPIC,
)
from brokerd.sync.export import TOPICS, ExportReader, RawRecord, unpack_records, write_export  # noqa: E402
from brokerd.sync.image import Table, docs_from_image, empty_image, fold, image_from_docs, same_image  # noqa: E402
from brokerd.sync.records import CREATED, DELETED, SYNC_TOPIC_OF, UPDATED, SyncRecord  # noqa: E402
from brokerd.sync.snapshot import Snapshot  # noqa: E402
from scripts import compact_metadata as job  # noqa: E402

TOPIC_NAMES, GROUP_NAMES, OFFSET_KEYS, QUEUES, LEVELS = 5_000, 2_000, 20_000, 16, 18
START = 1_000  # queue offset of the first record after the base snapshot, per sync topic
T0 = 1_700_000_000_000


def topic_value(name: str, rng: random.Random) -> dict[str, Any]:
    q = rng.randrange(1, 17)
    return {"topicName": name, "readQueueNums": q, "writeQueueNums": q, "perm": 6, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": False, "attributes": {}}  # fmt: skip


def group_value(name: str, rng: random.Random) -> dict[str, Any]:
    return {"groupName": name, "consumeEnable": True, "retryQueueNums": 1, "retryMaxTimes": rng.randrange(1, 20),
            "brokerId": 0, "consumeMessageOrderly": False}  # fmt: skip


def offset_key(i: int) -> str:
    """Key ``i`` of OFFSET_KEYS distinct group@topic keys (group i % 2000, topic from i // 2000 and i)."""
    return f"GID_{i % GROUP_NAMES:05d}@Topic_{(i // GROUP_NAMES * 500 + i % 500) % TOPIC_NAMES:05d}"


def base_snapshot(rng: random.Random) -> Snapshot:
    image = empty_image()
    image[KIND_TOPIC] = Table({f"Topic_{i:05d}": topic_value(f"Topic_{i:05d}", rng) for i in range(2_000)},
                              {"counter": 2_000, "stateVersion": 1, "timestamp": T0})  # fmt: skip
    image[KIND_SUBSCRIPTION_GROUP] = Table({f"GID_{i:05d}": group_value(f"GID_{i:05d}", rng) for i in range(1_000)},
                                           {"counter": 1_000, "stateVersion": 1, "timestamp": T0})  # fmt: skip
    image[KIND_CONSUMER_OFFSET] = Table({offset_key(i): {q: rng.randrange(10**6) for q in range(QUEUES)}
                                         for i in range(10_000)}, {"counter": 20, "stateVersion": 1, "timestamp": T0})
    image[KIND_DELAY_OFFSET] = Table({str(lv): rng.randrange(10**6) for lv in range(1, LEVELS + 1)},
                                     {"counter": 7, "stateVersion": 1, "timestamp": T0})  # fmt: skip
    return Snapshot(docs_from_image(image), {t: START for t in TOPICS}, T0, 1 << 30)


class Master:
    """Makes the records a master would write: DataVersions per table (offsets bump every 500 updates)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.counters = {KIND_TOPIC: 2_000, KIND_SUBSCRIPTION_GROUP: 1_000, KIND_CONSUMER_OFFSET: 20,
                         KIND_DELAY_OFFSET: 7}  # fmt: skip
        self.updates = dict.fromkeys(self.counters, 0)
        self.queue = dict.fromkeys(TOPICS, START)
        self.log_offset = 1 << 30

    def record(self, i: int) -> SyncRecord:
        rng, x = self.rng, self.rng.random()
        if x < 0.92:
            queues = {rng.randrange(QUEUES): rng.randrange(10**7) for _ in range(rng.choice((1, 1, 2, 3)))}
            return self._rec(KIND_CONSUMER_OFFSET, UPDATED, offset_key(rng.randrange(OFFSET_KEYS)), queues, i, 500)
        if x < 0.95:
            name = f"Topic_{rng.randrange(TOPIC_NAMES):05d}"
            if rng.random() < 0.1:
                return self._rec(KIND_TOPIC, DELETED, name, None, i, 1)
            return self._rec(KIND_TOPIC, CREATED, name, topic_value(name, rng), i, 1)
        if x < 0.98:
            name = f"GID_{rng.randrange(GROUP_NAMES):05d}"
            if rng.random() < 0.1:
                return self._rec(KIND_SUBSCRIPTION_GROUP, DELETED, name, None, i, 1)
            return self._rec(KIND_SUBSCRIPTION_GROUP, UPDATED, name, group_value(name, rng), i, 1)
        return self._rec(KIND_DELAY_OFFSET, UPDATED, str(rng.randrange(1, LEVELS + 1)), rng.randrange(10**7), i, 200)

    def _rec(self, kind: str, change: str, key: str, value: Any, i: int, step: int) -> SyncRecord:
        self.updates[kind] += 1
        if change == DELETED or self.updates[kind] >= step:
            self.counters[kind] += 1
            self.updates[kind] = 0
        dv = {"counter": self.counters[kind], "stateVersion": 1, "timestamp": T0 + i // 1000}
        return SyncRecord(kind, change, key, value, dv, T0 + i // 1000)

    def raws(self, n: int) -> Iterator[RawRecord]:
        for i in range(n):
            rec = self.record(i)
            body = rec.encode()
            topic = SYNC_TOPIC_OF[rec.kind]
            size = 96 + len(topic) + len(body)
            yield RawRecord(topic, self.queue[topic], self.log_offset, size, body)
            self.queue[topic] += 1
            self.log_offset += size


def sequential_fold(path: Path, base: Snapshot) -> tuple[Any, float]:
    """The pure fold of the export's records in log order, streamed (decoding included); (image, seconds)."""
    reader = ExportReader(path)
    t = time.perf_counter()
    records = (SyncRecord.decode(r.body, r.log_offset) for p in reader.blocks() for r in unpack_records(p))
    with job.gc_paused():  # as the job's tasks do
        image = fold(image_from_docs(base.sections), records)
    return image, time.perf_counter() - t


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--dir", help="where the export file goes (default: a temporary directory, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the export file")
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="bench-compaction-"))
    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"bench": "metadata_compaction", "records": args.records, "master": args.master}
    try:
        base = base_snapshot(random.Random(args.seed))
        master = Master(args.seed)
        t = time.perf_counter()
        stats = write_export(tmp / "broker-a.rip81", "broker-a", base, master.raws(args.records))
        out.update(generateSeconds=round(time.perf_counter() - t, 1), exportBytes=stats.bytes, blocks=stats.blocks)
        gc.collect()
        t = time.perf_counter()
        sc = job.spark_context(args.master, "rip81-bench", {"spark.driver.memory": args.driver_memory})
        out["sparkStartSeconds"] = round(time.perf_counter() - t, 2)
        try:
            t = time.perf_counter()
            [res] = job.run_spark(sc, job.make_plan([str(tmp / "broker-a.rip81")]), args.partitions)
            snapshot = job.snapshot_of(res).encode()
            out["compactSeconds"] = round(time.perf_counter() - t, 2)
        finally:
            sc.stop()
        out["compactWithStartSeconds"] = round(out["compactSeconds"] + out["sparkStartSeconds"], 2)
        out.update(snapshotBytes=len(snapshot), entries={k: len(v.entries) for k, v in res.image.items()})
        gc.collect()
        image, fold_s = sequential_fold(tmp / "broker-a.rip81", base)
        out["foldSeconds"] = round(fold_s, 2)  # one core, decoding the bodies included
        out["equal"] = same_image(res.image, image) and res.positions == master.queue and res.records == args.records
        out["targetSeconds"] = 120
        out["withinTarget"] = out["compactWithStartSeconds"] < 120
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    return 0 if out.get("equal") else 1


if __name__ == "__main__":
    sys.exit(main())
