"""Expiry, quota, truncation, replication (append_raw / confirm offset), flush modes and I/O errors."""

from __future__ import annotations

import asyncio
import errno
import random
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from brokerd.message import decode_records
from brokerd.store import flags, maintenance
from brokerd.store.message_store import MessageStore
from brokerd.store.results import GetMessageStatus as G
from brokerd.store.results import PutStatus
from tests.support import DiskFault

from .conftest import StoreFactory, make_msg
from .test_recovery import assert_log_valid, assert_queues_consistent

HOUR_MS = 3_600_000
SEG = 4096
BIG = b"x" * 1200  # 1297-byte records: three per 4 KiB segment


def other_hour() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


async def fill(store: MessageStore, n: int, store_ts: int = 0, queue_id: int = 0) -> None:
    for _ in range(n):
        assert (await store.put_message(make_msg(queue_id=queue_id, body=BIG, store_ts=store_ts))).status is PutStatus.PUT_OK


# ------------------------------------------------------------------ expiry


async def test_expired_segments_are_deleted_at_the_delete_hour(make_store: StoreFactory) -> None:
    now = int(time.time() * 1000)
    store = await make_store(mapped_file_size_commit_log=SEG, file_reserved_time_hours=72,
                             delete_when=f"{time.localtime(now / 1000).tm_hour:02d}")  # fmt: skip
    await fill(store, 6, store_ts=now - 100 * HOUR_MS)  # two old segments
    await fill(store, 3, store_ts=now - 1 * HOUR_MS)  # one recent segment
    await fill(store, 1)  # the active segment
    assert store.clean_expired_files(now_ms=now) == 2
    assert store.min_phy_offset == 2 * SEG and len(store.commit_log.files) == 2
    assert store.min_offset_in_queue("TopicA", 0) == 6 and store.max_offset_in_queue("TopicA", 0) == 10
    assert store.clean_expired_files(now_ms=now) == 0


async def test_no_deletion_outside_the_delete_hour_unless_forced(make_store: StoreFactory) -> None:
    now = int(time.time() * 1000)
    store = await make_store(mapped_file_size_commit_log=SEG, delete_when=other_hour())
    await fill(store, 7, store_ts=now - 100 * HOUR_MS)
    assert store.clean_expired_files(now_ms=now) == 0
    assert store.clean_expired_files(force=True, now_ms=now) == 2  # the active segment is never deleted
    assert store.min_phy_offset == 2 * SEG and store.get_message("TopicA", 0, 6, 32).message_count == 1


async def test_forced_clean_keeps_unexpired_segments(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=SEG)
    await fill(store, 7)
    assert store.clean_expired_files(force=True) == 0 and store.min_phy_offset == 0


async def test_quota_checker_deletes_oldest_segments_regardless_of_age(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=SEG, delete_when=other_hour(), delete_file_batch_max=2)
    await fill(store, 12)
    usage: list[int] = []

    def over_quota(used: int) -> bool:
        usage.append(used)
        return used > store.queue_store.total_size() + 2 * SEG + (store.index.total_size() if store.index else 0)

    store.set_quota_checker(over_quota)
    assert usage == [] and store.clean_expired_files() == 2  # at most delete_file_batch_max per call
    assert usage[0] == store.logical_usage_bytes() + 2 * SEG
    assert store.clean_expired_files() == 0 or store.min_phy_offset > 2 * SEG
    store.set_quota_checker(None)
    r = store.get_message("TopicA", 0, 0, 32)
    assert r.status is G.OFFSET_TOO_SMALL and r.next_begin_offset == store.min_offset_in_queue("TopicA", 0)


async def test_disk_full_refuses_writes_and_cleans_at_once(make_store: StoreFactory,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    store = await make_store(mapped_file_size_commit_log=SEG, delete_when=other_hour(),
                             disk_space_warning_level_ratio=0.90, disk_space_clean_forcibly_ratio=0.85)  # fmt: skip
    await fill(store, 7)  # fresh (unexpired) data in three segments
    ratio = [0.95]
    monkeypatch.setattr(maintenance, "disk_usage_ratio_of", lambda _p: ratio[0])
    assert store.clean_expired_files() == 2  # over the forcible ratio: oldest segments go regardless of age
    assert store.running_flags.has(flags.DISK_FULL) and not store.is_writeable()
    assert (await store.put_message(make_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE
    ratio[0] = 0.5
    assert store.clean_expired_files() == 0
    assert store.is_writeable() and (await store.put_message(make_msg())).status is PutStatus.PUT_OK


def test_disk_usage_ratio_ignores_root_reserved_blocks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    usage = SimpleNamespace(total=1000, used=300, free=100)  # 600 blocks reserved for root
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage)
    assert maintenance.disk_usage_ratio(tmp_path) == 0.75  # like df: used / (used + available)


async def test_consume_queue_files_below_the_log_are_deleted_and_queries_move(make_store: StoreFactory) -> None:
    now = int(time.time() * 1000)
    store = await make_store(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 2)
    await fill(store, 9, store_ts=now - 100 * HOUR_MS)
    cq = store.queue_store.get("TopicA", 0)
    assert cq is not None and len(cq.files) == 5
    store.clean_expired_files(force=True, now_ms=now)
    assert [f.base // 20 for f in cq.files] == [6, 8]
    assert store.earliest_message_time("TopicA", 0) == now - 100 * HOUR_MS
    assert store.offset_by_timestamp("TopicA", 0, 0, "LOWER") == 6


# ------------------------------------------------------------------ truncation


async def test_truncate_dirty_files_cuts_log_queues_and_positions(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=SEG)
    results = [await store.put_message(make_msg(queue_id=i % 2, body=BIG)) for i in range(8)]
    cut = results[5].wrote_offset
    store.truncate_dirty_files(cut)
    assert store.max_phy_offset == cut and store.flushed_offset <= cut and store.confirm_offset == cut
    assert (store.max_offset_in_queue("TopicA", 0), store.max_offset_in_queue("TopicA", 1)) == (3, 2)
    assert store.look_message_by_offset(results[6].wrote_offset) is None
    nxt = await store.put_message(make_msg(queue_id=1, body=BIG))
    assert (nxt.wrote_offset, nxt.queue_offset) == (cut, 2)
    assert_queues_consistent(store)
    with pytest.raises(ValueError, match="record boundary"):
        store.truncate_dirty_files(results[2].wrote_offset + 5)
    with pytest.raises(ValueError, match="outside"):
        store.truncate_dirty_files(store.max_phy_offset + 1)


async def test_truncation_survives_a_restart(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store(mapped_file_size_commit_log=SEG)
    results = [await store.put_message(make_msg(body=BIG)) for _ in range(5)]
    store.truncate_dirty_files(results[2].wrote_offset)
    await store.shutdown()
    store2 = await make_store(mapped_file_size_commit_log=SEG)
    assert store2.max_phy_offset == results[2].wrote_offset and store2.max_offset_in_queue("TopicA", 0) == 2
    assert_log_valid(store2)


# ------------------------------------------------------------------ replication


async def copy_raw(master: MessageStore, slave: MessageStore, rng: random.Random) -> None:
    pos = slave.max_phy_offset
    end = master.max_phy_offset
    while pos < end:
        f = master.commit_log.file_for(pos)
        assert f is not None
        n = min(rng.randrange(1, 3000), end - pos, f.end - pos)
        chunk = master.commit_log.read_raw(pos, pos + n)
        assert slave.append_raw(pos, chunk) == pos + n
        pos += n


@pytest.mark.parametrize("seed", [7, 8])
async def test_append_raw_rebuilds_identical_queues_on_a_slave(make_store: StoreFactory, tmp_path: Path,
                                                               seed: int) -> None:  # fmt: skip
    master = await make_store(tmp_path / "m", mapped_file_size_commit_log=SEG)
    slave = await make_store(tmp_path / "s", mapped_file_size_commit_log=SEG)
    woken: list[tuple[str, int, int, int]] = []
    slave.add_dispatch_listener(lambda *a: woken.append(a))
    rng = random.Random(seed)
    for i in range(25):
        await master.put_message(make_msg(queue_id=i % 3, body=bytes(rng.randrange(256) for _ in range(rng.randrange(1, 1500))), keys=f"k{i}"))
    await copy_raw(master, slave, rng)
    assert slave.max_phy_offset == master.max_phy_offset
    # long polling is woken up to each queue's newest entry (once per queue per appended chunk at most)
    assert {q: max(o for _t, qq, o, _c in woken if qq == q) for q in range(3)} == {0: 8, 1: 7, 2: 7}
    assert len(woken) <= 25
    for q in range(3):
        a, b = master.get_message("TopicA", q, 0, 32), slave.get_message("TopicA", q, 0, 32)
        assert (a.status, a.buffers, a.next_begin_offset) == (b.status, b.buffers, b.next_begin_offset)
    assert len(slave.query_message("TopicA", "k24", 5, 0, 2**62).buffers) == 1
    nxt = await slave.put_message(make_msg(queue_id=1))  # a slave promoted to master continues the queues
    assert nxt.queue_offset == 8 and nxt.wrote_offset in (master.max_phy_offset, slave.commit_log.roll_next_file(master.max_phy_offset))
    assert_log_valid(slave)


async def test_append_raw_refuses_corrupt_data_and_wrong_offsets(make_store: StoreFactory, tmp_path: Path) -> None:
    master = await make_store(tmp_path / "m")
    slave = await make_store(tmp_path / "s")
    for _ in range(3):
        await master.put_message(make_msg(body=b"abc" * 100))
    raw = bytearray(master.commit_log.read_raw(0, master.max_phy_offset))
    with pytest.raises(ValueError, match="ends at"):
        slave.append_raw(10, bytes(raw))
    raw[100] ^= 0xFF  # a body byte of the first record
    with pytest.raises(ValueError, match="corrupt"):
        slave.append_raw(0, bytes(raw))
    assert slave.max_phy_offset == 0 and slave.max_offset_in_queue("TopicA", 0) == 0


async def test_dispatch_stops_at_the_confirm_offset(make_store: StoreFactory) -> None:
    store = await make_store(dispatch_behind_confirm=True)
    store.set_confirm_offset(0)
    results = [await store.put_message(make_msg(body=b"m")) for _ in range(5)]
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert store.max_offset_in_queue("TopicA", 0) == 0
    store.set_confirm_offset(results[2].wrote_offset)
    assert store.max_offset_in_queue("TopicA", 0) == 2 and store.get_message("TopicA", 0, 0, 32).message_count == 2
    store.set_dispatch_behind_confirm(False)
    assert store.max_offset_in_queue("TopicA", 0) == 5


# ------------------------------------------------------------------ flush modes and errors


async def test_sync_flush_acknowledges_only_flushed_bytes(make_store: StoreFactory) -> None:
    store = await make_store(flush_disk_type="SYNC_FLUSH")
    results = await asyncio.gather(*(store.put_message(make_msg(body=bytes([i]) * 50)) for i in range(64)))
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert store.flushed_offset >= max(r.wrote_offset + r.wrote_bytes for r in results)
    assert store.confirm_offset == store.flushed_offset and 1 <= store.flush_count <= 64


async def test_stuck_disk_gives_flush_disk_timeout(make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await make_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=200)
    disk = DiskFault(store, monkeypatch).stall()
    try:
        res = await store.put_message(make_msg())
        assert res.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert store.look_message_by_offset(res.wrote_offset) is not None  # stored, just not known durable
    finally:
        disk.release()


async def test_write_error_makes_the_store_unwritable_without_crashing(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_store()
    assert (await store.put_message(make_msg())).status is PutStatus.PUT_OK

    def failing_append(*_a: object) -> tuple[int, int]:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store.commit_log, "append", failing_append)
    assert (await store.put_message(make_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert not store.is_writeable() and store.running_flags.has(flags.NOT_WRITEABLE)
    assert store.last_error is not None and "Input/output error" in store.last_error
    assert decode_records(b"".join(store.get_message("TopicA", 0, 0, 32).buffers))[0].queue_offset == 0


async def test_flush_error_is_reported(make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await make_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=300)
    DiskFault(store, monkeypatch).fail(errno.EIO)
    assert (await store.put_message(make_msg())).status is PutStatus.FLUSH_DISK_TIMEOUT
    assert store.last_error is not None and "Input/output error" in store.last_error
    assert (await store.put_message(make_msg())).status is PutStatus.SERVICE_NOT_AVAILABLE


async def test_logical_usage_counts_log_queue_and_index_files(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=SEG)
    await fill(store, 4)
    idx = store.index.total_size() if store.index else 0
    assert store.logical_usage_bytes() == 2 * SEG + 20 * 1000 + idx
