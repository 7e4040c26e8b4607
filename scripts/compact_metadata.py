"""PySpark job: compact RIP-81 metadata change records into a snapshot in the broker's own format.

    scripts/compact-metadata [--master local[*]] --out DIR [--merge] [--snapshot FILE] SOURCE [SOURCE ...]

A SOURCE is ``[NAME=]PATH``: a broker's store directory (read read-only, the broker may be running:
``brokerd.sync.export.StoreReader``; records below its local log are read from the tier the store names when it
is tiered, unless ``--no-tier``) or an export file (``python -m brokerd.sync.export``). Each source brings
a base snapshot (its latest snapshot file / the one in the export; none: the empty image) and the change
records after it. The driver ships the record blocks and the base entries as RDD data (tasks read no local
file, so ``--master spark://host:7077`` or ``yarn`` runs the same command), and the project as a zip of py-files.

The tasks fold with the broker's own pure function: records are keyed by (output, kind, key) and hashed into
partitions, each partition sorts its records and applies them with ``brokerd.sync.image.fold`` onto the base
entries of its keys (last write wins; consumer offsets merge queue maps; a delete drops the key). Every key's
records are in one partition, so the union of the partitions' tables is the fold of all records. A table's
DataVersion is the one of its last record in the order below (the base snapshot's when no record touched it).

Order. Separately (the default), each source is one broker and gets its own output snapshot: its records are
ordered by commit-log offset, the order its master wrote them (one log is linear, also across the epochs a log
went through), so the result equals the sequential ``fold`` of the log. With ``--merge`` the sources are logs of
one broker group (master, slaves, successive masters) folded into one image: records are ordered by their
DataVersion's stateVersion, then its counter, then the commit-log offset (then the source's index).
stateVersion goes first, as RocketMQ's name server ranks two incarnations of a broker: it is the state-machine
version (the master epoch in controller mode), so a newer master's writes win over a deposed master's tail
whose counter ran ahead; the counter orders one master's table changes; the log offset orders records with
the same version (offset records share one until ``consumerOffsetUpdateVersionStep`` commits bump it). Copies
of one record in several replicas sort next to each other, and folding a record twice changes nothing. (While
every stateVersion is 0, two logs that diverged are ordered by counter alone: give the surviving log only.)
The merged base is ``--snapshot`` or the newest snapshot among the sources; records below its positions are
dropped as covered.

Output: per output a snapshot file ``snapshot-<created ms>.msgpack`` (``Snapshot.encode``; drop it into a
broker's ``config/metadataSnapshots/``): in ``--out`` for one output, in ``--out/<name>/`` for several. Its
positions are per sync topic the queue offset after the last record folded (the base's when none): a slave
that loads it tails from there. A JSON report goes to stdout.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from brokerd.sync.export import (  # noqa: E402 - after the path set-up
    BLOCK_RECORDS,
    TOPICS,
    ExportReader,
    RecordsExpired,
    StoreReader,
    broker_name_of,
    pack_records,
)
from brokerd.sync.image import KINDS, Image, docs_from_image, empty_image, fold, image_from_docs  # noqa: E402
from brokerd.sync.records import SyncRecord  # noqa: E402
from brokerd.sync.snapshot import Snapshot  # noqa: E402

BASE, REC, SUM = 0, 1, 2  # tags of the shuffled values
BASE_CHUNK = -1  # the source index of a shipped chunk of base entries
Bucket = tuple[int, tuple[int, int, Any]]  # (partition, (tag, output, items)): what crosses the shuffle
SHIP_BYTES = 64 << 20  # block bytes per parallelize call (the driver holds one such batch at a time)

# ------------------------------------------------------------------------------------------- the plan (driver)


@dataclass
class Source:
    name: str
    path: str
    is_store: bool
    snapshot: Snapshot | None


@dataclass
class Output:
    """One snapshot to write: its sources, base and the positions below which records are covered."""

    name: str
    sources: list[int]
    base: Snapshot | None

    @property
    def floor(self) -> dict[str, int]:
        return dict(self.base.positions) if self.base is not None else {t: 0 for t in TOPICS}


@dataclass
class Plan:
    sources: list[Source]
    outputs: list[Output]
    merge: bool
    allow_gaps: bool = False
    tier: bool = True  # store sources read below their local log from their tier

    def task_config(self) -> TaskConfig:
        out_of = {i: g for g, o in enumerate(self.outputs) for i in o.sources}
        return TaskConfig([out_of[i] for i in range(len(self.sources))],
                          [self.outputs[out_of[i]].floor for i in range(len(self.sources))], self.merge)  # fmt: skip


def open_source(spec: str) -> Source:
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = "", spec
    if Path(path).is_dir():
        with StoreReader(path, tier=None) as reader:
            return Source(name or broker_name_of(path), path, True, reader.snapshot())
    header = ExportReader(path).header
    return Source(name or header.broker or broker_name_of(path), path, False, header.snapshot)


def make_plan(specs: list[str], *, merge: bool = False, base: Snapshot | None = None, name: str | None = None,
              allow_gaps: bool = False, tier: bool = True) -> Plan:  # fmt: skip
    """Sources → outputs: one per source, or one for all (``merge``). ``base`` replaces the base snapshot(s)."""
    sources = [open_source(s) for s in specs]
    if merge or len(sources) == 1:
        if base is None:
            snaps = [s.snapshot for s in sources if s.snapshot is not None]
            base = max(snaps, key=lambda s: s.created_ms) if snaps else None
        outputs = [Output(name or sources[0].name, list(range(len(sources))), base)]
    else:
        if base is not None:
            raise ValueError("--snapshot replaces the base of one output: give one source or --merge")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"two sources have the same broker name ({names}): name them NAME=PATH")
        outputs = [Output(s.name, [i], s.snapshot) for i, s in enumerate(sources)]
    return Plan(sources, outputs, merge, allow_gaps or merge, tier)


def source_blocks(plan: Plan, index: int, block_records: int = BLOCK_RECORDS) -> Iterator[bytes]:
    """The record blocks of one source (a store's records from its output's floor, packed like an export's)."""
    src = plan.sources[index]
    if not src.is_store:
        reader = ExportReader(src.path)
        yield from reader.blocks()
        return
    floor = next(o.floor for o in plan.outputs if index in o.sources)
    with StoreReader(src.path, allow_gaps=plan.allow_gaps, tier="auto" if plan.tier else None) as store:
        block = []
        for raw in store.records(floor):
            block.append(raw)
            if len(block) >= block_records:
                yield pack_records(block)
                block.clear()
        if block:
            yield pack_records(block)


def base_buckets(plan: Plan, parts: int) -> list[Bucket]:
    """The base snapshots' entries as shuffle buckets (partition, (BASE, output, [(kind, key, value)])): applied
    before any record of their key."""
    out: list[Bucket] = []
    for g, o in enumerate(plan.outputs):
        if o.base is None:
            continue
        buckets: list[list[tuple[str, str, Any]]] = [[] for _ in range(parts)]
        for kind, table in image_from_docs(o.base.sections).items():
            for key, value in table.entries.items():
                buckets[key_hash(g, kind, key) % parts].append((kind, key, value))
        out += [(i, (BASE, g, b)) for i, b in enumerate(buckets) if b]
    return out


# ------------------------------------------------------------------------------------------- the tasks


@dataclass(frozen=True)
class TaskConfig:
    output_of: list[int]  # source index -> output index
    floors: list[dict[str, int]]  # source index -> positions already covered by the base
    merge: bool


def key_hash(g: int, kind: str, key: str) -> int:
    """The partition hash of a table key (``record_hash`` hashes the same bytes straight from a body)."""
    return zlib.crc32(key.encode(), zlib.crc32(b"\x00" + kind.encode(), g))


def _str_span(body: bytes, p: int) -> tuple[int, int]:
    """(start, end) of the msgpack str at ``p``; ValueError when there is none."""
    c = body[p]
    if 0xA0 <= c <= 0xBF:
        return p + 1, p + 1 + (c & 0x1F)
    if c == 0xD9:
        return p + 2, p + 2 + body[p + 1]
    if c == 0xDA:
        return p + 3, p + 3 + int.from_bytes(body[p + 1 : p + 3], "big")
    raise ValueError("not a short msgpack str")


def record_hash(g: int, body: bytes) -> int:
    """``key_hash`` of a record body's kind and key, read from the bytes (the body is decoded once, in the fold:
    ``SyncRecord.encode`` writes ``[1, kind, change, key, ...]``); an unusual encoding is decoded here."""
    try:
        if body[0] != 0x97 or body[1] != 0x01:
            raise ValueError("not the usual record layout")
        ks, ke = _str_span(body, 2)
        _, ce = _str_span(body, ke)
        ys, ye = _str_span(body, ce)
        return zlib.crc32(body[ys:ye], zlib.crc32(b"\x00" + body[ks:ke], g))
    except (ValueError, IndexError):
        rec = msgpack.unpackb(body, raw=False, strict_map_key=False)
        return key_hash(g, rec[1], rec[3])


def identity(h: int) -> int:
    return h


def keyed_block(cfg: TaskConfig, elem: tuple[int, bytes], parts: int) -> list[Bucket]:
    """A block's records bucketed by partition (key hash % ``parts``): (partition, (REC, output, [(order,
    body)])), the order being the log offset, or (stateVersion, counter, log offset, source) when merging; and in
    partition 0 (SUM, output, ({topic: next queue offset}, commit-log end, unreadable bodies)). Buckets, not
    records, cross into the shuffle: one pickled list per partition and block."""
    src, payload = elem
    g, floor, merge = cfg.output_of[src], cfg.floors[src], cfg.merge
    buckets: list[list[tuple[Any, bytes]]] = [[] for _ in range(parts)]
    ends: dict[str, int] = {}
    log_end, bad = -1, 0
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(payload), 1 << 20))
    unpacker.feed(payload)
    with gc_paused():
        for ti, qoff, loff, size, body in unpacker:
            topic = TOPICS[ti]
            if qoff < floor[topic]:
                continue
            if qoff >= ends.get(topic, 0):
                ends[topic] = qoff + 1
            if loff + size > log_end:
                log_end = loff + size
            try:
                h = record_hash(g, body)
                order: Any = loff
                if merge:
                    dv = msgpack.unpackb(body, raw=False, strict_map_key=False)[5]
                    order = (int(dv.get("stateVersion", 0)), int(dv.get("counter", 0)), loff, src)
            except Exception:  # noqa: BLE001 - any malformed body: skipped and counted, like the slave does
                bad += 1
                continue
            buckets[h % parts].append((order, body))
    return [(0, (SUM, g, (ends, log_end, bad)))] + [(i, (REC, g, b)) for i, b in enumerate(buckets) if b]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off for a task's bulk work: nothing here makes cycles, and its passes over the millions of
    young tuples, bytes and decoded records cost more than the work itself."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def fold_partition(buckets: Iterable[Bucket]) -> Iterator[tuple[Any, ...]]:
    """Fold one partition: per output, its base entries then its records in order, with ``image.fold``. Yields
    (REC, output, tables, folded, unreadable) with tables {kind: (entries, order of its last record or None,
    that record's DataVersion)}, and the summaries (SUM, output, ends, commit-log end, unreadable)."""
    bases: dict[int, Image] = defaultdict(empty_image)
    records: dict[int, list[tuple[Any, bytes]]] = defaultdict(list)
    out: list[tuple[Any, ...]] = []
    with gc_paused():
        for _, (tag, g, items) in buckets:
            if tag == REC:
                records[g] += items
            elif tag == BASE:
                for kind, key, value in items:
                    bases[g][kind].entries[key] = value
            else:
                out.append((SUM, g, *items))
        for g in set(bases) | set(records):
            out.append(_fold_output(g, bases[g], records.pop(g, [])))
    return iter(out)


def _fold_output(g: int, base: Image, recs: list[tuple[Any, bytes]]) -> tuple[Any, ...]:
    """One output's records of a partition, sorted, decoded and folded onto its base entries."""
    recs.sort(key=itemgetter(0))
    decoded, last, bad = [], {}, 0
    for order, body in recs:
        try:
            rec = SyncRecord.decode(body, order if isinstance(order, int) else order[2])
        except ValueError:
            bad += 1
            continue
        decoded.append(rec)
        last[rec.kind] = order
    recs.clear()
    image = fold(base, decoded)  # THE pure apply function, as the broker's slaves apply records
    tables = {k: (t.entries, last.get(k), t.data_version if k in last else None) for k, t in image.items()}
    return (REC, g, tables, len(decoded), bad)


@dataclass
class Result:
    """One output after the fold: the image, positions, and what went into it."""

    name: str
    image: Image
    positions: dict[str, int]
    log_end: int = -1
    records: int = 0
    bad: int = 0
    path: str = ""


def assemble(plan: Plan, partials: Iterable[tuple[Any, ...]]) -> list[Result]:
    """The partitions' tables (disjoint keys) → one image per output; DataVersions from the last records."""
    results = [Result(o.name, empty_image(), o.floor, o.base.log_offset if o.base is not None else -1)
               for o in plan.outputs]  # fmt: skip
    last: list[dict[str, Any]] = [{} for _ in plan.outputs]
    for item in partials:
        res = results[item[1]]
        if item[0] == SUM:
            _, _, ends, log_end, bad = item
            for topic, end in ends.items():
                res.positions[topic] = max(res.positions[topic], end)
            res.log_end, res.bad = max(res.log_end, log_end), res.bad + bad
            continue
        _, g, tables, folded, bad = item
        res.records, res.bad = res.records + folded, res.bad + bad
        for kind, (entries, order, dv) in tables.items():
            res.image[kind].entries.update(entries)
            if order is not None and (kind not in last[g] or order > last[g][kind][0]):
                last[g][kind] = (order, dv)
    for g, (res, out) in enumerate(zip(results, plan.outputs, strict=True)):
        base = image_from_docs(out.base.sections) if out.base is not None else empty_image()
        for kind in KINDS:
            res.image[kind].data_version = dict(last[g][kind][1] if kind in last[g] else base[kind].data_version)
    return results


# ------------------------------------------------------------------------------------------- running


def run_local(plan: Plan, partitions: int = 4) -> list[Result]:
    """The same tasks in this process, without Spark (tests; small archives)."""
    cfg = plan.task_config()
    shuffled: list[list[Bucket]] = [[] for _ in range(partitions)]
    for i in range(len(plan.sources)):
        for payload in source_blocks(plan, i):
            for p, bucket in keyed_block(cfg, (i, payload), partitions):
                shuffled[p].append((p, bucket))
    for p, bucket in base_buckets(plan, partitions):
        shuffled[p].append((p, bucket))
    return assemble(plan, [item for part in shuffled for item in fold_partition(part)])


def project_zip(directory: str) -> str:
    """The project's Python code (brokerd + this job) as one zip for the executors' sys.path."""
    path = os.path.join(directory, "pyrocketmq-project.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for py in sorted((ROOT / "brokerd").rglob("*.py")):
            zf.write(py, py.relative_to(ROOT).as_posix())
        for name in ("__init__.py", "compact_metadata.py"):
            zf.write(ROOT / "scripts" / name, f"scripts/{name}")
    return path


def spark_context(master: str, app: str = "rip81-compact-metadata", conf: dict[str, str] | None = None) -> Any:
    """A SparkContext (``pyspark`` imported here only). Local masters run the executors' Python as this one."""
    from pyspark import SparkConf, SparkContext

    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sconf = SparkConf().setMaster(master).setAppName(app)
    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": os.environ.get("SPARK_DRIVER_MEMORY", "4g"), **(conf or {})}  # fmt: skip
    for k, v in settings.items():
        sconf.set(k, v)
    sc = SparkContext.getOrCreate(sconf)
    sc.setLogLevel("ERROR")
    return sc


_SHIPPED: set[str] = set()  # application ids that have the project zip


def ship_project(sc: Any) -> None:
    """Add the project zip to the context's py-files, once (kept until exit: executors fetch it at task start)."""
    if sc.applicationId in _SHIPPED:
        return
    directory = tempfile.mkdtemp(prefix="rip81-job-")
    atexit.register(shutil.rmtree, directory, True)
    sc.addPyFile(project_zip(directory))
    _SHIPPED.add(sc.applicationId)


def run_spark(sc: Any, plan: Plan, partitions: int | None = None) -> list[Result]:
    """Ship the blocks and the base entries, key, partition, fold, collect: one Spark job."""
    cfg = plan.task_config()
    ship_project(sc)
    rdds, shipped = [], 0
    for batch in _batches(plan):  # one element (a block) per slice
        shipped += sum(len(p) for _, p in batch)
        rdds.append(sc.parallelize(batch, len(batch)))
    parts = partitions or max(2 * sc.defaultParallelism, shipped // (16 << 20) + 1)
    base = base_buckets(plan, parts)
    if base:
        rdds.append(sc.parallelize([(BASE_CHUNK, [b]) for b in base], len(base)))
    if not rdds:
        return assemble(plan, [])
    # one flatMap over the union of the shipped elements: keying pipelines into the shuffle's map side (a union
    # of keyed RDDs would pass every record through the JVM and a second Python worker)
    source = rdds[0] if len(rdds) == 1 else sc.union(rdds)
    keyed = source.flatMap(lambda e: e[1] if e[0] == BASE_CHUNK else keyed_block(cfg, e, parts))
    partials = keyed.partitionBy(parts, identity).mapPartitions(fold_partition).collect()
    return assemble(plan, partials)


def _batches(plan: Plan) -> Iterator[list[tuple[Any, bytes]]]:
    batch: list[tuple[Any, bytes]] = []
    size = 0
    for i in range(len(plan.sources)):
        for payload in source_blocks(plan, i):
            batch.append((i, payload))
            size += len(payload)
            if size >= SHIP_BYTES:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


# ------------------------------------------------------------------------------------------- output


def snapshot_of(res: Result, created_ms: int | None = None) -> Snapshot:
    return Snapshot(docs_from_image(res.image), dict(res.positions), created_ms or time.time_ns() // 1_000_000,
                    res.log_end)  # fmt: skip


def write_snapshot(directory: Path, snap: Snapshot) -> Path:
    """``snapshot-<created ms>.msgpack`` in ``directory`` (as ``SnapshotStore`` names them), atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"snapshot-{snap.created_ms:015d}.msgpack"
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(snap.encode())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def write_results(results: list[Result], out: Path) -> None:
    for res in results:
        directory = out if len(results) == 1 else out / res.name
        res.path = str(write_snapshot(directory, snapshot_of(res)))


def report(results: list[Result], seconds: dict[str, float], extra: dict[str, Any]) -> dict[str, Any]:
    outs = [{"broker": r.name, "snapshot": r.path, "positions": r.positions, "logOffset": r.log_end,
             "unreadableRecords": r.bad,
             "entries": {k: len(t.entries) for k, t in r.image.items()}} for r in results]  # fmt: skip
    return {**extra, "outputs": outs, "seconds": {k: round(v, 3) for k, v in seconds.items()}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Compact RIP-81 metadata change records into broker snapshots.")
    ap.add_argument("sources", nargs="+", metavar="[NAME=]PATH", help="store directories or export files")
    ap.add_argument("--out", required=True, help="output directory (one sub-directory per broker when several)")
    ap.add_argument("--master", default="local[*]", help="Spark master: local[*], local[2], spark://h:7077, yarn")
    ap.add_argument("--snapshot", help="base snapshot file replacing the sources' own (one output only)")
    ap.add_argument("--merge", action="store_true", help="fold every source into one image (one broker group)")
    ap.add_argument("--name", help="the output's broker name with --merge (default: the first source's)")
    ap.add_argument("--partitions", type=int, help="shuffle partitions (default: from the data size)")
    ap.add_argument("--allow-gaps", action="store_true", help="compact even when needed records expired")
    ap.add_argument("--no-tier", action="store_true", help="read store directories' local logs only, not their tiers")
    ap.add_argument("--no-spark", action="store_true", help="run the same tasks in this process (small inputs)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    base = Snapshot.decode(Path(args.snapshot).read_bytes()) if args.snapshot else None
    plan = make_plan(args.sources, merge=args.merge, base=base, name=args.name, allow_gaps=args.allow_gaps,
                     tier=not args.no_tier)  # fmt: skip
    seconds: dict[str, float] = {}
    try:
        if args.no_spark:
            results = run_local(plan, args.partitions or 4)
        else:
            sc = spark_context(args.master)
            seconds["sparkStart"] = time.perf_counter() - t0
            try:
                results = run_spark(sc, plan, args.partitions)
            finally:
                sc.stop()
    except RecordsExpired as exc:  # nothing written: the store (and its tier) no longer hold what is needed
        print(f"compact-metadata: {exc}", file=sys.stderr)
        return 2
    write_results(results, Path(args.out))
    seconds["total"] = time.perf_counter() - t0
    print(json.dumps(report(results, seconds, {"master": None if args.no_spark else args.master})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
