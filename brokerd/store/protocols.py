"""What the store's helpers need of the store, as ``Protocol``s: ``maintenance.py`` and ``services.py`` depend on
these (and on the components they name), never on ``message_store.py``, so the imports run one way:
message_store → maintenance / services / dispatch → protocols → components. ``MessageStore`` implements both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from brokerd.store.commit_log import CommitLog
from brokerd.store.config import StoreConfig
from brokerd.store.dispatch import Dispatcher
from brokerd.store.flags import NOT_WRITEABLE, RunningFlags
from brokerd.store.index import IndexService
from brokerd.store.queue_store import ConsumeQueueStore

QuotaChecker = Callable[[int], bool]
"""``cb(logical_usage_bytes) -> True`` when the store is over its quota."""

RetentionGuard = Callable[[int], int]
"""``cb(upto) -> allowed``: expiry is about to delete the commit-log segments below ``upto`` (a segment end); the
guard answers the offset below which segments may go (``>= upto``: all of them; less: expiry stops at the last
segment ending at or below it). It may first make more deletable (metadata sync writes a snapshot covering the
change records those segments hold). It runs on the store's thread; an exception holds every segment."""


class StoreParts(Protocol):
    """The components and error state both helpers use."""

    truncate_generation: int  # bumped by every truncation; flushes started before it are ignored
    last_store_timestamp: int

    @property
    def cfg(self) -> StoreConfig: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def queue_store(self) -> ConsumeQueueStore: ...

    @property
    def index(self) -> IndexService | None: ...

    @property
    def running_flags(self) -> RunningFlags: ...

    def io_failed(self, where: str, exc: BaseException, *, bit: int = NOT_WRITEABLE) -> None: ...


class MaintainedStore(StoreParts, Protocol):
    """What ``maintenance.py`` (expiry, truncation, raw appends) uses."""

    @property
    def root(self) -> Path: ...

    @property
    def log(self) -> Any: ...

    @property
    def last_error(self) -> str | None: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def quota_checker(self) -> QuotaChecker | None: ...

    @property
    def retention_guard(self) -> RetentionGuard | None: ...

    def logical_usage_bytes(self) -> int: ...

    def rebuild_next_offsets(self) -> None: ...

    def checkpoint_now(self) -> None: ...

    def request_flush(self) -> None: ...


class ServicedStore(StoreParts, Protocol):
    """What ``services.py`` (flushes, checkpoint, periodic clean) uses."""

    @property
    def checkpoint_path(self) -> Path: ...

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def dispatched_offset(self) -> int: ...

    def on_flushed(self, target: int, generation: int) -> None: ...

    def clean_expired_files(self, force: bool = False, *, now_ms: int | None = None) -> int: ...

    def retry_dispatch(self) -> bool: ...
