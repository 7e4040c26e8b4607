"""Loop-side work that grows with a broker's state, measured in process: prints one JSON object.

  .venv/bin/python scripts/bench/loop_work.py [--topics 2000] [--groups 500] [--inflight 128000,960000] [--repeat 5]

What the event loop does at once, with nothing else running, for a state of a given size (the best of
``--repeat`` runs, wall ms; a shared VM's figures swing):

* a ``/metrics`` scrape's consumer-lag and topic-offset lines (``container.dashboard.figures.prometheus_lines``)
  and the dashboard's groups and topics pages (``group_rows``, ``topic_rows``) of a real broker with ``--topics``
  topics of 8 queues and ``--groups`` groups, each with committed offsets on 20 topics (8 queues each);
* the encoding of the consumer-offset file (``prepare_persist_all`` with the offsets changed, every
  ``flushConsumerOffsetInterval``) and of a RIP-81 metadata snapshot (``meta.snapshot``);
* the name server's decode of the broker's registration (its whole topic table, every 30 s): first, and again;
* the timer index's snapshot on the loop (``timer_index_snapshot_on_loop_ms``, every ``timerFlushIntervalMs``);
* ``in_turns``: the scrape lines, the two pages and the RIP-81 snapshot as the broker now runs them, in loop turns
  (``brokerd.loopwork``): their whole time and the longest the loop is held at once;
* for each ``--inflight`` count, a POP state of that many messages in flight (pops of 32 on 8 queues): its
  per-group figures (``PopState.inflight_by_group``: a scrape and a dashboard poll), a STATE snapshot
  (``PopState.snapshot``), the same with half of each pop acknowledged, and what a restore of it costs;
* ``gc_freeze_count_ms_300k``: what counting a frozen heap of 300,000 objects costs (``gc.get_freeze_count``,
  which a scrape no longer calls), and ``loopmon_freeze_1k_new_next_to_300k_ms``: a later freeze, which counts
  only what it moves.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
import types
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import structlog
import uvloop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from brokerd import loopmon  # noqa: E402
from brokerd.loopwork import STEP_BUDGET_S  # noqa: E402
from brokerd.metadata.topic import TopicConfig  # noqa: E402
from brokerd.namesrv.body import TopicMemo, decode_register_body  # noqa: E402
from brokerd.namesrv.client import build_register_body  # noqa: E402
from brokerd.pop.records import Checkpoint  # noqa: E402
from brokerd.pop.state import PopState  # noqa: E402
from brokerd.sync.snapshot import encode_steps  # noqa: E402
from brokerd.timer.index import TimerIndex  # noqa: E402
from container.dashboard import figures  # noqa: E402
from scripts.bench.send_path_cpu import FakeTransport, start_broker  # noqa: E402


def in_turns_ms(make: Callable[[], Generator[object, None, object]], repeat: int) -> dict[str, float]:
    """A work generator driven as ``brokerd.loopwork.run_in_turns`` drives it (a turn given each
    ``STEP_BUDGET_S``): its whole time and the longest the loop was held at once, best of ``repeat``; the collector
    paused (a collection's pause is the collector's: ``rocketmq_gc_pause_seconds``, whatever runs)."""
    totals, longest = [], []
    clock = time.perf_counter
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            work, most = make(), 0.0
            t0 = start = clock()
            for _step in work:
                now = clock()
                if now - start >= STEP_BUDGET_S:
                    most, start = max(most, now - start), clock()
            end = clock()
            totals.append(end - t0)
            longest.append(max(most, end - start))
    finally:
        gc.enable()
    return {"total_ms": round(min(totals) * 1000, 2), "longest_turn_ms": round(min(longest) * 1000, 2)}


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return round(min(out) * 1000, 2)


async def metadata(topics: int, groups: int, repeat: int, root: str) -> dict[str, Any]:
    b, _ = await start_broker(root, "broker-a", 21000, "Bench", FakeTransport(), segment=32 << 20, max_index=100_000)
    try:
        for i in range(topics):
            b.meta.topics.update(TopicConfig(f"Topic{i:05d}", 8, 8))
        for g in range(groups):
            for t in range(20):
                for q in range(8):
                    b.meta.offsets.commit_offset("127.0.0.1:1", f"Group{g:04d}", f"Topic{(g * 7 + t) % topics:05d}", q,
                                                 100)  # fmt: skip
        directory = types.SimpleNamespace(brokers={"DefaultCluster:broker-a:0": types.SimpleNamespace(broker=b)})

        moved = iter(range(101, 1_000_000))

        def persist_offsets() -> None:  # one offset moved: the file is encoded whole
            b.meta.offsets.commit_offset("127.0.0.1:1", "Group0000", "Topic00000", 0, next(moved))
            b.meta.prepare_persist_all()

        registration = register_decode(b, repeat)
        return {"topics": topics, "groups": groups, "committed_queues": groups * 160, **registration,
                "scrape_lag_and_topic_lines_ms": best_ms(lambda: figures.prometheus_lines(directory), repeat),
                "dashboard_groups_ms": best_ms(lambda: figures.group_rows(b), repeat),
                "dashboard_topics_ms": best_ms(lambda: figures.topic_rows(b), repeat),
                "offsets_file_encode_ms": best_ms(persist_offsets, repeat),
                "metadata_snapshot_ms": best_ms(b.meta.snapshot, repeat),
                "in_turns": {  # what the loop runs since these are built in turns (brokerd/loopwork.py)
                    "scrape_lag_and_topic_lines": in_turns_ms(lambda: figures.prometheus_steps(directory), repeat),
                    "dashboard_groups": in_turns_ms(lambda: figures.page_json_steps(
                        directory, figures.iter_group_rows, figures.group_row_key), repeat),
                    "dashboard_topics": in_turns_ms(lambda: figures.page_json_steps(directory, figures.iter_topic_rows),
                                                    repeat),
                    "metadata_snapshot": in_turns_ms(lambda: encode_steps(b.meta.export_parts(), {}, 0, -1), repeat)}}
    finally:
        await b.shutdown()


def register_decode(b: Any, repeat: int) -> dict[str, float]:
    """The name server's decode of the broker's REGISTER_BROKER body (its whole topic table, every 30 s): a first
    registration, and a re-registration of the same table (``TopicMemo``), JSON and compressed."""
    out = {}
    table = {name: tc.to_json() for name, tc in b.meta.topics.all().items()}
    for compressed in (False, True):
        body = build_register_body(table, {"counter": 1, "stateVersion": 0, "timestamp": 1}, compressed)
        first = TopicMemo()
        kind = "compressed" if compressed else "json"
        out[f"register_decode_{kind}_first_ms"] = best_ms(
            lambda: decode_register_body(body, compressed=compressed, version=479, memo=TopicMemo()), repeat)  # noqa: B023
        decode_register_body(body, compressed=compressed, version=479, memo=first)
        out[f"register_decode_{kind}_again_ms"] = best_ms(
            lambda: decode_register_body(body, compressed=compressed, version=479, memo=TopicMemo(first.current)),  # noqa: B023
            repeat)
    return out


def timer_snapshot(root: str, repeat: int) -> float:
    """The timer index's snapshot as the loop takes it (every ``timerFlushIntervalMs`` while timers are added),
    default window (2 days of 1 s granules), one timer in it; its write runs in a worker thread."""
    idx = TimerIndex(Path(root), 1000, 2 * 86_400)
    idx.load()
    idx.fresh(0, 10_000, -1)
    idx.add(0, 100, 1, 10_000_000)

    def once() -> None:
        idx.added = 1
        idx.snapshot()

    try:
        return best_ms(once, repeat)
    finally:
        idx.close()


def pop_state(inflight: int, half_acked: bool) -> PopState:
    st, now = PopState(), 1_700_000_000_000
    for i in range(inflight // 32):
        q, start = i % 8, (i // 8) * 32
        ck = Checkpoint("G", "T", q, start, now + i, 60_000, range(start, start + 32), start + 32)
        st.apply_ck(ck)
        if half_acked:
            st.apply_ack(ck.key, range(start, start + 32, 2))
    return st


def pop(inflight: int, repeat: int) -> dict[str, Any]:
    st = pop_state(inflight, False)
    half = pop_state(inflight, True)
    data = half.snapshot()
    return {"inflight": inflight, "checkpoints": len(st.cks),
            "group_figures_ms": best_ms(lambda: st.inflight_by_group(1_700_000_030_000), repeat),
            "snapshot_ms": best_ms(st.snapshot, repeat), "snapshot_bytes": len(st.snapshot()),
            "snapshot_half_acked_ms": best_ms(half.snapshot, repeat), "snapshot_half_acked_bytes": len(data),
            "restore_half_acked_ms": best_ms(lambda: PopState.restore(data), max(1, repeat // 2))}


def freeze_count(repeat: int) -> dict[str, float]:
    """Counting a frozen heap of 300,000 objects (``gc.get_freeze_count``, which a scrape no longer calls), and a
    later ``loopmon.freeze`` of 1,000 new objects next to it (the controller's every 10 s), which no longer calls it."""
    junk = [[i, str(i)] for i in range(300_000)]
    loopmon.freeze()
    try:
        out = {"gc_freeze_count_ms_300k": best_ms(gc.get_freeze_count, repeat)}
        times = []
        for _ in range(repeat):
            young = [[i] for i in range(1000)]
            t = time.perf_counter()
            loopmon.freeze()
            times.append(time.perf_counter() - t)
            del young
        out["loopmon_freeze_1k_new_next_to_300k_ms"] = round(min(times) * 1000, 3)
        return out
    finally:
        loopmon.unfreeze()
        del junk


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--inflight", default="128000,960000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(open(os.devnull, "w")))  # stdout: the JSON only
    with tempfile.TemporaryDirectory(prefix="bench-loopwork-") as d:
        meta = uvloop.run(metadata(args.topics, args.groups, args.repeat, d))
        timer = timer_snapshot(d, args.repeat)
    doc = {"benchmark": "loop_work", "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
           "date": time.strftime("%Y-%m-%d %H:%M"), "load_average_1m": os.getloadavg()[0], "metadata": meta,
           "pop": [pop(int(n), args.repeat) for n in args.inflight.split(",")],
           "timer_index_snapshot_on_loop_ms": timer,
           **freeze_count(args.repeat)}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
