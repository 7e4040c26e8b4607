"""A slave applying the master's log (``append_raw`` in random chunk sizes, records cut anywhere, segment rolls)
and a store re-dispatching its log (recovery ``reput``) end with the master's consume queues, index lookups and
next queue offsets, on the Python path (``raw_scan.SCANNER`` None, the reference) and with the C scanner alike;
the two paths notify the same dispatch listeners and fail the same way when a consume-queue put fails."""

from __future__ import annotations

import errno
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from brokerd.store import dispatch, raw_scan
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.message_store import MessageStore
from brokerd.store.raw_scan import Scanned

from .conftest import StoreFactory
from .varied_log import fill_varied, whole_log

SEG = 8192
NATIVE = raw_scan.SCANNER
IMPLS = ["python", pytest.param("c", marks=pytest.mark.skipif(NATIVE is None, reason="brokerd._native not built"))]


def use(impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raw_scan, "SCANNER", NATIVE if impl == "c" else None)


def state(store: MessageStore, keys: list[str]) -> dict[str, Any]:
    """Everything dispatch produces: queue entries, next queue offsets, positions and index lookups."""
    queues = {
        k: [cq.entry(q) for q in range(cq.min_offset, cq.max_offset)] for k, cq in store.queue_store.queues.items()
    }
    lookups = {(t, k): store.query_message(t, k, 64, 0, 2**62).buffers for t in store.topics() for k in keys}
    d = store.dispatcher
    return {"queues": queues, "next": dict(d.next_queue_offsets), "lookups": lookups,
            "positions": (store.max_phy_offset, d.dispatched, d.valid_end), "ts": store.last_store_timestamp}  # fmt: skip


def comparable_to_master(s: dict[str, Any]) -> dict[str, Any]:
    """The master's tags codes come from the message objects, the slave's from the stored properties (they differ
    for the odd properties varied_log writes): compare queue entries without them."""
    return {**s, "queues": {k: [e[:2] for e in v] for k, v in s["queues"].items()}, "ts": None}


async def master_with_log(make_store: StoreFactory, root: Path, seed: int) -> tuple[MessageStore, bytes, list[str]]:
    master = await make_store(root, mapped_file_size_commit_log=SEG)
    keys = await fill_varied(master, random.Random(seed), 90)
    return master, whole_log(master), keys + ["k1", "k2", "u-only"]


def feed(slave: MessageStore, log: bytes, rng: random.Random, upto: int | None = None) -> None:
    pos = slave.max_phy_offset
    end = len(log) if upto is None else upto
    while pos < end:
        n = min(end - pos, rng.choice([1, 7, 100, 999, 3000, 9000, 30000]))
        assert slave.append_raw(pos, log[pos : pos + n]) == pos + n
        pos += n


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_slave_fed_in_random_chunks_matches_the_master_both_ways(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    master, log, keys = await master_with_log(make_store, tmp_path / "m", seed)
    want = comparable_to_master(state(master, keys))
    results = {}
    for impl in ("python", "c") if NATIVE is not None else ("python",):
        use(impl, monkeypatch)
        slave = await make_store(tmp_path / impl, mapped_file_size_commit_log=SEG)
        heard: list[tuple[str, int, int, int]] = []
        slave.add_dispatch_listener(lambda *a: heard.append(a))  # noqa: B023 - used before the next iteration
        feed(slave, log, random.Random(seed * 100))
        results[impl] = (state(slave, keys), heard)
        assert comparable_to_master(results[impl][0]) == want
        newest = {(t, q): o for t, q, o, _tags in heard}  # heard in log order: the last is the newest
        assert newest == {k: len(v) - 1 for k, v in want["queues"].items() if v}
    if "c" in results:
        assert results["c"] == results["python"]


@pytest.mark.parametrize("impl", IMPLS)
async def test_a_failed_queue_put_stops_dispatch_and_reput_redoes_it(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, impl: str
) -> None:
    master, log, keys = await master_with_log(make_store, tmp_path / "m", 5)
    want = comparable_to_master(state(master, keys))
    use(impl, monkeypatch)
    slave = await make_store(tmp_path / "s", mapped_file_size_commit_log=SEG)
    rng = random.Random(9)
    feed(slave, log, rng, len(log) // 3)
    real = slave.queue_store.get_or_create
    calls = [0]

    def failing(topic: str, qid: int) -> Any:
        calls[0] += 1
        if calls[0] == 5:
            raise OSError(errno.EIO, "injected")
        return real(topic, qid)

    monkeypatch.setattr(slave.queue_store, "get_or_create", failing)
    with pytest.raises(RuntimeError, match="not writeable"):
        feed(slave, log, rng, 2 * len(log) // 3)
    assert slave.running_flags.has(WRITE_LOGICS_QUEUE_ERROR) and slave.last_error == "reput: [Errno 5] injected"
    stuck = slave.dispatcher.dispatched
    assert stuck < slave.dispatcher.valid_end and slave.commit_log.record_size_at(stuck) > 0
    slave.running_flags.clear(WRITE_LOGICS_QUEUE_ERROR)
    feed(slave, log, rng)  # the next append re-dispatches from the stuck record (reput from the log)
    assert comparable_to_master(state(slave, keys)) == want


async def test_the_failure_point_is_the_same_on_both_paths(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if NATIVE is None:
        pytest.skip("brokerd._native not built")
    _, log, _ = await master_with_log(make_store, tmp_path / "m", 6)
    seen = {}
    for impl in ("python", "c"):
        use(impl, monkeypatch)
        slave = await make_store(tmp_path / impl, mapped_file_size_commit_log=SEG)
        real, calls = slave.queue_store.get_or_create, [0]

        def failing(topic: str, qid: int, real: Any = real, calls: list[int] = calls) -> Any:
            calls[0] += 1
            if calls[0] == 40:
                raise OSError(errno.EIO, "injected")
            return real(topic, qid)

        monkeypatch.setattr(slave.queue_store, "get_or_create", failing)
        slave.append_raw(0, log)
        d = slave.dispatcher
        seen[impl] = (d.dispatched, d.valid_end, d.last_reput_timestamp, dict(d.next_queue_offsets), slave.last_error)
    assert seen["c"] == seen["python"]


def counting_scanner(calls: list[int], fail_after: int | None = None) -> raw_scan.ScanFn:
    """The C scanner, counting its calls; giving up after ``fail_after`` calls (as on unusual bytes)."""

    def scan(buf: Any, base: int, seg: int, verify: bool) -> tuple[int, list[Scanned]]:
        calls[0] += 1
        if fail_after is not None and calls[0] > fail_after:
            raise ValueError("unusual bytes")
        assert NATIVE is not None
        return NATIVE(buf, base, seg, verify)

    return scan


RECOVERY_IMPLS = {  # name: (C scanner, window, its failure point)
    "python": (False, dispatch.REPUT_WINDOW, None),
    "c": (True, dispatch.REPUT_WINDOW, None),
    "c-windows-700": (True, 700, None),  # records and blank markers larger than the window
    "c-windows-3000": (True, 3000, None),
    "c-then-python": (True, dispatch.REPUT_WINDOW, 1),  # the Python walk carries on after the first segment
}


async def test_recovery_reput_rebuilds_the_queues_and_index_on_every_path(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, log, keys = await master_with_log(make_store, tmp_path / "m", 4)
    want = comparable_to_master(state(master, keys))
    await master.shutdown()
    results = {}
    for impl, (native, window, fail_after) in RECOVERY_IMPLS.items():
        if native and NATIVE is None:
            continue
        copy = tmp_path / impl
        shutil.copytree(tmp_path / "m", copy, ignore=shutil.ignore_patterns("lock"))
        for name in ("consumequeue", "index"):
            shutil.rmtree(copy / name)
        (copy / "checkpoint").unlink()  # recovery re-dispatches the whole log
        calls = [0]
        monkeypatch.setattr(raw_scan, "SCANNER", counting_scanner(calls, fail_after) if native else None)
        monkeypatch.setattr(dispatch, "REPUT_WINDOW", window)
        store = await make_store(copy, mapped_file_size_commit_log=SEG)
        assert store.recovery is not None and store.recovery.start == 0
        results[impl] = state(store, keys)
        assert comparable_to_master(results[impl]) == want
        if native:
            segments = -(-len(log) // SEG)
            want_calls = 2 if fail_after else segments if window > SEG else calls[0]
            assert calls[0] == want_calls and (window > SEG or calls[0] > 3 * segments)  # small: several per segment
        await store.shutdown()
    assert all(r == results["python"] for r in results.values())
