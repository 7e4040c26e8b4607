"""The message store: commit log + consume queues + key index, with flush, recovery and expiry.

API served to the broker (request processors):
  put_message / put_messages  SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE, send-back, schedule/transaction re-puts
  get_message                 PULL_MESSAGE (status table and nextBeginOffset of spec §2.3)
  max/min_offset_in_queue, offset_by_timestamp, earliest_message_time   GET_MAX/MIN_OFFSET, SEARCH_OFFSET..., 32
  look_message_by_offset      VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK
  query_message               QUERY_MESSAGE
  add_dispatch_listener       long-polling wake-ups
  truncate_dirty_files / append_raw / set_confirm_offset   replication (slave side, controller mode)

Concurrency contract: call everything from the event loop thread that ran ``start()``. Appends are
synchronous (queue offsets are assigned in call order); only flush waits suspend.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import structlog

from brokerd.message import (
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_SIZE,
    SCHEDULE_TOPIC,
    TAGS,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    WAIT,
    MessageInner,
    encode_properties,
    ipv4_bytes,
    message_keys,
    record_size,
    tags_code_of,
)
from brokerd.store import maintenance, reader
from brokerd.store.allocate import Allocator
from brokerd.store.checkpoint import Checkpoint, load_checkpoint
from brokerd.store.commit_log import CommitLog, CreateFileError, RecordTooLarge
from brokerd.store.config import StoreConfig
from brokerd.store.epoch import FILE_NAME as EPOCH_FILE_NAME
from brokerd.store.epoch import EpochFile
from brokerd.store.flags import NOT_WRITEABLE, WRITE_BLOCKERS, WRITE_LOGICS_QUEUE_ERROR, RunningFlags
from brokerd.store.index import IndexService
from brokerd.store.mapped_file import MappedFile
from brokerd.store.queue_store import ConsumeQueueStore, compute_tags_code, parse_for_dispatch
from brokerd.store.recovery import RecoveryResult, recover_commit_log
from brokerd.store.results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutStatus,
    QueryMessageResult,
)
from brokerd.store.services import StoreServices

__all__ = [
    "MessageStore", "StoreConfig", "PutStatus", "PutMessageResult", "GetMessageStatus", "GetMessageResult",
    "QueryMessageResult", "DispatchListener", "QuotaChecker",
]  # fmt: skip

DispatchListener = Callable[[str, int, int, int], None]
QuotaChecker = Callable[[int], bool]
_SKIP_CQ = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


class LaneBinding(NamedTuple):
    next_queue_offsets: dict[tuple[str, int], int]
    listeners: list[DispatchListener]
    index_put: Callable[[str, list[str], int, int], None] | None
    id_prefix: str
    sync_flush: bool


class MessageStore:
    def __init__(self, cfg: StoreConfig, *, store_host: tuple[str, int]) -> None:
        self.cfg = cfg
        self.store_host = store_host
        self.root = Path(cfg.store_path_root_dir)
        self._init_components()
        self.checkpoint_path = self.root / "checkpoint"
        self.abort_path = self.root / "abort"
        self.epochs = EpochFile(self.root / EPOCH_FILE_NAME)  # loaded by start(); see epoch.py
        self.running_flags = RunningFlags()
        self.last_error: str | None = None
        self.recovery: RecoveryResult | None = None
        self.truncate_generation = 0
        self.last_store_timestamp = 0
        self._next_qoff: dict[tuple[str, int], int] = {}
        self._dispatched = 0
        self._valid_end = 0
        self._flushed = 0
        self._confirm_override: int | None = None
        self._behind_confirm = cfg.dispatch_behind_confirm
        self._listeners: list[DispatchListener] = []
        self._quota_checker: QuotaChecker | None = None
        self._delay_levels = cfg.delay_levels_ms
        self._id_prefix = ipv4_bytes(store_host[0]).hex().upper() + f"{store_host[1] & 0xFFFFFFFF:08X}"
        self._sync_flush = cfg.sync_flush
        self._services: StoreServices | None = None
        self._lock_fd: int | None = None
        self._good_topics: set[str] = set()
        self._max_body = cfg.max_message_size
        self.log = structlog.get_logger().bind(component="store", store_host=f"{store_host[0]}:{store_host[1]}")

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
        self._dispatched = res.start
        self._valid_end = res.end
        limit = res.end
        if self._behind_confirm and cp is not None:
            limit = min(res.end, max(cp.logics_offset, res.start))
        self._reput(limit)
        self._rebuild_next_offsets()
        self.queue_store.correct_min(self.commit_log.min_offset)
        self.commit_log.sync_range(self.commit_log.files_between(res.start, res.end))
        self._flushed = res.end
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
        self.log.info("store_shutdown", max_phy_offset=self.max_phy_offset, flushed=self._flushed)

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
        if services is None or end <= self._flushed:
            return res, None
        if msg.properties.get(WAIT) == "false":
            services.wakeup()
            return res, None
        return res, services.wait_flushed(end)

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
        if not msgs:
            return PutMessageResult(PutStatus.MESSAGE_ILLEGAL)
        if self._services is None or self.running_flags.bits & WRITE_BLOCKERS:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)
        encoded: list[bytes] = []
        for m in msgs:
            props = encode_properties(m.properties)
            bad = self._validate(m, props)
            if bad is not None:
                return PutMessageResult(bad)
            encoded.append(props)
        ts = time.time_ns() // 1_000_000
        results: list[PutMessageResult] = []
        for m, props in zip(msgs, encoded, strict=True):
            r = self._append(m, props, m.store_timestamp or ts)
            if r.status is not PutStatus.PUT_OK:
                return r
            results.append(r)
        first, last = results[0], results[-1]
        res = PutMessageResult(PutStatus.PUT_OK, first.wrote_offset, sum(r.wrote_bytes for r in results),
                               ",".join(r.msg_id for r in results), first.queue_offset, first.store_timestamp,
                               len(results))  # fmt: skip
        if self._sync_flush:
            await self._await_flush(res, last.wrote_offset + last.wrote_bytes, msgs[0].properties.get(WAIT) != "false")
        return res

    async def _await_flush(self, res: PutMessageResult, end: int, wait: bool) -> None:
        services = self._services
        if services is None:
            res.status = PutStatus.FLUSH_DISK_TIMEOUT
        elif not wait:
            services.wakeup()
        elif end > self._flushed and not await services.wait_flushed(end):
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
        key = (msg.topic, msg.queue_id)
        dispatchable = not msg.sys_flag & TRANSACTION_PREPARED_TYPE  # prepared (0x4) and rollback (0xC)
        qoff = self._next_qoff.get(key, 0) if dispatchable else 0
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
            self._next_qoff[key] = qoff + 1
        self._valid_end = phys + size
        if self._behind_confirm:
            self._reput(self.confirm_offset)
        elif not self.running_flags.bits & WRITE_LOGICS_QUEUE_ERROR:  # after a failed dispatch, recovery redoes it
            self._dispatch_inline(msg, key, phys, size, qoff, ts, dispatchable)
        return PutMessageResult(PutStatus.PUT_OK, phys, size, f"{self._id_prefix}{phys:016X}", qoff, ts, 1)

    def _dispatch_inline(self, msg: MessageInner, key: tuple[str, int], phys: int, size: int, qoff: int, ts: int,
                         to_cq: bool) -> None:  # fmt: skip
        tags = msg.tags_code
        props = msg.properties
        try:
            if to_cq:
                if key[0] == SCHEDULE_TOPIC:
                    tags = compute_tags_code(key[0], props, ts, self._delay_levels)
                elif not tags and TAGS in props:
                    tags = tags_code_of(props[TAGS])
                cq = self.queue_store.queues.get(key) or self.queue_store.get_or_create(key[0], key[1])
                cq.put(qoff, phys, size, tags)
            index = self.index
            if index is not None and (msg.sys_flag & 0xC) != TRANSACTION_ROLLBACK_TYPE:
                keys = message_keys(props)
                if keys:
                    index.put_keys(key[0], keys, phys, ts)
        except (OSError, ValueError) as exc:
            self.io_failed("dispatch", exc, bit=WRITE_LOGICS_QUEUE_ERROR)
            return
        self._dispatched = phys + size
        if to_cq and self._listeners:
            for cb in self._listeners:
                try:
                    cb(key[0], key[1], qoff, tags)
                except Exception:  # noqa: BLE001 - a broken listener must not fail the put
                    self.log.exception("dispatch_listener_failed", topic=key[0], queue_id=key[1])

    def _notify(self, cb: DispatchListener, topic: str, qid: int, qoff: int, tags: int) -> None:
        try:
            cb(topic, qid, qoff, tags)
        except Exception:  # noqa: BLE001 - a broken listener must not fail the put
            self.log.exception("dispatch_listener_failed", topic=topic, queue_id=qid)

    # ================================================================ dispatch from the log

    def _reput(self, limit: int) -> None:
        """Dispatch complete records in [dispatched, min(limit, valid end))."""
        limit = min(limit, self._valid_end)
        phys = self._dispatched
        if phys >= limit:
            return
        for rec_phys, f, pos, size in self.commit_log.walk(phys, limit):
            if size < 0:
                self._dispatched = f.end
                continue
            try:
                info = parse_for_dispatch(f.mm, pos, size)
                self._dispatch_parsed(info.topic, info.queue_id, info.queue_offset, info.sys_flag, info.store_ts,
                                      info.properties, rec_phys, size)  # fmt: skip
            except (OSError, ValueError) as exc:
                self.io_failed("reput", exc, bit=WRITE_LOGICS_QUEUE_ERROR)
                return
            self._dispatched = rec_phys + size

    def _dispatch_parsed(self, topic: str, qid: int, qoff: int, sysflag: int, ts: int, props: dict[str, str],
                         phys: int, size: int) -> None:  # fmt: skip
        tx = sysflag & 0xC
        if tx not in _SKIP_CQ:
            tags = compute_tags_code(topic, props, ts, self._delay_levels)
            self.queue_store.get_or_create(topic, qid).put(qoff, phys, size, tags)
            key = (topic, qid)
            if self._next_qoff.get(key, 0) <= qoff:
                self._next_qoff[key] = qoff + 1
            for cb in self._listeners:
                self._notify(cb, topic, qid, qoff, tags)
        if self.index is not None and tx != TRANSACTION_ROLLBACK_TYPE:
            keys = message_keys(props)
            if keys:
                self.index.put_keys(topic, keys, phys, ts)

    def _rebuild_next_offsets(self) -> None:
        """Next queue offsets = consume-queue ends, raised by records not dispatched yet."""
        self._next_qoff = {k: cq.max_offset for k, cq in self.queue_store.queues.items()}
        self.layout_generation += 1
        for _phys, f, pos, size in self.commit_log.walk(self._dispatched, self._valid_end):
            if size > 0:
                info = parse_for_dispatch(f.mm, pos, size)
                self._bump_next_offset(info.topic, info.queue_id, info.queue_offset, info.sys_flag)

    def _bump_next_offset(self, topic: str, qid: int, qoff: int, sysflag: int) -> None:
        if (sysflag & 0xC) not in _SKIP_CQ and self._next_qoff.get((topic, qid), 0) <= qoff:
            self._next_qoff[(topic, qid)] = qoff + 1

    # ================================================================ flush callbacks / errors

    def on_flushed(self, target: int, generation: int) -> None:
        if generation != self.truncate_generation:
            return
        if target > self._flushed:
            self._flushed = min(target, self.commit_log.max_offset)
        if self._behind_confirm and self._sync_flush and self._confirm_override is None:
            self._reput(self._flushed)

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
        return reader.get_message(self.commit_log, self.queue_store.get(topic, queue_id), self.cfg, offset,
                                  max_msg_nums, max_msg_bytes, tag_filter, record_filter)  # fmt: skip

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int, boundary: str = "LOWER") -> int:
        return reader.offset_by_timestamp(self.commit_log, self.queue_store.get(topic, queue_id), timestamp_ms,
                                          boundary)  # fmt: skip

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        return reader.store_time_at(self.commit_log, cq, offset) if cq is not None else -1

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.queue_store.get(topic, queue_id)
        if cq is None or cq.min_offset >= cq.max_offset:
            return -1
        return reader.store_time_at(self.commit_log, cq, cq.min_offset)

    def look_message_by_offset(self, phys_offset: int) -> bytes | None:
        size = self.commit_log.record_size_at(phys_offset)
        return self.commit_log.read(phys_offset, size) if size > 0 else None

    def look_message_by_offset_and_size(self, phys_offset: int, size: int) -> bytes | None:
        if self.commit_log.record_size_at(phys_offset) != size:
            return None
        return self.commit_log.read(phys_offset, size)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryMessageResult:
        return reader.query_message(self.commit_log, self.index, topic, key, max_num, begin_ts, end_ts)

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
        return self._flushed

    @property
    def flush_count(self) -> int:
        """Commit-log fsyncs done by the flush service since start (group commits in SYNC_FLUSH)."""
        return self._services.flush_count if self._services is not None else 0

    @property
    def dispatched_offset(self) -> int:
        return self._dispatched

    @property
    def confirm_offset(self) -> int:
        """Replicated/committed position; without replication: flushed (SYNC_FLUSH) or max offset (ASYNC)."""
        if self._confirm_override is not None:
            return min(self._confirm_override, self.commit_log.max_offset)
        return self._flushed if self._sync_flush else self.commit_log.max_offset

    def set_confirm_offset(self, offset: int) -> None:
        self._confirm_override = offset
        if self._behind_confirm:
            self._reput(self.confirm_offset)

    @property
    def dispatch_behind_confirm(self) -> bool:
        return self._behind_confirm

    def set_dispatch_behind_confirm(self, flag: bool) -> None:
        """When set, consume queues/index are only dispatched up to ``confirm_offset``."""
        self._behind_confirm = flag
        self._reput(self.confirm_offset if flag else self.commit_log.max_offset)

    def add_dispatch_listener(self, cb: DispatchListener) -> None:
        self._listeners.append(cb)

    # ================================================================ the C send lane (processors/send_lane.py)

    @property
    def services(self) -> StoreServices | None:
        """The background services while the store is started (None when stopped)."""
        return self._services

    @property
    def lane_open(self) -> bool:
        """A put now would be appended and dispatched at once (no error flag, no confirm-offset hold)."""
        return self.is_writeable() and not self._behind_confirm

    def lane_binding(self) -> LaneBinding:
        """The state the lane updates in place: next queue offsets, dispatch listeners, the key-index put."""
        index = self.index
        return LaneBinding(self._next_qoff, self._listeners, index.put_keys if index is not None else None,
                           self._id_prefix, self._sync_flush)  # fmt: skip

    def lane_appended(self, f: MappedFile, end: int, store_ts: int, dispatched_end: int) -> None:
        """The lane appended records to the active segment ``f`` up to ``end`` and dispatched them up to
        ``dispatched_end`` (-1: none): the positions ``_append`` keeps, then the segment's housekeeping."""
        self.last_store_timestamp = store_ts
        self._valid_end = f.base + end
        if dispatched_end >= 0:
            self._dispatched = dispatched_end
        self.commit_log.appended(f, end, store_ts)

    def notify_dispatched(self, topic: str, queue_id: int, queue_offset: int, tags: int) -> None:
        for cb in self._listeners:
            self._notify(cb, topic, queue_id, queue_offset, tags)

    # ================================================================ maintenance (see maintenance.py)

    def delete_topic(self, topic: str) -> int:
        self.layout_generation += 1  # its consume queues are destroyed: the send lane must not keep them
        for key in [k for k in self._next_qoff if k[0] == topic]:
            del self._next_qoff[key]
        return self.queue_store.delete_topic(topic)

    def clean_expired_files(self, force: bool = False, *, now_ms: int | None = None) -> int:
        return maintenance.clean_expired_files(self, force=force, now_ms=now_ms)

    def set_quota_checker(self, cb: QuotaChecker | None) -> None:
        """``cb(logical_usage_bytes) -> True`` when over quota: the next clean deletes at once (oldest first)."""
        self._quota_checker = cb

    @property
    def quota_checker(self) -> QuotaChecker | None:
        return self._quota_checker

    def logical_usage_bytes(self) -> int:
        """Bytes of commit log + consume queue + index files (what a container quota counts)."""
        idx = self.index.total_size() if self.index is not None else 0
        return self.commit_log.total_size() + self.queue_store.total_size() + idx

    def truncate_dirty_files(self, offset: int) -> None:
        maintenance.truncate_dirty_files(self, offset)
        self.epochs.truncate_suffix_by_offset(offset)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        return maintenance.append_raw(self, offset, data)

    def checkpoint_now(self) -> None:
        """Write the checkpoint synchronously (after truncation)."""
        cp = Checkpoint(self._flushed, self._dispatched, self.last_store_timestamp, False)
        if self._services is not None:
            self._services.save_checkpoint_now(cp)

    def request_flush(self) -> None:
        if self._services is not None:
            self._services.wakeup()

    # internal state shared with maintenance.py
    def _set_positions(self, *, dispatched: int, valid_end: int, flushed: int, confirm_cap: int | None = None) -> None:
        self._dispatched, self._valid_end, self._flushed = dispatched, valid_end, flushed
        if self._confirm_override is not None and confirm_cap is not None:
            self._confirm_override = min(self._confirm_override, confirm_cap)

    @property
    def valid_end(self) -> int:
        return self._valid_end

