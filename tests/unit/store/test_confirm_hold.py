"""The confirm hold (replication): consume queues are written at once, but readers and long-polling listeners
see a record only once the confirm offset covers it; an empty replica starts where its master's log starts."""

from __future__ import annotations

from pathlib import Path

from brokerd.store.results import PutStatus

from .conftest import StoreFactory, make_msg


async def test_readers_see_only_confirmed_records_and_listeners_hear_of_them_when_confirmed(
        make_store: StoreFactory) -> None:  # fmt: skip
    store = await make_store(dispatch_behind_confirm=True)
    heard: list[tuple[str, int, int]] = []
    store.add_dispatch_listener(lambda t, q, o, _tags: heard.append((t, q, o)))
    store.set_confirm_offset(0)
    res = [store.append_message(make_msg(body=b"m%d" % i)) for i in range(4)]
    assert all(r.status is PutStatus.PUT_OK for r in res)
    assert store.queue_store.get("TopicA", 0).max_offset == 4  # written at once (the send lane does the same)
    assert store.max_offset_in_queue("TopicA", 0) == 0 and heard == []
    assert store.get_message("TopicA", 0, 0, 32).message_count == 0
    assert store.query_message("TopicA", res[0].msg_id, 32, 0, 2**62).buffers == []
    store.set_confirm_offset(res[1].end_offset)  # the first two are replicated
    assert store.max_offset_in_queue("TopicA", 0) == 2 and heard == []  # the newest entry (3) is not confirmed
    got = store.get_message("TopicA", 0, 0, 32)
    assert got.message_count == 2 and got.next_begin_offset == 2
    store.set_confirm_offset(res[3].end_offset)
    assert heard == [("TopicA", 0, 3)]  # one wake-up per queue with its newest offset
    assert store.get_message("TopicA", 0, 2, 32).message_count == 2


async def test_truncation_drops_held_notifications_of_cut_records(make_store: StoreFactory) -> None:
    store = await make_store(dispatch_behind_confirm=True)
    heard: list[int] = []
    store.add_dispatch_listener(lambda _t, _q, o, _tags: heard.append(o))
    store.set_confirm_offset(0)
    first = store.append_message(make_msg(body=b"kept"))
    store.append_message(make_msg(body=b"cut"))
    store.truncate_dirty_files(first.end_offset)
    store.set_confirm_offset(10**9)
    assert heard == [] and store.max_offset_in_queue("TopicA", 0) == 1


async def test_an_empty_replica_starts_at_the_masters_first_segment(make_store: StoreFactory, tmp_path: Path) -> None:
    seg = 4096
    master = await make_store(tmp_path / "m", mapped_file_size_commit_log=seg)
    for _ in range(9):
        await master.put_message(make_msg(body=b"x" * 1200))  # three records per segment
    slave = await make_store(tmp_path / "s", mapped_file_size_commit_log=seg)
    offset = seg  # the master's first segment expired: the replica starts at the second
    while offset < master.max_phy_offset:
        chunk = bytes(master.read_range(offset, 1000))
        offset = slave.append_raw(offset, chunk)
    assert offset == master.max_phy_offset
    assert slave.min_phy_offset == seg and slave.min_offset_in_queue("TopicA", 0) == 3
    assert slave.max_offset_in_queue("TopicA", 0) == 9
    assert slave.get_message("TopicA", 0, 3, 32).message_count == 6
