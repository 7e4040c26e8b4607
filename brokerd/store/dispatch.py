"""Dispatch: from stored records to consume queues, the key index and dispatch listeners; and the store's positions.

``Dispatcher`` owns
  * the next queue offset of every (topic, queue id) — ``next_queue_offsets``, updated in place by the store's
    append and by the C send lane (which holds the same dict);
  * the dispatch listeners (``listeners``, long-polling wake-ups; the send lane holds the same list);
  * the positions of the commit log, all physical offsets:
      ``dispatched``        records below it are in the consume queues / index
      ``valid_end``         end of the complete records (the log may hold a partial replicated record after it)
      ``flushed``           durable end (set by the flush service through the store)
      ``confirm_offset``    replicated/committed end (``set_confirm_offset``; without one: flushed with SYNC_FLUSH,
                            else the max offset)
  * dispatch itself: ``dispatch_inline`` for a record the store just appended (the hot path), ``reput`` for
    records read back from the log (recovery, replication).
  * the confirm hold (``behind_confirm``): records are dispatched at once, but readers see only those ending at
    or below the confirm offset (``read_limit``) and dispatch listeners hear of an entry only once it is
    confirmed (``pending``: the newest unconfirmed entry per queue, released by ``set_confirm_offset``). So the
    hot path (and the C send lane) write consume queues inline whether or not the hold is on.

The store owns one ``Dispatcher`` for its life (listeners and the confirm override survive a restart); ``attach``
points it at the components of each start. Single writer: the store's event loop thread (or its recovery thread
before services start).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol

from brokerd.message import (
    DELAY,
    KEYS,
    SCHEDULE_TOPIC,
    TAGS,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    UNIQ_KEY,
    MessageInner,
    message_keys,
    tags_code_of,
)
from brokerd.store import raw_scan
from brokerd.store.commit_log import CommitLog
from brokerd.store.flags import WRITE_LOGICS_QUEUE_ERROR
from brokerd.store.index import IndexService
from brokerd.store.queue_store import ConsumeQueueStore, compute_tags_code, parse_for_dispatch
from brokerd.store.raw_scan import Scanned

DispatchListener = Callable[[str, int, int, int], None]
"""``cb(topic, queue_id, queue_offset, tags_code)``: a consume-queue entry was written."""

SKIP_CQ: Final = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
"""Transaction types (sys_flag & 0xC) that get no consume-queue entry."""

_I32: Final = struct.Struct(">i")
REPUT_WINDOW = 1 << 20
"""Log bytes ``reput`` hands the C scanner per call (their records are held in memory until dispatched)."""


def _props(tags: str | None, keys: str | None, uniq: str | None, delay: str | None) -> dict[str, str]:
    """The properties dispatch reads, from a scanned record's values."""
    props: dict[str, str] = {}
    if tags is not None:
        props[TAGS] = tags
    if keys is not None:
        props[KEYS] = keys
    if uniq is not None:
        props[UNIQ_KEY] = uniq
    if delay is not None:
        props[DELAY] = delay
    return props


class IoFailed(Protocol):
    """The store's error sink: sets ``bit`` in its running flags and records the error."""

    def __call__(self, where: str, exc: BaseException, *, bit: int = ...) -> None: ...


class Dispatcher:
    commit_log: CommitLog  # set by attach()
    queue_store: ConsumeQueueStore
    index: IndexService | None

    def __init__(self, *, sync_flush: bool, behind_confirm: bool, delay_levels: list[int], io_failed: IoFailed,
                 log: Any) -> None:  # fmt: skip
        self.next_queue_offsets: dict[tuple[str, int], int] = {}
        self.listeners: list[DispatchListener] = []
        self.dispatched = 0
        self.valid_end = 0
        self.flushed = 0
        self.confirm_override: int | None = None
        self.last_reput_timestamp = 0  # store timestamp of the last record ``reput`` dispatched
        self.behind_confirm = behind_confirm
        self.pending: dict[tuple[str, int], tuple[int, int, int]] = {}  # (topic, qid) -> (qoff, tags, end)
        self.sync_flush = sync_flush
        self._delay_levels = delay_levels
        self._io_failed = io_failed
        self._log = log

    def attach(self, commit_log: CommitLog, queue_store: ConsumeQueueStore, index: IndexService | None) -> None:
        """Dispatch into these components from now on (the store re-creates them for each start)."""
        self.commit_log, self.queue_store, self.index = commit_log, queue_store, index

    # ------------------------------------------------------------ positions

    @property
    def confirm_offset(self) -> int:
        """Replicated/committed position; without replication: flushed (SYNC_FLUSH) or max offset (ASYNC)."""
        if self.confirm_override is not None:
            return min(self.confirm_override, self.commit_log.max_offset)
        return self.flushed if self.sync_flush else self.commit_log.max_offset

    def set_confirm_offset(self, offset: int) -> None:
        """Override the confirm offset (replication); with the hold on, readers see up to it from now on."""
        self.confirm_override = offset
        if self.pending:
            self.release_pending()

    def set_behind_confirm(self, flag: bool) -> None:
        """When set, readers see only records ending at or below ``confirm_offset``."""
        self.behind_confirm = flag
        if self.pending:
            self.release_pending()

    def read_limit(self) -> int | None:
        """Readers see the records ending at or below this; None: every dispatched record."""
        if not self.behind_confirm:
            return None
        confirm = self.confirm_offset
        return confirm if confirm < self.dispatched else None

    def set_positions(self, *, dispatched: int, valid_end: int, flushed: int, confirm_cap: int | None = None) -> None:
        """Set the positions at once (truncation); ``confirm_cap`` lowers a confirm override above it."""
        self.dispatched, self.valid_end, self.flushed = dispatched, valid_end, flushed
        if self.confirm_override is not None and confirm_cap is not None:
            self.confirm_override = min(self.confirm_override, confirm_cap)
        self.pending = {k: v for k, v in self.pending.items() if v[2] <= dispatched}

    def flushed_to(self, target: int) -> None:
        """The flush service made the log durable up to ``target`` (under SYNC_FLUSH without an override that is
        the confirm offset: release what it confirms)."""
        if target > self.flushed:
            self.flushed = min(target, self.commit_log.max_offset)
        if self.pending and self.sync_flush and self.confirm_override is None:
            self.release_pending()

    # ------------------------------------------------------------ dispatch of an appended record (hot path)

    def put_inline(self, msg: MessageInner, key: tuple[str, int], phys: int, size: int, qoff: int, ts: int,
                   to_cq: bool) -> int:  # fmt: skip
        """The consume-queue entry (``to_cq``) and key-index entries of the record just appended for ``msg`` at
        ``phys``; returns its tags code. Raises what the puts raise (positions and listeners untouched)."""
        tags = msg.tags_code
        props = msg.properties
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
        return tags

    def dispatch_inline(self, msg: MessageInner, key: tuple[str, int], phys: int, size: int, qoff: int, ts: int,
                        to_cq: bool) -> None:  # fmt: skip
        """Dispatch the record the store just appended for ``msg`` at ``phys``; an I/O error sets the store's
        WRITE_LOGICS_QUEUE_ERROR flag (``MessageStore.retry_dispatch`` redoes the dispatch)."""
        try:
            tags = self.put_inline(msg, key, phys, size, qoff, ts, to_cq)
        except (OSError, ValueError) as exc:
            self._io_failed("dispatch", exc, bit=WRITE_LOGICS_QUEUE_ERROR)
            return
        self.dispatched = phys + size
        if to_cq and self.listeners:
            self.notify(key[0], key[1], qoff, tags, phys + size)

    def notify(self, topic: str, queue_id: int, queue_offset: int, tags: int, end: int | None = None) -> None:
        """Tell every listener a consume-queue entry landed (a failing listener is logged, not raised). With the
        confirm hold, an entry whose record ends past the confirm offset (``end``; None: the log's valid end)
        waits in ``pending`` until it is confirmed."""
        if self.behind_confirm:
            end = self.valid_end if end is None else end
            if end > self.confirm_offset:
                self.pending[(topic, queue_id)] = (queue_offset, tags, end)
                return
        for cb in self.listeners:
            try:
                cb(topic, queue_id, queue_offset, tags)
            except Exception:  # noqa: BLE001 - a broken listener must not fail the put
                self._log.exception("dispatch_listener_failed", topic=topic, queue_id=queue_id)

    def release_pending(self) -> None:
        """Notify the held entries the confirm offset now covers (all of them when the hold is off)."""
        limit = self.confirm_offset if self.behind_confirm else None
        due = [k for k, v in self.pending.items() if limit is None or v[2] <= limit]
        for key in due:
            qoff, tags, end = self.pending.pop(key)
            self.notify(key[0], key[1], qoff, tags, end)

    # ------------------------------------------------------------ dispatch from the log

    def reput(self, limit: int) -> None:
        """Dispatch complete records in [dispatched, min(limit, valid end)).

        With the C scanner (``raw_scan.SCANNER``) records are parsed a window of the log per call; wherever it
        stops (unusual bytes, an incomplete tail) the Python walk, the reference, carries on from ``dispatched``."""
        limit = min(limit, self.valid_end)
        if self.dispatched >= limit:
            return
        if raw_scan.SCANNER is not None and not self._reput_scanned(raw_scan.SCANNER, limit):
            return
        self._reput_walk(limit)

    def reput_scanned(self, start: int, end: int, records: list[Scanned]) -> None:
        """Dispatch the records [start, end) the caller scanned with ``raw_scan.SCANNER`` (from the bytes it just
        appended): the same as ``reput(end)``, without reading them back. When records before ``start`` are not
        dispatched yet (an earlier dispatch failed), ``reput`` does it all from the log."""
        if self.dispatched != start or end > self.valid_end:
            self.reput(end)
        elif start < end:
            self.dispatch_scanned(records, end)

    def dispatch_scanned(self, records: list[Scanned], end: int) -> bool:
        """Dispatch scanned records (in log order, from ``dispatched``; blank markers between them) and move
        ``dispatched`` to ``end``; the listeners hear once per queue, of its newest entry. False when a
        consume-queue / index put failed (the store's error is set and ``dispatched`` stays at that record)."""
        notes: dict[tuple[str, int], tuple[int, int, int]] = {}
        ok = True
        for rec in records:
            self.dispatched = rec[0]  # past a blank marker: what the walk sets it to
            self.last_reput_timestamp = rec[6]
            try:
                self._put_entries(rec, notes)
            except (OSError, ValueError) as exc:
                self._io_failed("reput", exc, bit=WRITE_LOGICS_QUEUE_ERROR)
                ok = False
                break
        else:
            self.dispatched = end
        self._notify_notes(notes)
        return ok

    def _put_entries(self, rec: Scanned, notes: dict[tuple[str, int], tuple[int, int, int]]) -> None:
        """The consume-queue entry and index keys of one scanned record."""
        phys, size, topic, qid, qoff, sysflag, ts, tags, keys, uniq, delay = rec
        tx = sysflag & 0xC
        if tx not in SKIP_CQ:
            if topic == SCHEDULE_TOPIC:
                code = compute_tags_code(topic, _props(tags, None, None, delay), ts, self._delay_levels)
            else:
                code = tags_code_of(tags)
            key = (topic, qid)
            self.queue_store.get_or_create(topic, qid).put(qoff, phys, size, code)
            if self.next_queue_offsets.get(key, 0) <= qoff:
                self.next_queue_offsets[key] = qoff + 1
            notes[key] = (qoff, code, phys + size)
        if self.index is not None and tx != TRANSACTION_ROLLBACK_TYPE and (keys or uniq):
            self.index.put_keys(topic, message_keys(_props(None, keys, uniq, None)), phys, ts)

    def index_tiered(self, records: list[Scanned]) -> None:
        """Consume-queue entries and index keys of records only the tier holds (an empty slave bootstrapping below
        its local log): positions untouched, nobody notified. OSError / ValueError propagate."""
        notes: dict[tuple[str, int], tuple[int, int, int]] = {}
        for rec in records:
            self._put_entries(rec, notes)

    def _reput_scanned(self, scan: raw_scan.ScanFn, limit: int) -> bool:
        """Dispatch records from ``dispatched`` with the C scanner, a window of at most ``REPUT_WINDOW`` bytes of
        one segment per call (no CRC check: the walk does none). False when a dispatch failed (stop); True when
        the Python walk is to carry on (it finds nothing left when the scanner got to ``limit``)."""
        log = self.commit_log
        while self.dispatched < limit:
            phys = self.dispatched
            f = log.file_for(phys)
            if f is None:
                return True
            stop = min(limit, f.base + f.wrote)
            window = min(stop, phys + REPUT_WINDOW)
            try:
                end, records = self._scan_range(scan, f.mm, f.base, phys, window)
                if end == phys and window < stop:  # a record (or blank marker) larger than the window
                    window = min(stop, phys + max(8, _I32.unpack_from(f.mm, phys - f.base)[0]))
                    end, records = self._scan_range(scan, f.mm, f.base, phys, window)
            except ValueError:  # unusual bytes: the walk dispatches up to them and reports what it reports
                return True
            if not self.dispatch_scanned(records, end):
                return False
            if end != f.end and (end == phys or window == stop):
                return True  # an incomplete or unusual tail: the walk's
        return True

    def _scan_range(self, scan: raw_scan.ScanFn, mm: mmap.mmap, base: int, start: int,
                    stop: int) -> tuple[int, list[Scanned]]:  # fmt: skip
        if stop - start < 8:
            return start, []
        with memoryview(mm) as mv, mv[start - base : stop - base] as view:
            return scan(view, start, self.commit_log.segment_size, False)

    def _reput_walk(self, limit: int) -> None:
        notes: dict[tuple[str, int], tuple[int, int, int]] = {}
        for rec_phys, f, pos, size in self.commit_log.walk(self.dispatched, limit):
            if size < 0:
                self.dispatched = f.end
                continue
            try:
                info = parse_for_dispatch(f.mm, pos, size)
                self.last_reput_timestamp = info.store_ts
                self._dispatch_parsed(info.topic, info.queue_id, info.queue_offset, info.sys_flag, info.store_ts,
                                      info.properties, rec_phys, size, notes)  # fmt: skip
            except (OSError, ValueError) as exc:
                self._io_failed("reput", exc, bit=WRITE_LOGICS_QUEUE_ERROR)
                break
            self.dispatched = rec_phys + size
        self._notify_notes(notes)

    def _notify_notes(self, notes: dict[tuple[str, int], tuple[int, int, int]]) -> None:
        """The listeners hear once per queue, of the newest entry dispatched (long polling compares offsets)."""
        for key, (qoff, code, rec_end) in notes.items():
            self.notify(key[0], key[1], qoff, code, rec_end)

    def _dispatch_parsed(self, topic: str, qid: int, qoff: int, sysflag: int, ts: int, props: dict[str, str],
                         phys: int, size: int, notes: dict[tuple[str, int], tuple[int, int, int]]) -> None:  # fmt: skip
        tx = sysflag & 0xC
        if tx not in SKIP_CQ:
            tags = compute_tags_code(topic, props, ts, self._delay_levels)
            self.queue_store.get_or_create(topic, qid).put(qoff, phys, size, tags)
            key = (topic, qid)
            if self.next_queue_offsets.get(key, 0) <= qoff:
                self.next_queue_offsets[key] = qoff + 1
            notes[key] = (qoff, tags, phys + size)
        if self.index is not None and tx != TRANSACTION_ROLLBACK_TYPE:
            keys = message_keys(props)
            if keys:
                self.index.put_keys(topic, keys, phys, ts)

    # ------------------------------------------------------------ next queue offsets

    def rebuild_next_offsets(self) -> None:
        """Next queue offsets = consume-queue ends, raised by records not dispatched yet. Replaces the dict:
        the store bumps its layout generation so the send lane rebinds."""
        self.next_queue_offsets = {k: cq.max_offset for k, cq in self.queue_store.queues.items()}
        for _phys, f, pos, size in self.commit_log.walk(self.dispatched, self.valid_end):
            if size > 0:
                info = parse_for_dispatch(f.mm, pos, size)
                self.bump_next_offset(info.topic, info.queue_id, info.queue_offset, info.sys_flag)

    def bump_next_offset(self, topic: str, qid: int, qoff: int, sysflag: int) -> None:
        """A record at queue offset ``qoff`` exists (not dispatched yet): the next offset is past it."""
        if (sysflag & 0xC) not in SKIP_CQ and self.next_queue_offsets.get((topic, qid), 0) <= qoff:
            self.next_queue_offsets[(topic, qid)] = qoff + 1

    def forget_topic(self, topic: str) -> None:
        """Drop the next queue offsets of a deleted topic."""
        for key in [k for k in self.next_queue_offsets if k[0] == topic]:
            del self.next_queue_offsets[key]
