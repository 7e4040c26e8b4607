"""Restart and crash recovery with real files: torn writes, lost checkpoints, clean restarts."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from brokerd.message import decode_records, verify_record
from brokerd.store.message_store import MessageStore
from brokerd.store.results import GetMessageStatus as G
from brokerd.store.results import PutMessageResult, PutStatus

from .conftest import STORE_HOST, StoreFactory, config, crash, make_msg


def segment_path(tmp_path: Path, base: int) -> Path:
    return tmp_path / "store" / "commitlog" / f"{base:020d}"


def assert_log_valid(store: MessageStore) -> int:
    """Walk the whole log: every record verifies (magic, sizes, CRC). Returns the record count."""
    n = 0
    for _phys, f, pos, size in store.commit_log.walk(store.min_phy_offset, store.max_phy_offset):
        if size > 0:
            verify_record(f.mm, pos, f.wrote)
            n += 1
    return n


def assert_queues_consistent(store: MessageStore) -> None:
    for (topic, qid), cq in store.queue_store.queues.items():
        for q in range(cq.min_offset, cq.max_offset):
            entry = cq.entry(q)
            assert entry is not None
            raw = store.look_message_by_offset(entry[0])
            assert raw is not None and len(raw) == entry[1]
            rec = decode_records(raw)[0]
            assert (rec.topic, rec.queue_id, rec.queue_offset) == (topic, qid, q)


async def put_many(store: MessageStore, n: int, **kw: object) -> list[PutMessageResult]:
    out = []
    for i in range(n):
        r = await store.put_message(make_msg(queue_id=i % 3, body=f"body-{i}".encode() * 20, keys=f"k{i}", **kw))  # type: ignore[arg-type]
        assert r.status is PutStatus.PUT_OK
        out.append(r)
    return out


async def test_clean_restart_is_fast_and_keeps_everything(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store(mapped_file_size_commit_log=8192)
    results = await put_many(store, 40)
    await store.shutdown()
    assert not (tmp_path / "store" / "abort").exists()
    store2 = await make_store(mapped_file_size_commit_log=8192)
    rec = store2.recovery
    assert rec is not None and not rec.abnormal and rec.start == rec.end == results[-1].wrote_offset + results[-1].wrote_bytes
    assert [store2.max_offset_in_queue("TopicA", q) for q in range(3)] == [14, 13, 13]
    nxt = await store2.put_message(make_msg(queue_id=1))
    assert nxt.queue_offset == 13 and nxt.wrote_offset >= rec.end
    assert len(store2.query_message("TopicA", "k39", 5, 0, 2**62).buffers) == 1


async def test_crash_keeps_all_written_messages(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store(mapped_file_size_commit_log=8192)
    results = await put_many(store, 50)
    await crash(store)
    assert (tmp_path / "store" / "abort").exists()
    store2 = await make_store(mapped_file_size_commit_log=8192)
    assert store2.recovery is not None and store2.recovery.abnormal
    assert store2.max_phy_offset == results[-1].wrote_offset + results[-1].wrote_bytes
    assert assert_log_valid(store2) == 50
    assert_queues_consistent(store2)
    for r in results:
        assert store2.look_message_by_offset(r.wrote_offset) is not None


async def test_torn_write_is_truncated_exactly_at_the_broken_record(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store()
    results = await put_many(store, 12)
    await crash(store)
    last = results[-1]
    seg = segment_path(tmp_path, 0)
    with open(seg, "r+b") as f:  # tear the last record: its second half never reached the disk
        f.seek(last.wrote_offset + last.wrote_bytes // 2)
        f.write(os.urandom(last.wrote_bytes - last.wrote_bytes // 2))
    store2 = await make_store()
    assert store2.recovery is not None and store2.recovery.torn_tail
    assert store2.max_phy_offset == last.wrote_offset
    with open(seg, "rb") as f:
        f.seek(last.wrote_offset)
        assert f.read(4096) == bytes(4096)  # the torn bytes were zeroed
    assert assert_log_valid(store2) == 11
    assert_queues_consistent(store2)
    assert store2.max_offset_in_queue("TopicA", 2) == last.queue_offset  # message 11 went to queue 2
    again = await store2.put_message(make_msg(queue_id=2))
    assert (again.wrote_offset, again.queue_offset) == (last.wrote_offset, last.queue_offset)


async def test_garbage_after_the_last_record_is_zeroed(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store()
    results = await put_many(store, 5)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    await crash(store)
    with open(segment_path(tmp_path, 0), "r+b") as f:
        f.seek(end)
        f.write(struct.pack(">ii", 500, 0x12345678) + os.urandom(492))  # a header-shaped partial write
    store2 = await make_store()
    assert store2.max_phy_offset == end and assert_log_valid(store2) == 5
    with open(segment_path(tmp_path, 0), "rb") as f:
        f.seek(end)
        assert f.read(500) == bytes(500)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
async def test_random_garbage_from_a_random_position_recovers_exactly_the_prefix(
    make_store: StoreFactory, tmp_path: Path, seed: int
) -> None:
    """Garbage written from a random point of a random record: the log keeps exactly the records before it.

    The body is CRC-protected, the header is checked for magic and sizes; the topic/properties tail of a
    record is not covered by the format's CRC, so garbage starting there keeps that record (and the log
    ends right after it, because the next header is destroyed).
    """
    rng = random.Random(seed)
    store = await make_store(mapped_file_size_commit_log=16384)
    results = await put_many(store, 60)
    await crash(store)
    victim = rng.randrange(len(results))
    r = results[victim]
    cut = r.wrote_offset + rng.randrange(r.wrote_bytes)
    base = cut - cut % 16384
    garbage = bytes(rng.randrange(256) for _ in range(min(300, 16384 - (cut - base))))
    with open(segment_path(tmp_path, base), "r+b") as f:
        f.seek(cut - base)
        f.write(garbage)
    (tmp_path / "store" / "checkpoint").unlink(missing_ok=True)  # no checkpoint: verify everything from the start
    store2 = await make_store(mapped_file_size_commit_log=16384)
    body_end = r.wrote_offset + 88 + len(f"body-{victim}".encode()) * 20
    if cut < body_end:
        assert store2.max_phy_offset == r.wrote_offset, f"seed={seed}"
        assert assert_log_valid(store2) == victim
    else:
        assert store2.max_phy_offset in (r.wrote_offset, r.wrote_offset + r.wrote_bytes), f"seed={seed}"
    assert_queues_consistent(store2)


async def test_lost_checkpoint_rebuilds_queues_and_index_from_the_log(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 8)
    await put_many(store, 30)
    await crash(store)
    root = tmp_path / "store"
    for d in ("consumequeue", "index"):
        for p in sorted((root / d).rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    (root / "checkpoint").unlink(missing_ok=True)
    store2 = await make_store(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 8)
    assert [store2.max_offset_in_queue("TopicA", q) for q in range(3)] == [10, 10, 10]
    assert_queues_consistent(store2)
    got = store2.query_message("TopicA", "k17", 5, 0, 2**62)
    assert [x.body for x in decode_records(b"".join(got.buffers))] == [b"body-17" * 20]


async def test_consume_queue_entries_beyond_the_log_end_are_dropped(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store()
    results = await put_many(store, 9)
    await store.shutdown()
    cut = results[6].wrote_offset
    with open(segment_path(tmp_path, 0), "r+b") as f:  # the log lost its tail, the queues did not
        f.seek(cut)
        f.write(bytes(4096))
    (tmp_path / "store" / "checkpoint").unlink()
    store2 = await make_store()
    assert store2.max_phy_offset == cut
    assert [store2.max_offset_in_queue("TopicA", q) for q in range(3)] == [2, 2, 2]
    assert_queues_consistent(store2)
    r = store2.get_message("TopicA", 0, 2, 32)
    assert (r.status, r.next_begin_offset) == (G.OFFSET_OVERFLOW_ONE, 2)


async def test_second_store_on_the_same_directory_is_refused(make_store: StoreFactory, tmp_path: Path) -> None:
    await make_store()
    other = MessageStore(config(tmp_path / "store"), store_host=STORE_HOST)
    with pytest.raises(RuntimeError, match="in use"):
        await other.start()


async def test_put_after_shutdown_is_refused_and_the_store_can_start_again(make_store: StoreFactory) -> None:
    store = await make_store()
    first = await store.put_message(make_msg())
    await store.shutdown()
    assert (await store.put_message(make_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert not store.is_writeable()
    await store.start()
    assert store.is_writeable() and store.look_message_by_offset(first.wrote_offset) is not None
    again = await store.put_message(make_msg())
    assert again.queue_offset == 1 and again.wrote_offset == first.wrote_offset + first.wrote_bytes


async def test_a_record_whose_write_is_cut_before_its_header_is_not_recovered(
        make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Records are written with pwrite, the 8-byte size/magic header last: a process killed between the two
    writes leaves the body on disk behind a zero header, and recovery ends the log before it."""
    from brokerd.store.mapped_file import MappedFile

    store = await make_store()
    results = await put_many(store, 5)
    real = MappedFile.write_at
    writes: list[int] = []

    def killed_before_header(self: MappedFile, pos: int, data: bytes | bytearray | memoryview) -> None:
        writes.append(pos)
        if len(writes) == 2:  # the header write never happens
            raise OSError(5, "killed")
        real(self, pos, data)

    monkeypatch.setattr(MappedFile, "write_at", killed_before_header)
    failed = await store.put_message(make_msg(body=b"never acknowledged"))
    monkeypatch.undo()
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    assert failed.status is PutStatus.SERVICE_NOT_AVAILABLE and writes == [end + 8, end]
    await crash(store)
    with open(segment_path(tmp_path, 0), "rb") as f:
        f.seek(end)
        head = f.read(64)
    assert head[:8] == bytes(8) and b"never" not in head and any(head[8:])  # body written, header not
    store2 = await make_store()
    assert store2.max_phy_offset == end
    assert assert_log_valid(store2) == 5
    assert_queues_consistent(store2)
