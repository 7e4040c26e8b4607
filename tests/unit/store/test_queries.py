"""Time search, key queries and pull invariants over random workloads."""

from __future__ import annotations

from pathlib import Path

import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerd.message import decode_records, tags_code_of
from brokerd.store.message_store import MessageStore
from brokerd.store.results import GetMessageStatus as G

from .conftest import STORE_HOST, StoreFactory, config, make_msg

# store timestamps of offsets 0..6 in queue 0
TIMES = [1000, 2000, 2000, 2000, 3000, 5000, 5000]


async def timed_store(make_store: StoreFactory) -> MessageStore:
    store = await make_store()
    for i, ts in enumerate(TIMES):
        await store.put_message(make_msg(store_ts=ts, body=bytes([i])))
    return store


async def test_offset_by_timestamp_lower_and_upper_boundaries(make_store: StoreFactory) -> None:
    store = await timed_store(make_store)
    cases = {  # timestamp: (LOWER, UPPER)
        500: (0, 0), 1000: (0, 0), 1500: (1, 0), 2000: (1, 3), 2500: (4, 3), 3000: (4, 4), 4000: (5, 4),
        5000: (5, 6), 9000: (7, 6),
    }  # fmt: skip
    for ts, (lower, upper) in cases.items():
        assert store.offset_by_timestamp("TopicA", 0, ts, "LOWER") == lower, ts
        assert store.offset_by_timestamp("TopicA", 0, ts, "UPPER") == upper, ts
        assert store.offset_by_timestamp("TopicA", 0, ts, "lower") == lower  # case-insensitive, like the broker
        assert store.offset_by_timestamp("TopicA", 0, ts, "anything") == lower  # anything else means LOWER
    assert store.offset_by_timestamp("Missing", 0, 1000) == 0


async def test_store_timestamps_of_queue_offsets(make_store: StoreFactory) -> None:
    store = await timed_store(make_store)
    assert store.earliest_message_time("TopicA", 0) == 1000
    assert [store.message_store_timestamp("TopicA", 0, q) for q in range(7)] == TIMES
    assert store.message_store_timestamp("TopicA", 0, 7) == -1


async def test_query_by_keys_and_uniq_key(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.put_message(make_msg(keys="order-1 user-9", uniq="U1", store_ts=1000, body=b"a"))
    await store.put_message(make_msg(keys="order-2", uniq="U2", store_ts=2000, body=b"b"))
    await store.put_message(make_msg(keys="order-1", uniq="U3", store_ts=3000, body=b"c"))
    await store.put_message(make_msg(topic="Other", keys="order-1", store_ts=3000, body=b"z"))

    def bodies(key: str, max_num: int = 10, begin: int = 0, end: int = 10_000, topic: str = "TopicA") -> list[bytes]:
        return [x.body for x in decode_records(b"".join(store.query_message(topic, key, max_num, begin, end).buffers))]

    assert bodies("order-1") == [b"c", b"a"]  # newest first, only this topic
    assert bodies("user-9") == [b"a"] and bodies("U2") == [b"b"] and bodies("order-3") == []
    assert bodies("order-1", max_num=1) == [b"c"]
    assert bodies("order-1", begin=500, end=1500) == [b"a"]
    assert bodies("order-1", topic="Other") == [b"z"]
    res = store.query_message("TopicA", "order-1", 10, 0, 10_000)
    assert res.index_last_update_timestamp == 3000 and res.index_last_update_phyoffset > 0


async def test_query_survives_restart_and_ignores_truncated_records(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store()
    first = await store.put_message(make_msg(keys="k", body=b"keep"))
    second = await store.put_message(make_msg(keys="k", body=b"drop"))
    store.truncate_dirty_files(second.wrote_offset)
    await store.put_message(make_msg(keys="other", body=b"new"))  # reuses the truncated position
    await store.shutdown()
    store2 = await make_store()
    got = decode_records(b"".join(store2.query_message("TopicA", "k", 10, 0, 2**62).buffers))
    assert [x.body for x in got] == [b"keep"] and got[0].commit_log_offset == first.wrote_offset


async def test_index_rolls_to_a_new_file_when_full(make_store: StoreFactory) -> None:
    store = await make_store(max_index_num=10, max_hash_slot_num=7)
    for i in range(30):
        await store.put_message(make_msg(keys=f"key-{i % 5}"))
    assert store.index is not None and len(store.index.files) >= 3
    assert len(store.query_message("TopicA", "key-3", 100, 0, 2**62).buffers) == 6


# ------------------------------------------------------------------ pull invariants


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1500), st.sampled_from(["A", "B", None])),
                 min_size=1, max_size=60),  # fmt: skip
    pulls=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 70), st.integers(1, 40), st.integers(1, 20_000),
                             st.booleans()), max_size=12),  # fmt: skip
)
def test_pull_returns_contiguous_matching_messages(tmp_path_factory: object, ops: list[tuple[int, int, str | None]],
                                                   pulls: list[tuple[int, int, int, int, bool]]) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("pull")  # type: ignore[attr-defined]

    async def run() -> None:
        store = MessageStore(config(root, mapped_file_size_commit_log=8192), store_host=STORE_HOST)
        await store.start()
        try:
            expected: dict[int, list[tuple[bytes, str | None]]] = {0: [], 1: [], 2: []}
            for qid, size, tags in ops:
                body = bytes([len(expected[qid]) % 256]) * size
                await store.put_message(make_msg(queue_id=qid, body=body, tags=tags))
                expected[qid].append((body, tags))
            for qid, offset, nums, max_bytes, only_a in pulls:
                check_pull(store, expected[qid], qid, offset, nums, max_bytes, only_a)
        finally:
            await store.shutdown()

    uvloop.run(run())


def check_pull(store: MessageStore, queue: list[tuple[bytes, str | None]], qid: int, offset: int, nums: int,
               max_bytes: int, only_a: bool) -> None:  # fmt: skip
    code_a = tags_code_of("A")
    r = store.get_message("TopicA", qid, offset, nums, max_bytes, (lambda c: c == code_a) if only_a else None)
    n = len(queue)
    if n == 0:
        assert r.status is G.NO_MATCHED_LOGIC_QUEUE
        return
    if offset >= n:
        assert r.status is (G.OFFSET_OVERFLOW_ONE if offset == n else G.OFFSET_OVERFLOW_BADLY)
        assert r.next_begin_offset == (offset if offset == n else n)
        return
    got = decode_records(b"".join(r.buffers))
    assert [x.queue_offset for x in got] == r.queue_offsets
    want = [q for q in range(offset, n) if not only_a or queue[q][1] == "A"]
    assert r.queue_offsets == want[: len(r.queue_offsets)]  # in order, nothing skipped that matched
    assert [x.body for x in got] == [queue[q][0] for q in r.queue_offsets]
    assert len(got) <= min(nums, 32) and (len(got) <= 1 or r.buffer_total_size <= max_bytes)
    if want:
        assert r.status is G.FOUND and len(got) >= 1
        # resume after the last returned message, no later than the first matching one not returned
        # (RocketMQ checks "batch full" before filtering, so a full batch stops at the next entry)
        limit = want[len(got)] if len(got) < len(want) else n
        assert r.queue_offsets[-1] < r.next_begin_offset <= limit
    else:
        assert r.status is G.NO_MATCHED_MESSAGE and r.next_begin_offset == n
