"""The revive log's record codecs: the ``ops`` record (name table, offsets as runs, every operation kind), what
a corrupt record is refused with, the revive batch's BEGIN."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from brokerd.pop.records import (
    Ack,
    BatchBegin,
    Checkpoint,
    Op,
    RecordError,
    Renew,
    Reset,
    decode_ops,
    encode_ops,
    offsets_of,
    runs,
)


def test_an_ops_record_carries_every_operation_in_order_and_names_each_group_and_topic_once() -> None:
    ops: list[Op] = [Ack(("G", "T", 0, 5, 100), (5, 6, 7, 9)),
           Checkpoint("G", "T", 1, 10, 200, 3000, tuple(range(10, 42)), 42),
           Checkpoint("G", "%RETRY%G_T", 0, 0, 200, 3000, (0, 2, 3), 4, True, (1, 0, 2)),
           Renew(("G", "T", 0, 5, 100), 7, 300, 1000),
           Reset(("G", "T", 2), 17)]
    data = encode_ops(ops)
    assert decode_ops(data) == ops
    assert msgpack.unpackb(data)[1] == ["G", "T", "%RETRY%G_T"]  # each name once
    one_pop = encode_ops([Checkpoint("GroupName", "TopicName", 3, 1_000_000, 1_700_000_000_000, 60_000,
                                     tuple(range(1_000_000, 1_000_032)), 1_000_032)])
    assert len(one_pop) < 64  # 32 offsets are one run


@given(st.lists(st.integers(-50, 5000), max_size=64), st.integers(-100, 100))
@example([0, 2, 1, 3], 0).via("a permutation spanning a run's width")
@example([7, 7], 3).via("a repeat")
@example(list(range(10, 42)), 10).via("one run")
def test_runs_keep_any_offsets_exactly(offsets: list[int], base: int) -> None:
    assert offsets_of(runs(offsets, base), base) == tuple(offsets)


def test_a_range_of_offsets_is_one_run() -> None:
    """A pop that handed out every offset it read carries them as a range: one run, read back as the same offsets."""
    assert runs(range(1_000, 1_032), 990) == [10, 32]
    assert offsets_of(runs(range(1_000, 1_032), 990), 990) == tuple(range(1_000, 1_032))
    assert runs(range(5, 5), 0) == []


@pytest.mark.parametrize("body", [
    msgpack.packb([2, ["G"], [[0, 0, 0, 0, 0, 1, [0, 1]]]]),  # topic index 0 is fine, queue id 0 ...
])
def test_a_well_formed_record_with_one_name_reads(body: bytes) -> None:
    assert decode_ops(body) == [Ack(("G", "G", 0, 0, 1), (0,))]


@pytest.mark.parametrize("body", [
    b"\xc1",  # not msgpack
    msgpack.packb([1, [], []]),  # another format
    msgpack.packb([2, ["G"], [[0, 0, 5, 0, 0, 1, [0, 1]]]]),  # an unknown name index
    msgpack.packb([2, ["G"], [[9, 0, 0, 0]]]),  # an unknown operation
    msgpack.packb([2, ["G"], [[0, 0, 0, 0, 0, 1, [0]]]]),  # odd runs
    msgpack.packb([2, ["G"], [[0, 0, 0, 0, 0, 1, [0, 0]]]]),  # an empty run
    msgpack.packb([2, ["G"], [[0, 0, 0, 0, 0, 1, [0, 1 << 30]]]]),  # a run too long to hold
    msgpack.packb([2, [""], [[3, 0, 0, 0, 1]]]),  # an empty name
    msgpack.packb([2, ["G"], [[1, 0, 0, 0, 0, 1, 1, [0, 2], 2, [1]]]]),  # FIFO counts of the wrong length
])
def test_a_corrupt_ops_record_is_refused(body: bytes) -> None:
    with pytest.raises(RecordError):
        decode_ops(body)


def test_a_begin_names_the_items_delivered_and_dropped() -> None:
    b = BatchBegin((("G", "T", 0, 0, 5, 1), ("G", "T", 0, 0, 5, 2)), (("G", "T", 0, 0, 5, 3),))
    assert BatchBegin.decode(b.encode()) == b
    for bad in (msgpack.packb([1, [["G", "T", 0, 0, 5]], []]), msgpack.packb([2, [], [], []]), b"\xc1"):
        with pytest.raises(RecordError):
            BatchBegin.decode(bad)
