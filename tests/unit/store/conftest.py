"""Fixtures for store tests: real files under tmp_path, a message builder and an in-process "crash"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from brokerd import message as m
from brokerd.message import MessageInner
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore

STORE_HOST = ("127.0.0.1", 10911)  # port-ok: the host written into records, nothing binds it
BORN_HOST = ("10.0.0.7", 40000)
# Disk ratios at 1.0: these tests must not depend on how full the host's disk is (see test_disk_full_*).
SMALL = {"max_hash_slot_num": 1024, "max_index_num": 4096, "mapped_file_size_consume_queue": 20 * 1000,
         "mapped_file_size_commit_log": 1 << 20, "disk_space_warning_level_ratio": 1.0,
         "disk_space_clean_forcibly_ratio": 1.0}  # fmt: skip

StoreFactory = Callable[..., Awaitable[MessageStore]]


def make_msg(topic: str = "TopicA", queue_id: int = 0, body: bytes = b"body", *, tags: str | None = None,
             keys: str | None = None, uniq: str | None = None, store_ts: int = 0, sys_flag: int = 0,
             props: dict[str, str] | None = None) -> MessageInner:  # fmt: skip
    p = dict(props or {})
    if tags is not None:
        p[m.TAGS] = tags
    if keys is not None:
        p[m.KEYS] = keys
    if uniq is not None:
        p[m.UNIQ_KEY] = uniq
    return MessageInner(topic=topic, queue_id=queue_id, body=body, flag=0, properties=p, sys_flag=sys_flag,
                        born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST,
                        tags_code=m.tags_code_of(tags), store_timestamp=store_ts)  # fmt: skip


def config(root: Path, **overrides: Any) -> StoreConfig:
    kw: dict[str, Any] = {"store_path_root_dir": str(root), **SMALL}
    kw.update(overrides)
    return StoreConfig(**kw)


async def crash(store: MessageStore) -> None:
    """Stop a store the way SIGKILL would: no final flush, no checkpoint, abort file left behind.

    Written bytes stay in the page cache, exactly as after a killed process.
    """
    services = store._services
    assert services is not None
    await services.abandon()
    store._services = None
    store.commit_log.close()
    store.queue_store.close()
    if store.index is not None:
        for f in store.index.files:
            f.close(write_header=False)
    store._release_lock()


@pytest.fixture
async def make_store(tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """``await make_store(**config_overrides)`` starts a store under tmp_path/store (shut down at teardown)."""
    started: list[MessageStore] = []

    async def factory(root: Path | None = None, **overrides: Any) -> MessageStore:
        store = MessageStore(config(root or tmp_path / "store", **overrides), store_host=STORE_HOST)
        await store.start()
        started.append(store)
        return store

    yield factory
    for store in started:
        if store._services is not None:
            await store.shutdown()
