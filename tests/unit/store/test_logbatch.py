"""Bracketed batches (brokerd/logbatch.py) over the whole local log (brokerd/locallog.py) on a real store: every
prefix of the log shows a batch as done, not started, or cut with exactly the deliveries the prefix holds, found by
the digests BEGIN carries; the deliveries carry nothing of their batch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from brokerd.locallog import LocalLog
from brokerd.logbatch import (
    TAG_BEGIN,
    TAG_END,
    TAG_STATE,
    BatchFormatError,
    MarkedLog,
    decode_begin,
    delivery_digest,
    encode_begin,
)
from brokerd.message import MessageInner, decode_record
from brokerd.store.message_store import MessageStore
from tests.unit.store.conftest import STORE_HOST, StoreFactory, crash, make_msg

MARKS = "rmq_sys_TEST_MARKS"


def marked(store: MessageStore) -> MarkedLog:
    return MarkedLog(LocalLog(store), MARKS, 0, store_host=STORE_HOST)


def deliveries(n: int, tag: str, body_size: int = 100) -> list[MessageInner]:
    return [make_msg(f"Dest{i % 3}", 0, bytes([65 + i % 26]) * body_size, keys=f"{tag}-{i}", uniq=f"U-{tag}-{i}")
            for i in range(n)]  # fmt: skip


def record_ends(store: MessageStore, start: int) -> list[int]:
    """Physical end of each record from ``start`` to the log's end (a blank filler jumps to the next segment)."""
    return [phys + len(raw) for phys, raw in LocalLog(store).walk(start)]


async def test_complete_batches_leave_no_cut_batch_and_markers_read_back(make_store: StoreFactory) -> None:
    store = await make_store()
    log = marked(store)
    assert log.find_cut_batch() is None and log.last_marker() is None
    sent = [deliveries(4, f"b{b}") for b in range(3)]
    for b in range(3):
        res = log.append_batch(f"begin{b}".encode(), sent[b], f"end{b}".encode())
        assert res.ok and res.msg_num == 6
    assert log.append_markers(TAG_STATE, [b"state-0", b"state-1"]).ok
    assert log.find_cut_batch() is None
    got = log.read_markers(0)
    assert [(m.tag, m.body) for m in got] == [  # BEGIN's payload comes back as it was given
        *[(t, f"{w}{b}".encode()) for b in range(3) for t, w in ((TAG_BEGIN, "begin"), (TAG_END, "end"))],
        (TAG_STATE, b"state-0"), (TAG_STATE, b"state-1")]
    assert [len(m.digests) for m in got if m.tag == TAG_BEGIN] == [4, 4, 4]
    with pytest.raises(ValueError):
        log.append_markers(TAG_BEGIN, [b"x"])


async def test_deliveries_carry_nothing_of_their_batch(make_store: StoreFactory) -> None:
    store = await make_store()
    sent = deliveries(3, "d")
    assert marked(store).append_batch(b"b", [dataclasses.replace(d, properties=dict(d.properties)) for d in sent],
                                      b"e").ok
    for i, d in enumerate(sent):
        r = store.get_message(d.topic, 0, 0, 32)
        ext, _ = decode_record(r.buffers[0])
        assert ext.properties == d.properties and ext.body == d.body, i  # exactly what the service built


async def test_every_cut_of_a_batch_shows_exactly_the_deliveries_before_it(make_store: StoreFactory) -> None:
    # 8 KiB segments: the batch's records cross segment ends (blank fillers in between)
    store = await make_store(mapped_file_size_commit_log=8192)
    log = marked(store)
    assert log.append_batch(b"b0", deliveries(3, "first", 900), b"e0").ok
    start = store.max_phy_offset
    assert log.append_batch(b"b1", deliveries(12, "second", 900), b"e1").ok
    ends = record_ends(store, start)
    assert len(ends) == 14  # BEGIN, 12 deliveries, END
    assert len({e // 8192 for e in ends}) >= 3  # it crosses two segment ends
    for cut, end in enumerate(ends[:-1]):  # a prefix holding BEGIN and `cut` deliveries
        store.truncate_dirty_files(end)
        found = log.find_cut_batch()
        assert found is not None and found.begin.body == b"b1"
        assert [d.properties["KEYS"] for d in found.delivered] == [f"second-{i}" for i in range(cut)]
        store.truncate_dirty_files(start)
        assert log.find_cut_batch() is None  # the first batch is complete
        assert log.append_batch(b"b1", deliveries(12, "second", 900), b"e1").ok
    store.truncate_dirty_files(ends[-2])
    whole = log.find_cut_batch()
    assert whole is not None and len(whole.delivered) == 12
    assert log.close_cut_batch(b"closed").ok
    assert log.find_cut_batch() is None


@pytest.mark.parametrize("made", [0, 2, 5])
async def test_records_appended_after_a_crash_are_never_taken_for_deliveries(make_store: StoreFactory,
                                                                            tmp_path: Path, made: int) -> None:
    """After a crash, others may append before the service closes its cut batch: a client sending the very next
    delivery's message again (same topic, queue, body, properties, unique key: a new born timestamp), another
    record with its body, another service's marker. None counts as one of the batch's deliveries."""
    root = tmp_path / "crashed"
    store = await make_store(root)
    log = marked(store)
    sent = deliveries(5, "x")
    assert log.append_batch(b"b0", sent, b"e0").ok
    ends = record_ends(store, 0)
    store.truncate_dirty_files(ends[made])  # BEGIN + `made` deliveries reached the disk, then the process died
    await crash(store)
    again = await make_store(root)
    cut = marked(again).find_cut_batch()
    assert cut is not None and [d.properties["KEYS"] for d in cut.delivered] == [f"x-{i}" for i in range(made)]
    if made < len(sent):
        nxt = sent[made]
        resent = dataclasses.replace(nxt, properties=dict(nxt.properties), born_timestamp=nxt.born_timestamp + 1)
        assert delivery_digest(resent) != delivery_digest(nxt)
        assert again.append_message(resent).ok
    assert again.append_message(make_msg("Dest0", 0, bytes([65]) * 100, keys="x-0")).ok
    assert again.append_message(make_msg("rmq_sys_OTHER_MARKS", 0, b"b0", tags=TAG_BEGIN)).ok
    cut = marked(again).find_cut_batch()
    assert cut is not None and len(cut.delivered) == made


async def test_the_view_sees_the_whole_local_log_past_the_confirm_hold(make_store: StoreFactory) -> None:
    """Consumers are held at the confirm offset (HA); the service's own markers and deliveries are not."""
    store = await make_store()
    log = marked(store)
    assert log.append_batch(b"b0", deliveries(2, "a"), b"e0").ok
    confirmed = store.max_phy_offset
    store.set_dispatch_behind_confirm(True)
    store.set_confirm_offset(confirmed)
    assert log.append_batch(b"b1", deliveries(2, "b"), b"e1").ok
    assert store.max_offset_in_queue(MARKS, 0) == 2  # what a consumer sees
    local = log.local
    assert local.max_offset_in_queue(MARKS, 0) == 4
    assert [m.body for m in log.read_markers(0)] == [b"b0", b"e0", b"b1", b"e1"]
    last = log.last_marker()
    assert last is not None and last.tag == TAG_END and last.body == b"e1"
    e = local.entry(MARKS, 0, 3)
    assert e is not None and e.qoff == 3 and e.phys + e.size == store.max_phy_offset
    rec = local.record(e.phys, e.size)
    assert rec is not None and rec.body == b"e1" and local.record(e.phys, e.size + 1) is None
    assert local.read(store.max_phy_offset, 8) is None and local.raw_at(store.max_phy_offset) is None


async def test_an_unreadable_begin_is_a_cut_batch_with_no_deliveries(make_store: StoreFactory) -> None:
    store = await make_store()
    log = marked(store)
    assert log.append_batch(b"b0", deliveries(2, "a"), b"e0").ok
    assert store.append_messages([log.marker(TAG_BEGIN, b"not an envelope"), *deliveries(1, "z")]).ok
    cut = log.find_cut_batch()
    assert cut is not None and cut.begin.body == b"" and cut.delivered == []


def test_the_begin_envelope_gives_the_payload_back() -> None:
    for payload, digests in ((b"", ()), (b"\x00payload", (0, 1, 0xFFFFFFFF)), (b"x" * 5000, tuple(range(1024)))):
        assert decode_begin(encode_begin(payload, digests)) == (payload, digests)
    whole = encode_begin(b"p", (1, 2))
    for bad in (b"", b"LBB", b"XXXX" + whole[4:], whole[:10]):
        with pytest.raises(BatchFormatError):
            decode_begin(bad)
