"""The store's batch append (``MessageStore.append_messages`` / ``put_messages``, brokerd/store/batch_append.py), run
by each implementation (the C run and the Python reference): the store's invariants for a batch."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from brokerd import message as m
from brokerd.message import MessageInner, decode_record, decode_records
from brokerd.native import native
from brokerd.store.flags import NOT_WRITEABLE, WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.message_store import MessageStore
from brokerd.store.results import PutStatus
from tests.unit.store.conftest import STORE_HOST, StoreFactory, crash, make_msg

HAVE_NATIVE = native is not None and hasattr(native, "BatchAppender")


@pytest.fixture(params=["native", "python"])
def impl(request: pytest.FixtureRequest) -> str:
    if request.param == "native" and not HAVE_NATIVE:
        pytest.skip("brokerd._native with BatchAppender not built (or BROKERD_NATIVE=0)")
    return str(request.param)


async def started(make_store: StoreFactory, impl: str, root: Path | None = None, **overrides: Any) -> MessageStore:
    store = await make_store(root, **overrides)
    store.use_native_batch(impl == "native")
    assert store.batch_stats()["native"] is (impl == "native")
    return store


def read_queue(store: MessageStore, topic: str, qid: int) -> list[tuple[int, bytes]]:
    r = store.get_message(topic, qid, 0, 1000, 1 << 30)
    return [(x.queue_offset, x.body) for x in decode_records(b"".join(r.buffers))]


def positions(store: MessageStore) -> tuple[int, int, int, dict[tuple[str, int], int]]:
    return store.max_phy_offset, store.dispatched_offset, store.valid_end, dict(store.dispatcher.next_queue_offsets)


async def test_queue_offsets_follow_call_order_across_topics_and_queues(make_store: StoreFactory, impl: str) -> None:
    store = await started(make_store, impl)
    store.append_messages([make_msg("A", 1, b"warm")])
    batch = [make_msg("A", 1, b"a1"), make_msg("B", 0, b"b0"), make_msg("A", 1, b"a2"),
             make_msg("A", 0, b"half", sys_flag=m.TRANSACTION_PREPARED_TYPE, keys="half"), make_msg("B", 0, b"b1"),
             make_msg("A", 1, b"a3", keys="k3 k4", uniq="U3")]  # fmt: skip
    res = store.append_messages(batch)
    assert res.ok and res.msg_num == 6 and res.queue_offset == 1 and res.end_offset == store.max_phy_offset
    assert read_queue(store, "A", 1) == [(0, b"warm"), (1, b"a1"), (2, b"a2"), (3, b"a3")]
    assert read_queue(store, "B", 0) == [(0, b"b0"), (1, b"b1")]
    assert store.max_offset_in_queue("A", 0) == 0  # a prepared half message has no consume-queue entry
    ids = res.msg_id.split(",")
    records = [decode_record(store.look_message_by_offset(int(i[16:], 16)) or b"")[0] for i in ids]
    assert [r.body for r in records] == [x.body for x in batch] and records[3].queue_offset == 0
    assert sum(r.store_size for r in records) == res.wrote_bytes and records[0].commit_log_offset == res.wrote_offset
    for key in ("k3", "k4", "U3", "half"):
        assert len(store.query_message("A", key, 10, 0, 2**62).buffers) == 1


@pytest.mark.parametrize("bad", ["body", "props", "topic", "queue", "segment"])
async def test_an_invalid_message_stores_nothing_of_its_batch(make_store: StoreFactory, impl: str, bad: str) -> None:
    store = await started(make_store, impl, max_message_size=4096, mapped_file_size_commit_log=32 * 1024)
    store.append_messages([make_msg("A", 0, b"before")])
    before = positions(store)
    wrong = {"body": make_msg(body=b"x" * 5000), "props": make_msg(props={"P": "v" * 40_000}),
             "topic": make_msg(topic="a/b"), "queue": make_msg(queue_id=-1),
             "segment": make_msg(topic="T" * 3000, props={"P": "v" * 30_000})}[bad]  # fmt: skip
    res = store.append_messages([make_msg("A", 0, b"1"), make_msg("B", 0, b"2"), wrong, make_msg("A", 0, b"3")])
    want = PutStatus.PROPERTIES_SIZE_EXCEEDED if bad == "props" else PutStatus.MESSAGE_ILLEGAL
    assert res.status is want
    assert positions(store) == before and read_queue(store, "A", 0) == [(0, b"before")]
    assert store.append_messages([make_msg("A", 0, b"after")]).queue_offset == 1


async def test_a_batch_crossing_segment_ends_rolls_with_the_blank_filler(make_store: StoreFactory, impl: str) -> None:
    seg = 8192
    store = await started(make_store, impl, mapped_file_size_commit_log=seg)
    res = store.append_messages([make_msg("A", i % 2, bytes([65 + i]) * 2000, keys=f"k{i}") for i in range(12)])
    assert res.ok and len(store.commit_log.files) >= 4 and res.end_offset == store.max_phy_offset
    bodies = [b for q in (0, 1) for _, b in read_queue(store, "A", q)]
    assert sorted(bodies) == sorted(bytes([65 + i]) * 2000 for i in range(12))
    records = [(p, store.commit_log.record_size_at(p)) for p in (int(i[16:], 16) for i in res.msg_id.split(","))]
    assert all(size > 0 and p // seg == (p + size - 1) // seg for p, size in records)  # none straddles a segment
    for f in store.commit_log.files[:-1]:  # a full segment ends with the blank filler covering its rest
        assert f.wrote == seg
        end = max(p + size for p, size in records if f.base <= p < f.end)
        assert struct.unpack(">ii", store.read_raw(end, end + 8)) == (f.end - end, m.MAGIC_BLANK)


async def test_listeners_hear_each_queue_once_and_the_append_listener_once(make_store: StoreFactory, impl: str) -> None:
    store = await started(make_store, impl)
    seen: list[tuple[str, int, int, int]] = []
    appended: list[int] = []
    store.add_dispatch_listener(lambda *a: seen.append(a))
    store.set_append_listener(lambda: appended.append(store.max_phy_offset))
    res = store.append_messages([make_msg("A", 0, tags="t1"), make_msg("B", 2), make_msg("A", 0, tags="t2"),
                                 make_msg(m.SCHEDULE_TOPIC, 2, props={m.DELAY: "3"}, store_ts=5_000)])  # fmt: skip
    assert seen == [("A", 0, 1, m.tags_code_of("t2")), ("B", 2, 0, 0), (m.SCHEDULE_TOPIC, 2, 0, 5_000 + 10_000)]
    assert appended == [res.end_offset]


async def test_sync_flush_batch_answers_once_durable(make_store: StoreFactory, impl: str) -> None:
    store = await started(make_store, impl, flush_disk_type="SYNC_FLUSH")
    flushes = store.flush_count
    res = await store.put_messages([make_msg("A", 0, b"x" * 1000) for _ in range(50)])
    assert res.ok and store.flushed_offset >= res.end_offset and store.flush_count > flushes
    res = store.append_messages([make_msg("A", 0)])  # no wait: the caller waits for what it needs
    assert res.ok and await store.wait_flushed(res.end_offset)
    # WAIT=false: answered at once, made durable by the flush it requests
    res = await store.put_messages([make_msg("A", 0, props={"WAIT": "false"}), make_msg("B", 0)])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while store.flushed_offset < res.end_offset and loop.time() < deadline:
        await asyncio.sleep(0.005)  # sleep-ok: polling the flushed offset with a deadline
    assert res.ok and store.flushed_offset >= res.end_offset


async def test_confirm_hold_keeps_a_batch_from_readers_and_listeners(make_store: StoreFactory, impl: str) -> None:
    store = await started(make_store, impl)
    store.set_dispatch_behind_confirm(True)
    store.set_confirm_offset(store.max_phy_offset)
    seen: list[tuple[str, int, int, int]] = []
    store.add_dispatch_listener(lambda *a: seen.append(a))
    res = store.append_messages([make_msg("A", 0, b"1"), make_msg("A", 0, b"2"), make_msg("B", 0, b"3")])
    assert res.ok and seen == [] and store.max_offset_in_queue("A", 0) == 0
    store.set_confirm_offset(res.end_offset)
    assert sorted(seen) == [("A", 0, 1, 0), ("B", 0, 0, 0)] and store.max_offset_in_queue("A", 0) == 2


async def test_a_failed_index_put_stops_dispatch_until_retried(
    make_store: StoreFactory, impl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await started(make_store, impl)
    index = store.index
    assert index is not None
    real_put = index.put_keys

    def put_keys(topic: str, keys: list[str], phys: int, ts: int) -> None:
        if "boom" in keys:
            raise OSError(28, "No space left on device")
        real_put(topic, keys, phys, ts)

    monkeypatch.setattr(index, "current_file", lambda: None)  # the C run hands every record to put_keys
    monkeypatch.setattr(index, "put_keys", put_keys)
    store.use_native_batch(impl == "native")  # bound to the patched index methods
    res = store.append_messages([make_msg("A", 0, b"1", keys="a"), make_msg("A", 0, b"2", keys="boom"),
                                 make_msg("A", 0, b"3", keys="c")])  # fmt: skip
    boom = int(res.msg_id.split(",")[1][16:], 16)
    assert res.ok and store.running_flags.has(WRITE_LOGICS_QUEUE_ERROR)
    assert store.dispatched_offset == boom and store.max_phy_offset == res.end_offset
    assert store.append_messages([make_msg("A", 0)]).status is PutStatus.SERVICE_NOT_AVAILABLE
    monkeypatch.setattr(index, "put_keys", real_put)
    assert store.retry_dispatch() and store.dispatched_offset == res.end_offset
    assert [b for _, b in read_queue(store, "A", 0)] == [b"1", b"2", b"3"]
    assert len(store.query_message("A", "c", 10, 0, 2**62).buffers) == 1


async def test_a_failed_write_stores_nothing_and_stops_writes(
    make_store: StoreFactory, impl: str, tmp_path: Path
) -> None:
    store = await started(make_store, impl)
    store.append_messages([make_msg("A", 0, b"before")])
    before = positions(store)
    f = store.commit_log.files[-1]
    real_fd, f.fd = f.fd, os.open(f.path, os.O_RDONLY)  # pwrite fails: EBADF
    try:
        res = store.append_messages([make_msg("A", 0, b"1"), make_msg("B", 0, b"2")])
    finally:
        os.close(f.fd)
        f.fd = real_fd
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE and store.running_flags.has(NOT_WRITEABLE)
    assert positions(store) == before and store.last_error is not None


async def test_a_crash_inside_a_batch_recovers_to_the_last_whole_record(
    make_store: StoreFactory, impl: str, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = await started(make_store, impl, root, mapped_file_size_commit_log=8192)
    store.append_messages([make_msg("A", 0, b"first")])
    res = store.append_messages([make_msg("A", i % 2, bytes([65 + i]) * 1500, keys=f"k{i}") for i in range(12)])
    phys = [int(i[16:], 16) for i in res.msg_id.split(",")]
    await crash(store)
    # the write of the records from the 8th on was torn: a body byte of the 8th never reached the disk
    seg = 8192
    path = root / "commitlog" / f"{phys[7] - phys[7] % seg:020d}"
    with open(path, "r+b") as fh:
        fh.seek(phys[7] % seg + 200)
        fh.write(b"\x00")
    store = await started(make_store, impl, root, mapped_file_size_commit_log=8192)
    assert store.max_phy_offset == phys[7]
    kept = [b for q in (0, 1) for _, b in read_queue(store, "A", q)]
    assert sorted(kept) == sorted([b"first"] + [bytes([65 + i]) * 1500 for i in range(7)])
    res = store.append_messages([make_msg("A", 1, b"again"), make_msg("A", 0, b"again0")])
    assert res.ok and read_queue(store, "A", 1)[-1] == (len([i for i in range(7) if i % 2]), b"again")
    assert read_queue(store, "A", 0)[-1][1] == b"again0"


async def test_a_batch_the_c_run_cannot_take_is_stored_by_python_and_counted(make_store: StoreFactory) -> None:
    if not HAVE_NATIVE:
        pytest.skip("brokerd._native with BatchAppender not built (or BROKERD_NATIVE=0)")
    store = await make_store()

    class Sub(MessageInner):  # another type: its slots may be overridden
        __slots__ = ()

    odd = make_msg("A", 0, b"2")
    odd.properties["N"] = 5  # type: ignore[assignment]
    sub = Sub("A", 0, b"3", 0, {}, 0, 0, ("10.0.0.1", 1), STORE_HOST)
    batches: list[list[MessageInner]] = [[make_msg("A", 0, b"1"), odd], [sub]]
    for batch in batches:
        assert store.append_messages(batch).ok
    stats = store.batch_stats()
    assert stats["fallbacks"]["properties"] == 1 and stats["fallbacks"]["type"] == 1
    got = decode_records(b"".join(store.get_message("A", 0, 0, 10).buffers))
    assert [x.body for x in got] == [b"1", b"2", b"3"] and got[1].properties["N"] == "5"
