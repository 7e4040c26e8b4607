"""Put and pull through the store: offsets, ids, segment roll-over, limits and the pull status table."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest

from brokerd import message as m
from brokerd.message import decode_offset_msg_id, decode_records, verify_record
from brokerd.store.config import StoreConfig
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.results import GetMessageStatus as G
from brokerd.store.results import PutStatus
from tests.support import ConsumeQueueFault

from .conftest import STORE_HOST, StoreFactory, make_msg


async def test_put_then_pull_returns_the_stored_records(make_store: StoreFactory) -> None:
    store = await make_store()
    results = [await store.put_message(make_msg(queue_id=i % 2, body=f"m{i}".encode(), tags="t")) for i in range(10)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert [r.queue_offset for r in results] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    for r in results:
        assert decode_offset_msg_id(r.msg_id) == (STORE_HOST[0], STORE_HOST[1], r.wrote_offset)
    res = store.get_message("TopicA", 1, 0, 32)
    assert (res.status, res.message_count, res.next_begin_offset, res.min_offset, res.max_offset) == (G.FOUND, 5, 5, 0, 5)
    msgs = decode_records(b"".join(res.buffers))
    assert [x.body for x in msgs] == [b"m1", b"m3", b"m5", b"m7", b"m9"]
    assert [x.queue_offset for x in msgs] == [0, 1, 2, 3, 4]
    assert all(x.tags == "t" and x.store_host == STORE_HOST for x in msgs)
    assert store.topics() == ["TopicA"] and store.queue_ids("TopicA") == [0, 1]


async def test_segments_roll_over_with_a_blank_end_marker(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store(mapped_file_size_commit_log=4096)
    body = b"x" * 1200  # 1297-byte records: 3 per 4 KiB segment
    results = [await store.put_message(make_msg(body=body)) for _ in range(10)]
    names = sorted(p.name for p in (tmp_path / "store" / "commitlog").iterdir())
    assert names[:2] == ["00000000000000000000", "00000000000000004096"] and len(names) == 4
    seg0 = (tmp_path / "store" / "commitlog" / names[0]).read_bytes()
    end0 = results[2].wrote_offset + results[2].wrote_bytes
    assert struct.unpack_from(">ii", seg0, end0) == (4096 - end0, m.MAGIC_BLANK)
    assert results[3].wrote_offset == 4096
    for r in results:
        raw = store.look_message_by_offset(r.wrote_offset)
        assert raw is not None and verify_record(raw, 0) == r.wrote_bytes
    res = store.get_message("TopicA", 0, 0, 32)
    assert res.message_count == 10 and [x.queue_offset for x in decode_records(b"".join(res.buffers))] == list(range(10))


async def test_invalid_messages_are_refused_and_store_nothing(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=4096, max_message_size=10_000)
    assert (await store.put_message(make_msg(body=b"x" * 10_001))).status is PutStatus.MESSAGE_ILLEGAL
    assert (await store.put_message(make_msg(body=b"x" * 5000))).status is PutStatus.MESSAGE_ILLEGAL  # > segment
    big = (await store.put_message(make_msg(props={"K": "v" * 33_000}))).status
    assert big is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert (await store.put_message(make_msg(topic="../evil"))).status is PutStatus.MESSAGE_ILLEGAL
    assert (await store.put_message(make_msg(queue_id=-1))).status is PutStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0 and store.max_offset_in_queue("TopicA", 0) == 0
    ok = await store.put_message(make_msg())
    assert ok.status is PutStatus.PUT_OK and ok.queue_offset == 0 and ok.wrote_offset == 0


async def test_batch_put_gives_consecutive_offsets_and_joined_ids(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.put_message(make_msg())
    res = await store.put_messages([make_msg(body=f"b{i}".encode()) for i in range(4)])
    assert res.status is PutStatus.PUT_OK and res.msg_num == 4 and res.queue_offset == 1
    ids = res.msg_id.split(",")
    assert len(ids) == 4
    offsets = [decode_offset_msg_id(i)[2] for i in ids]
    assert offsets[0] == res.wrote_offset and sum(len(store.look_message_by_offset(o) or b"") for o in offsets) == res.wrote_bytes
    got = decode_records(b"".join(store.get_message("TopicA", 0, 1, 32).buffers))
    assert [(x.queue_offset, x.body) for x in got] == [(1 + i, f"b{i}".encode()) for i in range(4)]


async def test_batch_with_one_bad_message_stores_nothing(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=4096)
    res = await store.put_messages([make_msg(), make_msg(props={"K": "v" * 40_000})])
    assert res.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and store.max_phy_offset == 0
    res = await store.put_messages([make_msg(), make_msg(body=b"x" * 4000)])  # the second cannot fit a segment
    assert res.status is PutStatus.MESSAGE_ILLEGAL and store.max_phy_offset == 0


async def test_prepared_and_rollback_messages_are_stored_but_not_consumable(make_store: StoreFactory) -> None:
    store = await make_store()
    half = await store.put_message(make_msg(sys_flag=m.TRANSACTION_PREPARED_TYPE, keys="half"))
    rb = await store.put_message(make_msg(sys_flag=m.TRANSACTION_ROLLBACK_TYPE))
    commit = await store.put_message(make_msg(sys_flag=m.TRANSACTION_COMMIT_TYPE))
    assert (half.queue_offset, rb.queue_offset, commit.queue_offset) == (0, 0, 0)
    assert store.look_message_by_offset(half.wrote_offset) is not None
    assert store.max_offset_in_queue("TopicA", 0) == 1
    got = decode_records(b"".join(store.get_message("TopicA", 0, 0, 32).buffers))
    assert [x.commit_log_offset for x in got] == [commit.wrote_offset]
    assert len(store.query_message("TopicA", "half", 10, 0, 2**62).buffers) == 1  # half messages stay queryable


async def test_dispatch_listener_hears_each_consumable_put_and_a_batch_once_per_queue(make_store: StoreFactory) -> None:
    store = await make_store()
    seen: list[tuple[str, int, int, int]] = []
    store.add_dispatch_listener(lambda *a: seen.append(a))
    await store.put_message(make_msg(queue_id=2, tags="TagA"))
    await store.put_message(make_msg(queue_id=2, sys_flag=m.TRANSACTION_PREPARED_TYPE))
    await store.put_messages([make_msg(queue_id=2), make_msg(queue_id=3, tags="TagB"), make_msg(queue_id=2)])
    # a batch: each queue's newest entry, once (a listener hears "everything up to this offset landed")
    assert seen == [("TopicA", 2, 0, m.java_string_hash("TagA")), ("TopicA", 2, 2, 0),
                    ("TopicA", 3, 0, m.java_string_hash("TagB"))]


async def test_schedule_topic_tags_code_is_the_deliver_timestamp(make_store: StoreFactory) -> None:
    store = await make_store()
    seen: list[int] = []
    store.add_dispatch_listener(lambda _t, _q, _o, tags: seen.append(tags))
    r = await store.put_message(make_msg(topic=m.SCHEDULE_TOPIC, queue_id=2, props={m.DELAY: "3"}, store_ts=5_000))
    assert r.store_timestamp == 5_000 and seen == [5_000 + 10_000]  # level 3 = 10 s


# ------------------------------------------------------------------ pull status table (spec §2.3)


async def test_pull_status_rows(make_store: StoreFactory) -> None:
    store = await make_store()
    r = store.get_message("Nope", 0, 5, 32)
    assert (r.status, r.next_begin_offset) == (G.NO_MATCHED_LOGIC_QUEUE, 0)
    for i in range(5):
        await store.put_message(make_msg(body=bytes([i])))
    r = store.get_message("TopicA", 0, 5, 32)  # caught up
    assert (r.status, r.next_begin_offset, r.max_offset) == (G.OFFSET_OVERFLOW_ONE, 5, 5)
    r = store.get_message("TopicA", 0, 9, 32)
    assert (r.status, r.next_begin_offset) == (G.OFFSET_OVERFLOW_BADLY, 5)
    r = store.get_message("TopicA", 0, 2, 32)
    assert (r.status, r.next_begin_offset, r.message_count) == (G.FOUND, 5, 3)
    r = store.get_message("TopicA", 0, 0, 32, tag_filter=lambda code: code == 12345)
    assert (r.status, r.next_begin_offset, r.buffers) == (G.NO_MATCHED_MESSAGE, 5, [])
    store.truncate_dirty_files(0)
    r = store.get_message("TopicA", 0, 3, 32)
    assert (r.status, r.next_begin_offset, r.max_offset) == (G.NO_MESSAGE_IN_QUEUE, 0, 0)


async def test_pull_below_min_offset_after_expiry_is_offset_too_small(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=4096)
    for _ in range(9):
        await store.put_message(make_msg(body=b"x" * 1200, store_ts=1_000))
    assert store.clean_expired_files(force=True) == 2
    assert store.min_phy_offset == 8192 and store.min_offset_in_queue("TopicA", 0) == 6
    r = store.get_message("TopicA", 0, 1, 32)
    assert (r.status, r.next_begin_offset, r.min_offset) == (G.OFFSET_TOO_SMALL, 6, 6)
    r = store.get_message("TopicA", 0, 6, 32)
    assert (r.status, r.message_count, r.next_begin_offset) == (G.FOUND, 3, 9)


async def test_pull_of_entries_whose_log_was_removed_is_message_was_removing(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=4096)
    for _ in range(7):
        await store.put_message(make_msg(body=b"x" * 1200))
    store.commit_log.delete_first(1)  # segment gone, consume queue not corrected yet (a race with expiry)
    r = store.get_message("TopicA", 0, 0, 32)
    assert r.status is G.FOUND and r.message_count == 4  # skips the removed file, returns what follows
    r = store.get_message("TopicA", 0, 0, 2)
    assert (r.status, r.message_count, r.next_begin_offset) == (G.FOUND, 2, 5)
    r = store.get_message("TopicA", 0, 0, 32, tag_filter=lambda _c: False)
    assert (r.status, r.next_begin_offset) == (G.NO_MATCHED_MESSAGE, 7)  # filter decides before the log read
    store.commit_log.delete_first(1)
    r = store.get_message("TopicA", 0, 0, 3)
    assert (r.status, r.next_begin_offset) == (G.FOUND, 7)
    store2_only_removed = store.get_message("TopicA", 0, 0, 32, max_msg_bytes=1)
    assert store2_only_removed.message_count == 1


async def test_pull_when_all_entries_point_to_removed_log(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_commit_log=4096)
    for _ in range(3):
        await store.put_message(make_msg(queue_id=0, body=b"x" * 1200))  # queue 0 lives in segment 0 only
    await store.put_message(make_msg(queue_id=1, body=b"x" * 1200))
    store.commit_log.delete_first(1)
    r = store.get_message("TopicA", 0, 0, 2)
    assert (r.status, r.next_begin_offset, r.buffers) == (G.MESSAGE_WAS_REMOVING, 3, [])


async def test_pull_with_a_missing_consume_queue_file_is_offset_found_null(make_store: StoreFactory) -> None:
    store = await make_store(mapped_file_size_consume_queue=20 * 4)
    for _ in range(10):
        await store.put_message(make_msg())
    cq = store.queue_store.get("TopicA", 0)
    assert cq is not None and len(cq.files) == 3
    cq.files.pop(1).destroy()  # offsets 4..7 lost
    r = store.get_message("TopicA", 0, 5, 32)
    assert (r.status, r.next_begin_offset) == (G.OFFSET_FOUND_NULL, 8)
    r = store.get_message("TopicA", 0, 8, 32)
    assert (r.status, r.message_count) == (G.FOUND, 2)


async def test_pull_limits_count_bytes_and_in_memory_caps(make_store: StoreFactory) -> None:
    store = await make_store()
    for _ in range(40):
        await store.put_message(make_msg(body=b"y" * 100))
    size = store.get_message("TopicA", 0, 0, 1).buffer_total_size
    r = store.get_message("TopicA", 0, 0, 64)
    assert (r.message_count, r.next_begin_offset) == (32, 32)  # max_transfer_count_on_message_in_memory
    r = store.get_message("TopicA", 0, 0, 5)
    assert (r.message_count, r.next_begin_offset) == (5, 5)
    r = store.get_message("TopicA", 0, 0, 32, max_msg_bytes=size * 3 + 1)
    assert r.message_count == 3 and r.next_begin_offset == 3
    r = store.get_message("TopicA", 0, 0, 32, max_msg_bytes=1)  # always at least one message
    assert (r.message_count, r.next_begin_offset) == (1, 1)


async def test_in_memory_byte_cap(make_store: StoreFactory) -> None:
    store = await make_store(max_transfer_bytes_on_message_in_memory=2500)
    for _ in range(10):
        await store.put_message(make_msg(body=b"z" * 1000))
    r = store.get_message("TopicA", 0, 0, 32)
    assert r.message_count == 2 and r.buffer_total_size <= 2500 and r.next_begin_offset == 2


async def test_tag_filter_skips_non_matching_entries(make_store: StoreFactory) -> None:
    store = await make_store()
    for i in range(10):
        await store.put_message(make_msg(tags="A" if i % 3 == 0 else "B", body=bytes([i])))
    code_a = m.tags_code_of("A")
    r = store.get_message("TopicA", 0, 1, 32, tag_filter=lambda c: c == code_a)
    got = decode_records(b"".join(r.buffers))
    assert r.status is G.FOUND and [x.body[0] for x in got] == [3, 6, 9] and r.next_begin_offset == 10
    r = store.get_message("TopicA", 0, 1, 2, tag_filter=lambda c: c == code_a)
    assert [x.body[0] for x in decode_records(b"".join(r.buffers))] == [3, 6] and r.next_begin_offset == 7


async def test_queues_are_independent_and_unknown_queries_are_safe(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.put_message(make_msg(topic="T1"))
    await store.put_message(make_msg(topic="T2", queue_id=7))
    assert (store.max_offset_in_queue("T1", 0), store.max_offset_in_queue("T2", 7)) == (1, 1)
    assert store.max_offset_in_queue("T9", 0) == 0 and store.min_offset_in_queue("T9", 0) == 0
    assert store.earliest_message_time("T9", 0) == -1 and store.message_store_timestamp("T1", 0, 5) == -1
    assert store.look_message_by_offset(12345678) is None and store.look_message_by_offset(1) is None
    assert store.delete_topic("T1") == 1
    assert store.topics() == ["T2"] and store.get_message("T1", 0, 0, 1).status is G.NO_MATCHED_LOGIC_QUEUE
    again = await store.put_message(make_msg(topic="T1"))
    assert again.queue_offset == 0


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    root = str(tmp_path)
    cases = {
        "flush_disk_type": {"flush_disk_type": "SOMETIMES"},
        "mapped_file_size_consume_queue": {"mapped_file_size_consume_queue": 21},
        "delete_when": {"delete_when": "04;25"},
        "disk_space_warning_level_ratio": {"disk_space_warning_level_ratio": 1.5},
        "mapped_file_size_commit_log": {"mapped_file_size_commit_log": 100},
        "sync_flush_timeout_ms": {"sync_flush_timeout_ms": 0},
        "message_delay_level": {"message_delay_level": "1s 5x"},
    }
    for key, kw in cases.items():
        with pytest.raises(ValueError, match=f"^{key}: "):
            StoreConfig(store_path_root_dir=root, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^store_path_root_dir: "):
        StoreConfig(store_path_root_dir="")
    cfg = StoreConfig(store_path_root_dir=root, delete_when="04;16")
    assert cfg.delete_hours == {4, 16} and cfg.mapped_file_size_commit_log == 1 << 30 and not cfg.sync_flush


async def test_a_failed_dispatch_is_redone_and_writes_resume_without_a_restart(
        make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A consume-queue put that fails (a full disk) stops writes, and its record, stored and acknowledged, cannot
    be consumed. Once puts work again, ``retry_dispatch`` (each consume-queue flush tick) dispatches it, index keys
    included, and writes resume: no restart needed (RocketMQ waits for one)."""
    store = await make_store()
    for i in range(3):
        assert (await store.put_message(make_msg(body=b"m%d" % i))).status is PutStatus.PUT_OK
    broken = ConsumeQueueFault(monkeypatch, errno.ENOSPC, on=True)
    assert (await store.put_message(make_msg(body=b"m3", keys="k3"))).status is PutStatus.PUT_OK
    assert store.running_flags.has(WRITE_LOGICS_QUEUE_ERROR) and store.max_offset_in_queue("TopicA", 0) == 3
    assert not store.retry_dispatch()  # the disk is still full: writes stay stopped
    assert (await store.put_message(make_msg(body=b"m4"))).status is not PutStatus.PUT_OK
    broken.on = False
    assert store.retry_dispatch()
    assert not store.running_flags.has(WRITE_LOGICS_QUEUE_ERROR)
    res = store.get_message("TopicA", 0, 0, 32)
    assert [x.body for x in decode_records(b"".join(res.buffers))] == [b"m0", b"m1", b"m2", b"m3"]
    assert [x.body for x in decode_records(b"".join(store.query_message("TopicA", "k3", 8, 0, 2**62).buffers))] == [b"m3"]
    assert (await store.put_message(make_msg(body=b"m4"))).status is PutStatus.PUT_OK
    assert not store.retry_dispatch()  # nothing left to redo
