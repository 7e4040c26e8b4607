"""A master's metadata journal (RIP-81): every local metadata change becomes a change record in the broker's own
commit log, on the system topic of its table, so it replicates to the slaves with the messages.

Topics and subscription groups: the record is appended synchronously *before* the change takes effect (the
manager calls ``write`` first; a refused append raises and nothing changes), so there is never an update
without its record nor a record without its update.

Consumer and delay offsets are hot (every pull can commit): they are coalesced. The manager's table changes at
once; the journal keeps the latest value per key (only the changed queues of each ``group@topic``) in the
front buffer and, after ``flush_commits`` commits or ``flush_interval_ms`` after the first unflushed one, swaps
buffers and writes one record per key. So the bytes written grow with the distinct queues touched, not with the
commits, and a record lags its commit by at most the interval (the failover window for offsets).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import structlog

from brokerd.message import MessageInner
from brokerd.metadata.hook import KIND_CONSUMER_OFFSET, KIND_DELAY_OFFSET, OP_DELETE, ChangeValue
from brokerd.store.results import PutMessageResult, PutStatus
from brokerd.sync.records import CREATED, DELETED, UPDATED, SyncRecord

COALESCED = frozenset({KIND_CONSUMER_OFFSET, KIND_DELAY_OFFSET})


class JournalError(Exception):
    """The commit log refused a change record: the change is refused too."""


class JournalStore(Protocol):
    def append_message(self, msg: MessageInner) -> PutMessageResult: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MetadataJournal:
    """``ChangeJournal`` of a master (``brokerd.metadata.hook``)."""

    def __init__(self, store: JournalStore, host: tuple[str, int], *, flush_interval_ms: int = 100,
                 flush_commits: int = 1000, log: Any = None) -> None:  # fmt: skip
        self.store = store
        self.host = host
        self.flush_interval_s = flush_interval_ms / 1000.0
        self.flush_commits = flush_commits
        self.log = log if log is not None else structlog.get_logger("metadata_journal")
        self._front: dict[tuple[str, str], tuple[Any, dict[str, int], bool]] = {}
        self._commits = 0
        self._timer: asyncio.TimerHandle | None = None
        self.last_end = 0  # commit-log end of the last record written
        self.records_total = 0
        self.bytes = 0
        self.coalesced = 0  # offset commits folded into an unflushed record
        self.failures = 0

    # ------------------------------------------------------------------ ChangeJournal

    def write(self, kind: str, op: str, key: str, value: ChangeValue, data_version: dict[str, int],
              created: bool) -> None:  # fmt: skip
        if kind in COALESCED and op != OP_DELETE:
            self._buffer(kind, key, value, data_version, created)
            return
        if kind in COALESCED:  # buffered puts happened before this delete: they go first, in log order too
            self.flush()
        change = DELETED if op == OP_DELETE else (CREATED if created else UPDATED)
        self._append(SyncRecord(kind, change, key, value, data_version, now_ms()))

    def _append(self, rec: SyncRecord) -> None:
        body = rec.encode()
        msg = MessageInner(topic=rec.topic, queue_id=0, body=body, flag=0, properties={}, sys_flag=0,
                           born_timestamp=rec.timestamp, born_host=self.host, store_host=self.host)  # fmt: skip
        res = self.store.append_message(msg)
        if res.status is not PutStatus.PUT_OK:
            self.failures += 1
            raise JournalError(f"change record of {rec.kind} {rec.key!r} not written: {res.status.name}")
        self.last_end = res.end_offset
        self.records_total += 1
        self.bytes += res.wrote_bytes

    # ------------------------------------------------------------------ coalesced offsets

    def _buffer(self, kind: str, key: str, value: Any, dv: dict[str, int], created: bool) -> None:
        k = (kind, key)
        prev = self._front.get(k)
        if prev is not None:
            self.coalesced += 1
            if kind == KIND_CONSUMER_OFFSET:
                value = {**prev[0], **value}
            created = prev[2]
        self._front[k] = (value, dv, created)
        self._commits += 1
        if self._commits >= self.flush_commits:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_interval_s, self.flush)

    def flush(self) -> None:
        """Write the buffered offsets (one record per key); what cannot be written goes back to the buffer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        back, self._front, self._commits = self._front, {}, 0  # swap: commits go on into the fresh buffer
        failed: dict[tuple[str, str], tuple[Any, dict[str, int], bool]] = {}
        # in DataVersion order, so the last record of each table carries the table's newest version
        ordered = sorted(back.items(), key=lambda kv: (kv[1][1].get("counter", 0), kv[1][1].get("timestamp", 0)))
        for (kind, key), (value, dv, created) in ordered:
            if failed:
                failed[(kind, key)] = (value, dv, created)
                continue
            try:
                self._append(SyncRecord(kind, CREATED if created else UPDATED, key, value, dv, now_ms()))
            except JournalError as exc:
                self.log.warning("metadata_offsets_flush_failed", error=str(exc), keys=len(back))
                failed[(kind, key)] = (value, dv, created)
        if failed:  # older than what came in meanwhile: merge under the newer values
            for k, (value, dv, created) in failed.items():
                newer = self._front.get(k)
                if newer is None:
                    self._front[k] = (value, dv, created)
                elif k[0] == KIND_CONSUMER_OFFSET:
                    self._front[k] = ({**value, **newer[0]}, newer[1], created)
            self._timer = asyncio.get_running_loop().call_later(self.flush_interval_s, self.flush)

    @property
    def buffered(self) -> int:
        return len(self._front)

    def close(self) -> None:
        """Stop journaling (the broker is no longer master): buffered offsets are written first if possible."""
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - a stopped store: the offsets stay in the tables, not in the log
            self.log.warning("metadata_journal_close_flush_failed")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stats(self) -> dict[str, int]:
        return {"records": self.records_total, "bytes": self.bytes, "coalesced": self.coalesced,
                "buffered": self.buffered, "failures": self.failures}  # fmt: skip
