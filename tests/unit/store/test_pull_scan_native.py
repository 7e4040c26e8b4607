"""A pull's read loop in C (brokerd/csrc/pull_scan.c) against its Python reference (reader._step): the same
pulls over the same store give the same result, field for field, across consume-queue and commit-log files, holes,
tag filters, every limit, and records whose segment was deleted (handed back to the Python step)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from brokerd import message as m
from brokerd.store import reader
from brokerd.store.results import GetMessageResult

from .conftest import StoreFactory, make_msg

pytestmark = pytest.mark.skipif(reader.SCAN_PULL is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")

TAGS = ("a", "b", "c", None)


def fields(r: GetMessageResult) -> tuple[Any, ...]:
    return (r.status, r.next_begin_offset, r.min_offset, r.max_offset, r.message_count, r.buffer_total_size,
            r.queue_offsets, [bytes(b) for b in r.buffers])  # fmt: skip


async def test_the_c_read_loop_answers_every_pull_as_the_python_step_does(
        make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    store = await make_store(mapped_file_size_commit_log=16384, mapped_file_size_consume_queue=20 * 37)
    for i in range(600):
        body = bytes([i % 251]) * rnd.choice([10, 200, 1500, 3000])
        await store.put_message(make_msg(queue_id=i % 3, body=body, tags=rnd.choice(TAGS)))
    codes = {m.tags_code_of(t) for t in ("a", "c")}
    pulls = [(rnd.randrange(3), rnd.randrange(-2, 210), rnd.choice([1, 4, 32, 500]),
              rnd.choice([1, 5000, 262144]), rnd.choice([None, codes.__contains__, lambda c: c % 3 == 0]))
             for _ in range(300)] + [(1, 0, 32, 262144, None), (2, 1, 4, 262144, codes.__contains__)]  # fmt: skip

    def run_all() -> list[tuple[Any, ...]]:
        return [fields(store.get_message("TopicA", q, off, n, nbytes, tf)) for q, off, n, nbytes, tf in pulls]

    def both() -> list[tuple[Any, ...]]:
        native = run_all()
        monkeypatch.setattr(reader, "SCAN_PULL", None)
        python = run_all()
        monkeypatch.undo()
        assert native == python, f"seed {seed}"
        return native

    found = both()
    assert sum(f[4] for f in found) > 1000, f"seed {seed}"
    store.commit_log.delete_first(2)  # the first records' segments are gone: the C loop hands them back
    cq = store.queue_store.get("TopicA", 0)
    assert cq is not None
    cq.correct_min_offset(store.commit_log.min_offset)
    after = both()
    assert after[-2][6][0] > 0 and after[-1][6][0] > 1, f"seed {seed}"  # the removed records were skipped


async def test_a_limit_of_bytes_and_count_stop_the_c_loop_where_the_python_step_stops(
        make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    store = await make_store(mapped_file_size_commit_log=1 << 20, max_transfer_count_on_message_in_memory=7,
                             max_transfer_bytes_on_message_in_memory=5000)  # fmt: skip
    for i in range(40):
        await store.put_message(make_msg(body=b"x" * (100 + 37 * i), tags="a" if i % 4 else "b"))
    cases = [(0, 32, 262144, None), (3, 32, 1000, None), (0, 32, 262144, {m.tags_code_of("a")}.__contains__),
             (5, 2, 262144, None), (39, 32, 1, None), (40, 32, 262144, None)]  # fmt: skip
    native = [fields(store.get_message("TopicA", 0, *c)) for c in cases]
    monkeypatch.setattr(reader, "SCAN_PULL", None)
    assert native == [fields(store.get_message("TopicA", 0, *c)) for c in cases]
    assert [f[4] for f in native] == [7, 2, 7, 2, 1, 0]  # count, bytes, tags, nums, at least one, none
