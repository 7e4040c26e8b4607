"""Ahead-of-time file creation: staged files are taken into place, leave no trace, and never confuse recovery."""

from __future__ import annotations

from pathlib import Path

from brokerd.store.allocate import STAGING_DIR, Allocator
from brokerd.store.message_store import GetMessageStatus, MessageStore
from tests.support import wait_for

from .conftest import StoreFactory, config, crash, make_msg


def test_staged_file_is_renamed_into_place_and_staging_is_left_empty(tmp_path: Path) -> None:
    alloc = Allocator(tmp_path)
    target = tmp_path / "consumequeue" / "T" / "0" / "00000000000000000000"
    alloc.request(target, 0, 20 * 100, populate=4096)
    f = alloc.take(target)
    assert f is not None and f.path == target and target.exists() and target.stat().st_size == 2000
    assert list((tmp_path / STAGING_DIR).iterdir()) == []
    assert alloc.take(target) is None  # nothing more pending: the caller creates files itself
    f.close()


def test_take_never_replaces_an_existing_file(tmp_path: Path) -> None:
    alloc = Allocator(tmp_path)
    target = tmp_path / "commitlog" / "00000000000000000000"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"real data")
    alloc.request(target, 0, 4096, populate=0)
    assert alloc.take(target) is None
    assert target.read_bytes() == b"real data"


def test_discarded_and_leftover_staged_files_are_removed(tmp_path: Path) -> None:
    alloc = Allocator(tmp_path)
    for q in range(4):
        alloc.request(tmp_path / "consumequeue" / "T" / str(q) / "00000000000000000000", 0, 2000, populate=0)
    alloc.discard(tmp_path / "consumequeue" / "T")
    assert alloc.take(tmp_path / "consumequeue" / "T" / "0" / "00000000000000000000") is None
    staging = tmp_path / STAGING_DIR
    # a discarded request the worker had already started is deleted when it completes
    wait_for(lambda: not staging.exists() or not any(staging.iterdir()), 10, "discarded staged files deleted")
    # what a crash leaves staged is removed by the next start
    leftover = tmp_path / "commitlog" / "00000000000000000000"
    alloc.request(leftover, 0, 4096, populate=0)
    alloc._pending[leftover].result()  # the staged file exists, never taken: the process "dies" here
    assert any(staging.iterdir())
    Allocator(tmp_path).reset()
    assert not staging.exists()


async def test_prepared_topic_files_are_used_and_a_crash_with_staged_files_recovers_cleanly(
        tmp_path: Path, make_store: StoreFactory) -> None:
    store: MessageStore = await make_store(tmp_path)
    store.prepare_topic("Prepared", 4)
    r = await store.put_message(make_msg("Prepared", 2, b"first"))
    assert r.status.name == "PUT_OK"
    store.prepare_topic("Staged", 4)  # still staged when the process "dies"
    for fut in list(store.allocator._pending.values()):  # the files exist in the staging directory at the crash
        fut.result()
    await crash(store)
    assert any((tmp_path / STAGING_DIR).iterdir())
    again = MessageStore(config(tmp_path), store_host=("127.0.0.1", 10911))  # port-ok: the host written into records, nothing binds it
    await again.start()
    try:
        got = again.get_message("Prepared", 2, 0, 8)
        assert got.status == GetMessageStatus.FOUND and got.message_count == 1
        assert again.max_offset_in_queue("Staged", 0) == 0 and "Staged" not in again.topics()
        staging = tmp_path / STAGING_DIR
        assert not staging.exists() or not any(staging.iterdir())
    finally:
        await again.shutdown()


async def test_many_new_topics_reserve_neither_disk_nor_a_file_per_queue(make_store: StoreFactory,
                                                                         tmp_path: Path) -> None:  # fmt: skip
    """Thousands of topics created at once (admin, metadata sync): consume-queue files are sparse and at most
    ``MAX_STAGED`` wait in the allocator; queues beyond that get their file on first use."""
    store = await make_store(tmp_path / "s")
    for i in range(300):
        store.prepare_topic(f"Many{i}", 8)
    staged = store.allocator.pending
    assert 0 < staged <= store.queue_store.MAX_STAGED
    staging = tmp_path / "s" / STAGING_DIR
    wait_for(lambda: staging.is_dir() and len(list(staging.iterdir())) >= staged, 30, "the staged files created")
    used = sum(p.stat().st_blocks * 512 for p in (tmp_path / "s").rglob("*") if p.is_file())
    assert used < 64 * 1024 * 1024  # 512 staged queue files of 6 MB would be 3 GB if reserved
    res = await store.put_message(make_msg(topic="Many299", queue_id=7, body=b"x"))  # not staged: made on use
    assert res.ok and store.max_offset_in_queue("Many299", 7) == 1
