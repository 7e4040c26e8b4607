"""The message store: commit log + consume queues + key index, with flush, recovery, expiry and the hooks
replication needs. This is the store's public API; the helpers it composes are ``dispatch.Dispatcher`` (queue
offsets, dispatch, positions), ``services.StoreServices`` (flushes, checkpoint, clean) and ``maintenance``
(expiry, truncation, raw appends), which see the store only through ``protocols``.

Lifecycle
  MessageStore(cfg: StoreConfig, *, store_host: tuple[str, int])
  async start() -> None                 lock the dir, recover (crash recovery when the abort file exists), start
  async shutdown() -> None              flush, clean checkpoint, close; ``start()`` may be called again
  recovery: RecoveryResult | None       what the last start found (abnormal, start, end, torn tail ...)
  prepare_topic(topic, queue_nums) -> None
  is_writeable() -> bool; running_flags: RunningFlags; last_error: str | None
  io_failed(where, exc, *, bit=NOT_WRITEABLE) -> None

Appends (queue offsets assigned in call order; SYNC_FLUSH waits for the flush unless WAIT=false)
  async put_message(msg: MessageInner) -> PutMessageResult
  put_message_deferred(msg) -> tuple[PutMessageResult, asyncio.Future[bool] | None]   flush future to await
  put_message_nowait(msg) -> PutMessageResult | None       None: must use ``put_message``; can_put_nowait: bool
  async put_messages(msgs: list[MessageInner]) -> PutMessageResult                    a batch, one flush wait
  append_message(msg) / append_messages(msgs) -> PutMessageResult    never wait (the caller waits for its put ack);
      a batch: any mix of topics, all or nothing validated, one write per segment (batch_append.py: C when built)
  batch_stats() -> dict; use_native_batch(flag) -> None      the batch append's implementation, runs, fallbacks
  append_raw(offset: int, data: bytes | memoryview) -> int  replicated log bytes at ``offset == max_phy_offset``
                                                            (may end mid-record); returns the new max offset

Reads
  get_message(topic, queue_id, offset, max_msg_nums, max_msg_bytes=262144, tag_filter=None, record_filter=None)
      -> GetMessageResult                                                              PULL_MESSAGE
  read_range(offset: int, max_bytes: int) -> memoryview     raw log bytes from ``offset``, within one segment
  look_message_by_offset(phys) / look_message_by_offset_and_size(phys, size) -> bytes | None
  read_local(phys, size) -> bytes | None    one ``pread`` of the local log (no mapping, no tier): a service's own
      records (with ``queue_store``'s entries: reads not held at the confirm offset, brokerd/locallog.py)
  query_message(topic, key, max_num, begin_ts, end_ts) -> QueryMessageResult         key index
  max_offset_in_queue / min_offset_in_queue(topic, queue_id) -> int
  offset_by_timestamp(topic, queue_id, timestamp_ms, boundary="LOWER") -> int
  message_store_timestamp(topic, queue_id, offset) -> int; earliest_message_time(topic, queue_id) -> int
  topics() -> list[str]; queue_ids(topic) -> list[int]

Positions (physical commit-log offsets)
  min_phy_offset, max_phy_offset, flushed_offset, dispatched_offset, valid_end: int (properties)
  confirm_offset: int (property); set_confirm_offset(offset: int) -> None
  dispatch_behind_confirm: bool; set_dispatch_behind_confirm(flag: bool) -> None   hold dispatch at confirm
  add_dispatch_listener(cb) / remove_dispatch_listener(cb); flush_count: int; request_flush() -> None
  wait_flushed(end) -> asyncio.Future[bool]; when_flushed(end, done) -> None   durable up to end (SYNC_FLUSH)

Replication / truncation / epochs
  truncate_dirty_files(offset: int) -> None       cut log, queues, positions (and epochs) back to a boundary
  epochs: EpochFile                               the epoch history (see epoch.py), loaded by ``start()``
  append_epoch(epoch: int, start_offset: int) -> bool;  epoch_entries() -> list[EpochEntry]
  find_consistent_point(other: list[EpochEntry], other_max_offset: int) -> int        -1: none
  checkpoint_now() -> None; truncate_generation: int

Maintenance
  clean_expired_files(force=False, *, now_ms=None) -> int; delete_topic(topic) -> int
  set_quota_checker(cb: QuotaChecker | None) -> None; logical_usage_bytes() -> int
  set_retention_guard(cb: RetentionGuard | None) -> None   expiry deletes no segment past what ``cb`` allows

The C send lane (processors/send_lane.py)
  services: StoreServices | None; lane_open: bool; lane_binding() -> LaneBinding; layout_generation: int
  lane_appended(f, end, store_ts, dispatched_end) -> None; notify_dispatched(topic, queue_id, qoff, tags) -> None
  commit_log: CommitLog; queue_store: ConsumeQueueStore; index: IndexService | None; dispatcher: Dispatcher

Concurrency contract: call everything from the event loop thread that ran ``start()``. Appends are
synchronous (queue offsets are assigned in call order); only flush waits suspend.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import structlog

from brokerd.message import (
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_SIZE,
    TRANSACTION_PREPARED_TYPE,
    WAIT,
    MessageInner,
    encode_properties,
    ipv4_bytes,
    record_size,
)
from brokerd.store import batch_append, maintenance, reader
from brokerd.store.allocate import Allocator
from brokerd.store.batch_append import BatchAppender
from brokerd.store.checkpoint import Checkpoint, load_checkpoint
from brokerd.store.commit_log import CommitLog, CreateFileError, RecordTooLarge
from brokerd.store.config import StoreConfig
from brokerd.store.dispatch import Dispatcher, DispatchListener
from brokerd.store.epoch import FILE_NAME as EPOCH_FILE_NAME
from brokerd.store.epoch import EpochEntry, EpochFile
from brokerd.store.flags import NOT_WRITEABLE, WRITE_BLOCKERS, WRITE_LOGICS_QUEUE_ERROR, RunningFlags
from brokerd.store.index import IndexFile, IndexService
from brokerd.store.mapped_file import MappedFile
from brokerd.store.protocols import QuotaChecker, RetentionGuard
from brokerd.store.queue_store import ConsumeQueueStore
from brokerd.store.raw_scan import Scanned
from brokerd.store.recovery import RecoveryResult, recover_commit_log
from brokerd.store.results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutStatus,
    QueryMessageResult,
)
from brokerd.store.services import StoreServices
from brokerd.store.tier import TierMiss, TierView

_T = TypeVar("_T")
_TIER_FETCHES = 64  # tier chunks one read may fetch before it gives up waiting (a pull reads at most a few)

__all__ = [
    "MessageStore", "StoreConfig", "PutStatus", "PutMessageResult", "GetMessageStatus", "GetMessageResult",
    "QueryMessageResult", "DispatchListener", "QuotaChecker", "RetentionGuard",
]  # fmt: skip


class LaneBinding(NamedTuple):
    """What ``lane_binding`` hands the C send lane: containers it updates in place, and constants."""

    next_queue_offsets: dict[tuple[str, int], int]
    listeners: list[DispatchListener]
    index_put: Callable[[str, list[str], int, int], None] | None
    id_prefix: str
    sync_flush: bool
    index_file: Callable[[], IndexFile | None] | None  # the current key index file, written into from C


class MessageStore:
    def __init__(self, cfg: StoreConfig, *, store_host: tuple[str, int]) -> None:
        self.cfg = cfg
        self.store_host = store_host
        self.root = Path(cfg.store_path_root_dir)
        self.log = structlog.get_logger().bind(component="store", store_host=f"{store_host[0]}:{store_host[1]}")
        self.dispatcher = Dispatcher(sync_flush=cfg.sync_flush, behind_confirm=cfg.dispatch_behind_confirm,
                                     delay_levels=cfg.delay_levels_ms, io_failed=self.io_failed, log=self.log)  # fmt: skip
        self._id_prefix = ipv4_bytes(store_host[0]).hex().upper() + f"{store_host[1] & 0xFFFFFFFF:08X}"
        self._batch_native = True
        self._init_components()
        self.checkpoint_path = self.root / "checkpoint"
        self.abort_path = self.root / "abort"
        self.epochs = EpochFile(self.root / EPOCH_FILE_NAME)  # loaded by start(); see epoch.py
        self.running_flags = RunningFlags()
        self.last_error: str | None = None
        self.recovery: RecoveryResult | None = None
        self.truncate_generation = 0
        self.last_store_timestamp = 0
        self._quota_checker: QuotaChecker | None = None
        self._retention_guard: RetentionGuard | None = None
        self._sync_flush = cfg.sync_flush
        self._services: StoreServices | None = None
        self._tier_nowait = False
        self._lock_fd: int | None = None
        self._good_topics: set[str] = set()
        self._max_body = cfg.max_message_size
        self._append_listener: Callable[[], None] | None = None

    # ================================================================ lifecycle

    def _init_components(self) -> None:
        cfg = self.cfg
        self.layout_generation = getattr(self, "layout_generation", 0) + 1  # the send lane rebinds on a change
        self.allocator = Allocator(self.root)
        self.commit_log = CommitLog(self.root / "commitlog", cfg.mapped_file_size_commit_log, self.store_host,
                                    warm=cfg.warm_mapped_file_enable)  # fmt: skip
        self.commit_log.allocator = self.allocator
        self.queue_store = ConsumeQueueStore(self.root / "consumequeue", cfg.mapped_file_size_consume_queue,
                                             self.allocator)  # fmt: skip
        self.index: IndexService | None = None
        if cfg.message_index_enable:
            self.index = IndexService(self.root / "index", cfg.max_hash_slot_num, cfg.max_index_num, self.allocator)
        self.dispatcher.attach(self.commit_log, self.queue_store, self.index)
        self._batch = self._new_batch()

    async def start(self) -> None:
        """Lock the store dir, recover (crash recovery when the abort file is present), start services."""
        if self._services is not None:
            raise RuntimeError("store already started")
        self.root.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        self.allocator.reset()
        try:
            await asyncio.to_thread(self._recover)
        except BaseException:
            self._release_lock()
            raise
        self.abort_path.touch()
        maintenance.check_disk(self)
        self._services = StoreServices(self)
        self._services.start()

    def _acquire_lock(self) -> None:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise RuntimeError(f"store_path_root_dir: {self.root} is in use by another process") from exc
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _recover(self) -> None:
        t0 = time.monotonic()
        cp = load_checkpoint(self.checkpoint_path)
        abnormal = self.abort_path.exists() or cp is None or not cp.clean
        res = recover_commit_log(self.commit_log, cp, abnormal=abnormal)
        self.recovery = res
        self.epochs.load()
        self.epochs.truncate_suffix_by_offset(res.end + 1)  # epochs starting past the recovered log end
        self.queue_store.load()
        self.queue_store.recover(res.start)
        if self.index is not None:
            self.index.load()
        d = self.dispatcher
        d.dispatched = res.start
        d.valid_end = res.end
        d.reput(res.end)
        self.rebuild_next_offsets()
        self.queue_store.correct_min(self.commit_log.min_offset)
        self.commit_log.sync_range(self.commit_log.files_between(res.start, res.end))
        d.flushed = res.end
        self.commit_log.start_warming()
        self.log.info("store_recovered", abnormal=abnormal, start=res.start, end=res.end,
                      deleted_segments=res.deleted_segments, torn_tail=res.torn_tail, queues=len(self.queue_store.queues),
                      seconds=round(time.monotonic() - t0, 3))  # fmt: skip

    async def shutdown(self) -> None:
        """Flush everything, write a clean checkpoint, close files and remove the abort file."""
        services, self._services = self._services, None
        if services is None:
            return
        await services.stop()
        self.allocator.close()
        self.commit_log.close()
        self.queue_store.close()
        if self.index is not None:
            self.index.close()
        if self.running_flags.writeable and self.last_error is None:
            self.abort_path.unlink(missing_ok=True)
        self._release_lock()
        self._init_components()  # a later start() loads everything again
        self.log.info("store_shutdown", max_phy_offset=self.max_phy_offset, flushed=self.dispatcher.flushed)

    def prepare_topic(self, topic: str, queue_nums: int) -> None:
        """A topic was created or changed: have the files its first writes need (its queues' first files, the
        first commit-log segment and index file) created and pre-faulted off the loop thread."""
        if self._services is None:
            return
        self.queue_store.prepare(topic, queue_nums)
        if not self.commit_log.files:
            self.commit_log.prepare_next(None)
        if self.index is not None:
            self.index.prepare()

    # ================================================================ put

    async def put_message(self, msg: MessageInner) -> PutMessageResult:
        res = self._put_one(msg)
        if self._sync_flush and res.status is PutStatus.PUT_OK:
            await self._await_flush(res, res.wrote_offset + res.wrote_bytes, msg.properties.get(WAIT) != "false")
        return res

    @property
    def can_put_nowait(self) -> bool:
        """True when ``put_message_nowait`` can complete puts (ASYNC_FLUSH: no flush wait ever)."""
        return not self._sync_flush

    def put_message_deferred(self, msg: MessageInner) -> tuple[PutMessageResult, asyncio.Future[bool] | None]:
        """Append now; with SYNC_FLUSH also return the flush future (True once durable, False on timeout) the
        caller must wait on before acknowledging. Lets the broker answer from a callback, without a task."""
        res = self._put_one(msg)
        if not self._sync_flush or res.status is not PutStatus.PUT_OK:
            return res, None
        services = self._services
        end = res.wrote_offset + res.wrote_bytes
        if services is None or end <= self.dispatcher.flushed:
            return res, None
        if msg.properties.get(WAIT) == "false":
            services.wakeup()
            return res, None
        return res, services.wait_flushed(end)

    def append_message(self, msg: MessageInner) -> PutMessageResult:
        """Append now and never wait, whatever the flush mode: the caller decides what to wait for
        (the broker's put acknowledgement: flush and/or replicas) from the result's end offset."""
        return self._put_one(msg)

    def append_messages(self, msgs: list[MessageInner]) -> PutMessageResult:
        """``append_message`` for a batch: all or nothing validated first, consecutive queue offsets."""
        return self._append_batch(msgs)

    def put_message_nowait(self, msg: MessageInner) -> PutMessageResult | None:
        """Synchronous put when no flush wait is needed; None (nothing stored) when ``put_message`` must be awaited."""
        if self._sync_flush:
            if msg.properties.get(WAIT) != "false":
                return None
            res = self._put_one(msg)
            self.request_flush()
            return res
        return self._put_one(msg)

    def is_writeable(self) -> bool:
        """Started and no error/disk-full flag set (puts would not get SERVICE_NOT_AVAILABLE)."""
        return self._services is not None and self.running_flags.writeable

    async def put_messages(self, msgs: list[MessageInner]) -> PutMessageResult:
        """Store a batch: one record per message, consecutive queue offsets, one flush wait."""
        res = self._append_batch(msgs)
        if self._sync_flush and res.status is PutStatus.PUT_OK:
            await self._await_flush(res, res.end_offset, msgs[0].properties.get(WAIT) != "false")
        return res

    def _append_batch(self, msgs: list[MessageInner]) -> PutMessageResult:
        """The batch append (batch_append.py): records written per segment, consume-queue and index entries put in
        log order, the listeners told once per queue of its newest entry, the append listener once."""
        if not msgs:
            return PutMessageResult(PutStatus.MESSAGE_ILLEGAL)
        if self._services is None or self.running_flags.bits & WRITE_BLOCKERS:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        out = self._batch.append(msgs, batch_append.now_ms())
        if out.create_error is not None:
            self._error("create_mapped_file_failed", out.create_error)
        if out.write_error is not None:
            self.io_failed("append", out.write_error)
        if out.dispatch_error is not None:
            self.io_failed("dispatch", out.dispatch_error, bit=WRITE_LOGICS_QUEUE_ERROR)
        if out.last_ts:
            self.last_store_timestamp = out.last_ts
            d = self.dispatcher
            if d.listeners:
                for key, (qoff, tags, end) in out.notes.items():
                    d.notify(key[0], key[1], qoff, tags, end)
            if self._append_listener is not None:
                self._append_listener()
        return out.result

    def batch_stats(self) -> dict[str, Any]:
        """The batch append's implementation (``native``: the C run is used), runs per implementation, and the
        batches the C run left to Python by reason (batch_append.FALLBACK_REASONS)."""
        b = self._batch
        return {"native": b.native, "runs": dict(b.runs), "fallbacks": dict(b.fallbacks)}

    def use_native_batch(self, flag: bool) -> None:
        """Use the C batch append when built (the default) or always the Python reference (tests, benchmarks)."""
        self._batch_native = flag
        self._batch = self._new_batch()

    def _new_batch(self) -> BatchAppender:
        cfg = self.cfg
        return BatchAppender(self.commit_log, self.dispatcher, self.queue_store, self.index, validate=self._validate,
                             id_prefix=self._id_prefix, max_body=cfg.max_message_size,
                             delay_levels=cfg.delay_levels_ms, use_native=self._batch_native)  # fmt: skip

    async def _await_flush(self, res: PutMessageResult, end: int, wait: bool) -> None:
        services = self._services
        if services is None:
            res.status = PutStatus.FLUSH_DISK_TIMEOUT
        elif not wait:
            services.wakeup()
        elif end > self.dispatcher.flushed and not await services.wait_flushed(end):
            res.status = PutStatus.FLUSH_DISK_TIMEOUT

    def _put_one(self, msg: MessageInner) -> PutMessageResult:
        if self._services is None or self.running_flags.bits & WRITE_BLOCKERS:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        props = encode_properties(msg.properties)
        if (len(msg.body) > self._max_body or len(props) > MAX_PROPERTIES_SIZE or msg.topic not in self._good_topics
                or msg.queue_id < 0):  # fmt: skip
            bad = self._validate(msg, props)
            if bad is not None:
                return PutMessageResult(bad)
        return self._append(msg, props, msg.store_timestamp or time.time_ns() // 1_000_000)

    def _validate(self, msg: MessageInner, props: bytes) -> PutStatus | None:
        if len(msg.body) > self.cfg.max_message_size or msg.queue_id < 0:
            return PutStatus.MESSAGE_ILLEGAL
        if len(props) > MAX_PROPERTIES_SIZE:
            return PutStatus.PROPERTIES_SIZE_EXCEEDED
        topic = msg.topic
        if topic not in self._good_topics:
            if not topic or topic in (".", "..") or "/" in topic or "\x00" in topic or len(topic.encode()) > 32767:
                return PutStatus.MESSAGE_ILLEGAL
            self._good_topics.add(topic)
        if record_size(topic, len(msg.body), len(props)) + END_FILE_MIN_BLANK_LENGTH > self.cfg.mapped_file_size_commit_log:
            return PutStatus.MESSAGE_ILLEGAL  # can never fit a segment (checked here so a batch stores nothing)
        return None

    def _append(self, msg: MessageInner, props: bytes, ts: int) -> PutMessageResult:
        """Append + (inline) dispatch of one validated message. The hot path: keep it lean."""
        d = self.dispatcher
        key = (msg.topic, msg.queue_id)
        dispatchable = not msg.sys_flag & TRANSACTION_PREPARED_TYPE  # prepared (0x4) and rollback (0xC)
        next_qoff = d.next_queue_offsets
        qoff = next_qoff.get(key, 0) if dispatchable else 0
        try:
            phys, size = self.commit_log.append(msg, props, qoff, ts)
        except RecordTooLarge:
            return PutMessageResult(PutStatus.MESSAGE_ILLEGAL)
        except CreateFileError as exc:
            self._error("create_mapped_file_failed", exc)
            return PutMessageResult(PutStatus.CREATE_MAPPED_FILE_FAILED)
        except (OSError, ValueError) as exc:
            self.io_failed("append", exc)
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        self.last_store_timestamp = ts
        if dispatchable:
            next_qoff[key] = qoff + 1
        d.valid_end = phys + size
        if not self.running_flags.bits & WRITE_LOGICS_QUEUE_ERROR:  # after a failed dispatch, retry_dispatch redoes it
            d.dispatch_inline(msg, key, phys, size, qoff, ts, dispatchable)
        if self._append_listener is not None:
            self._append_listener()
        return PutMessageResult(PutStatus.PUT_OK, phys, size, f"{self._id_prefix}{phys:016X}", qoff, ts, 1, phys + size)

    def rebuild_next_offsets(self) -> None:
        """Recompute every next queue offset from the consume queues and the undispatched log (after recovery or
        truncation); the send lane rebinds (new layout generation)."""
        self.dispatcher.rebuild_next_offsets()
        self.layout_generation += 1

    # ================================================================ flush callbacks / errors

    def on_flushed(self, target: int, generation: int) -> None:
        """The flush service made the log durable up to ``target`` (ignored when a truncation came between)."""
        if generation != self.truncate_generation:
            return
        self.dispatcher.flushed_to(target)

    def io_failed(self, where: str, exc: BaseException, *, bit: int = NOT_WRITEABLE) -> None:
        """An I/O error makes the store not writeable (exposed via running_flags / last_error)."""
        self.running_flags.set(bit)
        self._error(where, exc)

    def _error(self, where: str, exc: BaseException) -> None:
        self.last_error = f"{where}: {exc}"
        self.log.error("store_io_error", where=where, error=str(exc), flags=self.running_flags.names())

    # ================================================================ reads

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int, max_msg_bytes: int = 262144,
                    tag_filter: Callable[[int], bool] | None = None,
                    record_filter: Callable[[bytes], bool] | None = None) -> GetMessageResult:  # fmt: skip
        return self._tiered(reader.get_message, self.commit_log, self.queue_store.get(topic, queue_id), self.cfg,
                            offset, max_msg_nums, max_msg_bytes, tag_filter, record_filter,
                            self.dispatcher.read_limit())  # fmt: skip

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The next offset a consumer can see (with the confirm hold: of the confirmed records)."""
        cq = self.queue_store.get(topic, queue_id)
        if cq is None:
            return 0
        limit = self.dispatcher.read_limit()
        return cq.max_offset if limit is None else cq.visible_max_offset(limit)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int, boundary: str = "LOWER") -> int:
        return self._tiered(reader.offset_by_timestamp, self.commit_log, self.queue_store.get(topic, queue_id),
                            timestamp_ms, boundary)  # fmt: skip

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        return self._tiered(reader.store_time_at, self.commit_log, cq, offset) if cq is not None else -1

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        if cq is None or cq.min_offset >= cq.max_offset:
            return -1
        return self._tiered(reader.store_time_at, self.commit_log, cq, cq.min_offset)

    def read_range(self, offset: int, max_bytes: int) -> memoryview:
        """Raw commit-log bytes from ``offset`` (replication): at most ``max_bytes``, never past the segment holding
        ``offset`` nor past the written end (call again from ``offset + len(view)`` for more). A zero-copy view of
        the mapping: release it (``with`` / ``.release()``) before the loop runs anything that may close segments
        (expiry, truncation, shutdown), or copy it with ``bytes()``. ValueError outside [min, max] offset."""
        return self.commit_log.read_range(offset, max_bytes)

    def look_message_by_offset(self, phys_offset: int) -> bytes | None:
        return self._tiered(reader.look, self.commit_log, phys_offset, -1)

    def look_message_by_offset_and_size(self, phys_offset: int, size: int) -> bytes | None:
        return self._tiered(reader.look, self.commit_log, phys_offset, size)

    def read_local(self, phys: int, size: int) -> bytes | None:
        """``size`` bytes of the local log at ``phys``, read with ``pread`` (None unless inside one written segment)."""
        return reader.read_local(self.commit_log, phys, size)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryMessageResult:
        return self._tiered(reader.query_message, self.commit_log, self.index, topic, key, max_num, begin_ts, end_ts,
                            self.dispatcher.read_limit())

    # ================================================================ tiered storage (brokerd.tiered)

    def apply_live_config(self, cfg: StoreConfig) -> None:
        """Take the keys a broker may change at runtime (retention, delete hours, disk ratios) from ``cfg``."""
        self.cfg = dataclasses.replace(
            self.cfg, file_reserved_time_hours=cfg.file_reserved_time_hours, delete_when=cfg.delete_when,
            disk_space_warning_level_ratio=cfg.disk_space_warning_level_ratio,
            disk_space_clean_forcibly_ratio=cfg.disk_space_clean_forcibly_ratio)  # fmt: skip

    def attach_tier(self, tier: TierView | None) -> None:
        """Reads below the local log fall back to ``tier``; local expiry keeps what the tier does not hold yet, and
        consume queues / index are kept down to the tier's floor."""
        self.commit_log.tier = tier

    def _tiered(self, fn: Callable[..., _T], *args: Any) -> _T:
        for _ in range(_TIER_FETCHES):
            try:
                return fn(*args)
            except TierMiss as miss:
                if self._tier_nowait:
                    raise
                miss.fetch_blocking()
        return fn(*args)

    @contextlib.contextmanager
    def tier_nowait(self) -> Iterator[None]:
        """Inside: a read that needs an uncached tier chunk raises ``TierMiss`` instead of fetching it (blocking)."""
        prev, self._tier_nowait = self._tier_nowait, True
        try:
            yield
        finally:
            self._tier_nowait = prev

    async def read_async(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` (one of the read methods above), fetching uncached tier chunks off the event loop."""
        for _ in range(_TIER_FETCHES):
            try:
                with self.tier_nowait():
                    return fn(*args)
            except TierMiss as miss:
                await miss.fetch()
        return fn(*args)

    def correct_min_offsets(self) -> tuple[int, int]:
        """Consume-queue and index files pointing only below what readers can reach (local log or tier) go."""
        return maintenance.correct_min_offsets(self, maintenance.read_floor(self))

    def segment_bounds(self) -> list[tuple[int, int]]:
        """(base, written end) of each local commit-log segment, oldest first."""
        return [(f.base, f.base + f.wrote) for f in self.commit_log.files]

    def records_end(self, data: bytes, start: int) -> tuple[int, int]:
        """(end of the complete records in raw log bytes ``data`` read from record boundary ``start``, store
        timestamp of the last one). Touches no store state: safe in a worker thread."""
        return maintenance.records_end(data, start, self.commit_log.segment_size)

    def scan_for_dispatch(self, data: bytes | memoryview, start: int) -> list[Scanned]:
        """What dispatch needs of each complete record of raw log bytes from record boundary ``start`` (topic, queue,
        offsets, tags, keys ...: ``raw_scan.Scanned``). Touches no store state: safe in a worker thread."""
        return maintenance.scan_for_dispatch(data, start, self.commit_log.segment_size)

    def index_tiered(self, records: list[Scanned]) -> None:
        """Consume-queue entries and index keys of records only the tier holds (reads reach them through it)."""
        self.dispatcher.index_tiered(records)

    def read_raw(self, start: int, end: int) -> bytes:
        """Local commit-log bytes [start, end) (one segment at most per call is fastest)."""
        return self.commit_log.read_raw(start, end)

    def topics(self) -> list[str]:
        return self.queue_store.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return self.queue_store.queue_ids(topic)

    # ================================================================ positions

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.dispatcher.flushed

    @property
    def flush_count(self) -> int:
        """Commit-log fsyncs done by the flush service since start (group commits in SYNC_FLUSH)."""
        return self._services.flush_count if self._services is not None else 0

    @property
    def dispatched_offset(self) -> int:
        """Records below it are in the consume queues and the index."""
        return self.dispatcher.dispatched

    @property
    def valid_end(self) -> int:
        """End of the complete records (a raw replicated append may leave a partial record after it)."""
        return self.dispatcher.valid_end

    @property
    def confirm_offset(self) -> int:
        """Replicated/committed position; without replication: flushed (SYNC_FLUSH) or max offset (ASYNC)."""
        return self.dispatcher.confirm_offset

    def set_confirm_offset(self, offset: int) -> None:
        self.dispatcher.set_confirm_offset(offset)

    @property
    def dispatch_behind_confirm(self) -> bool:
        return self.dispatcher.behind_confirm

    def set_dispatch_behind_confirm(self, flag: bool) -> None:
        """When set, consume queues/index are only dispatched up to ``confirm_offset``."""
        self.dispatcher.set_behind_confirm(flag)

    def add_dispatch_listener(self, cb: DispatchListener) -> None:
        self.dispatcher.listeners.append(cb)

    def remove_dispatch_listener(self, cb: DispatchListener) -> None:
        """Remove by equality (a bound method equals a fresh binding of the same method); unknown: no-op."""
        listeners = self.dispatcher.listeners
        listeners[:] = [x for x in listeners if x != cb]

    def set_append_listener(self, cb: Callable[[], None] | None) -> None:
        """``cb()`` after every local append (one message, or one run of the C send lane); not after
        ``append_raw``. Replication pushes new bytes from it; it must be cheap and must not append."""
        self._append_listener = cb

    # ================================================================ the C send lane (processors/send_lane.py)

    @property
    def services(self) -> StoreServices | None:
        """The background services while the store is started (None when stopped)."""
        return self._services

    @property
    def lane_open(self) -> bool:
        """A put now would be appended and dispatched at once (no error flag)."""
        return self.is_writeable()

    def lane_binding(self) -> LaneBinding:
        """The state the lane updates in place: next queue offsets, dispatch listeners, the key index."""
        index, d = self.index, self.dispatcher
        return LaneBinding(d.next_queue_offsets, d.listeners, index.put_keys if index is not None else None,
                           self._id_prefix, self._sync_flush, index.current_file if index is not None else None)  # fmt: skip

    def lane_appended(self, f: MappedFile, end: int, store_ts: int, dispatched_end: int) -> None:
        """The lane appended records to the active segment ``f`` up to ``end`` and dispatched them up to
        ``dispatched_end`` (-1: none): the positions ``_append`` keeps, then the segment's housekeeping."""
        self.last_store_timestamp = store_ts
        d = self.dispatcher
        d.valid_end = f.base + end
        if dispatched_end >= 0:
            d.dispatched = dispatched_end
        self.commit_log.appended(f, end, store_ts)
        if self._append_listener is not None:
            self._append_listener()

    def notify_dispatched(self, topic: str, queue_id: int, queue_offset: int, tags: int) -> None:
        """Tell the dispatch listeners about entries the lane wrote (a failing listener is logged)."""
        self.dispatcher.notify(topic, queue_id, queue_offset, tags)

    # ================================================================ maintenance (see maintenance.py)

    def delete_topic(self, topic: str) -> int:
        self.layout_generation += 1  # its consume queues are destroyed: the send lane must not keep them
        self.dispatcher.forget_topic(topic)
        return self.queue_store.delete_topic(topic)

    def clean_expired_files(self, force: bool = False, *, now_ms: int | None = None) -> int:
        return maintenance.clean_expired_files(self, force=force, now_ms=now_ms)

    def retry_dispatch(self) -> bool:
        """Writes stopped after a consume-queue or index put failed (WRITE_LOGICS_QUEUE_ERROR: a full disk, say):
        dispatch again from the first record not dispatched; once every record is, writes resume (True).
        RocketMQ leaves this to the next start, and until then the records stored past the failure, acknowledged
        ones among them, cannot be consumed. A flag set by a failed flush of the logics (nothing left to dispatch)
        stays."""
        d = self.dispatcher
        if not self.running_flags.has(WRITE_LOGICS_QUEUE_ERROR) or d.dispatched >= d.valid_end:
            return False
        d.reput(d.valid_end)
        if d.dispatched < d.valid_end:
            return False  # still failing: the put's error is logged again, writes stay stopped
        self.running_flags.clear(WRITE_LOGICS_QUEUE_ERROR)
        self.log.info("dispatch_resumed", dispatched=d.dispatched)
        return True

    def set_quota_checker(self, cb: QuotaChecker | None) -> None:
        """``cb(logical_usage_bytes) -> True`` when over quota: the next clean deletes at once (oldest first)."""
        self._quota_checker = cb

    @property
    def quota_checker(self) -> QuotaChecker | None:
        return self._quota_checker

    def set_retention_guard(self, cb: RetentionGuard | None) -> None:
        """``cb(upto) -> allowed`` (``protocols.RetentionGuard``): consulted before expiry deletes the segments below
        ``upto``; none past ``allowed`` go (metadata sync keeps segments holding change records no snapshot covers)."""
        self._retention_guard = cb

    @property
    def retention_guard(self) -> RetentionGuard | None:
        return self._retention_guard

    def logical_usage_bytes(self) -> int:
        """Bytes of commit log + consume queue + index files (what a container quota counts)."""
        idx = self.index.total_size() if self.index is not None else 0
        return self.commit_log.total_size() + self.queue_store.total_size() + idx

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the commit log, consume queues, positions and epochs back to ``offset`` (a record boundary in
        [min_phy_offset, max_phy_offset]; ValueError otherwise)."""
        maintenance.truncate_dirty_files(self, offset)
        self.epochs.truncate_suffix_by_offset(offset)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append replicated log bytes at ``offset`` (== max_phy_offset; may end mid-record), dispatch the complete
        records and return the new max offset. Corrupt data raises ValueError and writes nothing."""
        return maintenance.append_raw(self, offset, data)

    def append_epoch(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts writing at ``start_offset`` (persisted); False when not after the last."""
        return self.epochs.append(epoch, start_offset)

    def epoch_entries(self) -> list[EpochEntry]:
        return self.epochs.entries()

    def find_consistent_point(self, other: list[EpochEntry], other_max_offset: int) -> int:
        """Where this log and another broker's (its epochs and max offset) last agree; -1 when nowhere."""
        return self.epochs.find_consistent_point(other, self.max_phy_offset, other_max_offset)

    def checkpoint_now(self) -> None:
        """Write the checkpoint synchronously (after truncation)."""
        d = self.dispatcher
        cp = Checkpoint(d.flushed, d.dispatched, self.last_store_timestamp, False)
        if self._services is not None:
            self._services.save_checkpoint_now(cp)

    @property
    def sync_flush(self) -> bool:
        """SYNC_FLUSH: a put is acknowledged once the log is durable up to its end."""
        return self._sync_flush

    def wait_flushed(self, end: int) -> asyncio.Future[bool]:
        """Future: True once the log is durable up to ``end`` (group commit), False on timeout or when stopped."""
        services = self._services
        if services is None:
            fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            fut.set_result(False)
            return fut
        return services.wait_flushed(end)

    def when_flushed(self, end: int, done: Callable[[bool], None]) -> None:
        """``wait_flushed`` as a callback, called from the flush's completion (False at once when stopped)."""
        services = self._services
        if services is None:
            done(False)
        else:
            services.when_flushed(end, done)

    def request_flush(self) -> None:
        if self._services is not None:
            self._services.wakeup()
