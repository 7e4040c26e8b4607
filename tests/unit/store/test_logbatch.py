"""Bracketed batches (brokerd/logbatch.py) on a real store: every prefix of the log shows a batch as done, not
started, or cut with exactly the deliveries the prefix holds."""

from __future__ import annotations

from pathlib import Path

from brokerd.logbatch import BATCH_PROPERTY, TAG_BEGIN, TAG_END, TAG_STATE, MarkedLog
from brokerd.message import MessageInner, decode_record
from brokerd.store.message_store import MessageStore
from tests.unit.store.conftest import STORE_HOST, StoreFactory, crash, make_msg

MARKS = "rmq_sys_TEST_MARKS"


def marked(store: MessageStore) -> MarkedLog:
    return MarkedLog(store, MARKS, 0, segment_size=store.cfg.mapped_file_size_commit_log, store_host=STORE_HOST)


def deliveries(n: int, tag: str, body_size: int = 100) -> list[MessageInner]:
    return [make_msg(f"Dest{i % 3}", 0, bytes([65 + i % 26]) * body_size, keys=f"{tag}-{i}") for i in range(n)]


def record_ends(store: MessageStore, start: int) -> list[int]:
    """Physical end of each record from ``start`` to the log's end (a blank filler jumps to the next segment)."""
    seg = store.cfg.mapped_file_size_commit_log
    ends, phys = [], start
    while phys < store.max_phy_offset:
        size = store.commit_log.record_size_at(phys)
        if size <= 0:
            phys = (phys // seg + 1) * seg
            continue
        phys += size
        ends.append(phys)
    return ends


async def test_complete_batches_leave_no_cut_batch_and_markers_read_back(make_store: StoreFactory) -> None:
    store = await make_store()
    log = marked(store)
    assert log.find_cut_batch() is None and log.last_marker() is None
    for b in range(3):
        res = log.append_batch(f"begin{b}".encode(), deliveries(4, f"b{b}"), f"end{b}".encode())
        assert res.ok and res.msg_num == 6
    log.append_state(b"state")
    assert log.find_cut_batch() is None
    got = log.read_markers(0)
    assert [(m.tag, m.body) for m in got] == [
        *[(t, f"{w}{b}".encode()) for b in range(3) for t, w in ((TAG_BEGIN, "begin"), (TAG_END, "end"))],
        (TAG_STATE, b"state")]
    r = store.get_message("Dest1", 0, 0, 32)
    first, _ = decode_record(r.buffers[0])
    assert first.properties[BATCH_PROPERTY] == log.batch_id(0)


async def test_every_cut_of_a_batch_shows_exactly_the_deliveries_before_it(make_store: StoreFactory,
                                                                          tmp_path: Path) -> None:
    # 8 KiB segments: the batch's records cross segment ends (blank fillers in between)
    store = await make_store(mapped_file_size_commit_log=8192)
    log = marked(store)
    assert log.append_batch(b"b0", deliveries(3, "first", 900), b"e0").ok
    start = store.max_phy_offset
    assert log.append_batch(b"b1", deliveries(12, "second", 900), b"e1").ok
    ends = record_ends(store, start)
    assert len(ends) == 14  # BEGIN, 12 deliveries, END
    for cut, end in enumerate(ends[:-1]):  # a prefix holding BEGIN and `cut` deliveries
        store.truncate_dirty_files(end)
        found = log.find_cut_batch()
        assert found is not None and found.begin.body == b"b1"
        assert [d.properties["KEYS"] for d in found.delivered] == [f"second-{i}" for i in range(cut)]
        store.truncate_dirty_files(start)
        assert log.find_cut_batch() is None  # the first batch is complete
        assert log.append_batch(b"b1", deliveries(12, "second", 900), b"e1").ok
    store.truncate_dirty_files(ends[-2])
    cut = log.find_cut_batch()
    assert cut is not None and len(cut.delivered) == 12
    assert log.close_cut_batch(b"closed").ok
    assert log.find_cut_batch() is None


async def test_a_cut_batch_survives_a_crash_and_recovery(make_store: StoreFactory, tmp_path: Path) -> None:
    root = tmp_path / "crashed"
    store = await make_store(root)
    log = marked(store)
    assert log.append_batch(b"b0", deliveries(5, "x"), b"e0").ok
    ends = record_ends(store, 0)
    store.truncate_dirty_files(ends[3])  # BEGIN + 3 deliveries reached the disk, then the process died
    await crash(store)
    again = await make_store(root)
    cut = marked(again).find_cut_batch()
    assert cut is not None and [d.properties["KEYS"] for d in cut.delivered] == ["x-0", "x-1", "x-2"]
    # records appended after the restart (another service's, a client's) do not count as the batch's
    assert (await again.put_message(make_msg("Dest0", 0, b"later", keys="later"))).ok
    cut = marked(again).find_cut_batch()
    assert cut is not None and len(cut.delivered) == 3
