"""Store maintenance: expiry of commit-log segments, truncation, and raw (replicated) appends.

Expiry (``clean_expired_files``) runs when the local hour is in ``delete_when``, when forced, or under
space pressure (disk usage above ``disk_space_clean_forcibly_ratio`` or the quota checker says so):
  * normally it deletes the oldest segments whose last store timestamp (or mtime) is older than
    ``file_reserved_time_hours``;
  * under space pressure it deletes the oldest segments regardless of age.
At most ``delete_file_batch_max`` segments per call; never the active segment, never undispatched data, never
what a tier (when attached) does not hold yet, and never past what the retention guard allows (metadata sync:
no segment holding change records that no snapshot covers; ``protocols.RetentionGuard``).
Consume-queue min offsets then move forward past entries that point below the new min physical offset.
"""

from __future__ import annotations

import os
import shutil
import struct
import time

from brokerd.message import DELAY, KEYS, MAGIC_BLANK, TAGS, UNIQ_KEY, CorruptRecordError, verify_record
from brokerd.store import raw_scan
from brokerd.store.commit_log import store_timestamp_in
from brokerd.store.flags import DISK_FULL
from brokerd.store.protocols import MaintainedStore
from brokerd.store.queue_store import parse_for_dispatch
from brokerd.store.raw_scan import Scanned

_SIZE_MAGIC = struct.Struct(">ii")


def disk_usage_ratio(path: os.PathLike[str] | str) -> float:
    """Used fraction as RocketMQ (and ``df``) compute it: used / (used + available to us).

    Blocks reserved for root count neither as used nor as available.
    """
    usage = shutil.disk_usage(path)  # used = total - f_bfree, free = f_bavail
    entire = usage.used + usage.free
    return usage.used / entire if entire else 0.0


def disk_usage_ratio_of(path: os.PathLike[str] | str) -> float:
    """Indirection so tests can simulate a full disk."""
    return disk_usage_ratio(path)


def _space_pressure(store: MaintainedStore) -> bool:
    """Update the DISK_FULL flag from disk usage; True when space must be freed now (disk or quota)."""
    cfg = store.cfg
    try:
        ratio = disk_usage_ratio_of(store.root)
    except OSError:
        ratio = 0.0
    if ratio > cfg.disk_space_warning_level_ratio:
        if not store.running_flags.has(DISK_FULL):
            store.log.error("disk_full", ratio=round(ratio, 4))
        store.running_flags.set(DISK_FULL)
    elif store.running_flags.has(DISK_FULL):
        store.running_flags.clear(DISK_FULL)
        store.log.info("disk_space_ok", ratio=round(ratio, 4))
    pressure = ratio > cfg.disk_space_clean_forcibly_ratio
    checker = store.quota_checker
    if checker is not None and checker(store.logical_usage_bytes()):
        pressure = True
    return pressure


def check_disk(store: MaintainedStore) -> None:
    """Set or clear DISK_FULL now (also done by every clean pass)."""
    _space_pressure(store)


def clean_expired_files(store: MaintainedStore, *, force: bool, now_ms: int | None) -> int:
    cfg = store.cfg
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    pressure = _space_pressure(store)
    is_time = time.localtime(now / 1000).tm_hour in cfg.delete_hours
    if not (force or pressure or is_time):
        return 0
    reserved_ms = cfg.file_reserved_time_hours * 3_600_000
    log = store.commit_log
    tier = log.tier
    victims = 0
    for f in log.files[:-1]:
        if f.end > store.dispatcher.dispatched or victims >= cfg.delete_file_batch_max:
            break
        if tier is not None and f.end > tier.end:  # tiered: only what the tier holds leaves the disk
            break
        ref = f.last_store_ts or int(os.stat(f.path).st_mtime * 1000)
        if not pressure and now - ref < reserved_ms:
            break
        victims += 1
    victims = _guarded(store, victims) if victims else 0
    if not victims:
        return 0
    deleted = log.delete_first(victims)
    cq_files, idx_files = correct_min_offsets(store, read_floor(store))
    store.log.info("expired_files_deleted", segments=deleted, consume_queue_files=cq_files, index_files=idx_files,
                   min_phy_offset=log.min_offset, pressure=pressure, forced=force)  # fmt: skip
    return deleted


def _guarded(store: MaintainedStore, victims: int) -> int:
    """How many of the ``victims`` oldest segments the retention guard lets go (all without a guard)."""
    guard = store.retention_guard
    if guard is None:
        return victims
    files = store.commit_log.files
    upto = files[victims - 1].end
    try:
        allowed = guard(upto)
    except Exception as exc:  # noqa: BLE001 - a failing guard holds the segments; the next pass asks again
        store.log.error("expiry_guard_failed", upto=upto, error=repr(exc))
        return 0
    kept = victims
    while kept and files[kept - 1].end > allowed:
        kept -= 1
    if kept < victims:
        store.log.warning("expiry_held_by_guard", segments=victims, deletable=kept, upto=upto, allowed=allowed)
    return kept


def read_floor(store: MaintainedStore) -> int:
    """The lowest commit-log offset readers can still reach: the local log's, or the tier's below it."""
    log = store.commit_log
    tier = log.tier
    if tier is not None and tier.end > tier.min_offset:
        return min(log.min_offset, tier.min_offset)
    return log.min_offset


def correct_min_offsets(store: MaintainedStore, floor: int) -> tuple[int, int]:
    """Consume-queue and index files that only point below ``floor`` go; returns how many of each."""
    cq_files = store.queue_store.correct_min(floor)
    idx_files = store.index.delete_below(floor) if store.index is not None else 0
    return cq_files, idx_files


def truncate_dirty_files(store: MaintainedStore, offset: int) -> None:
    """Cut the commit log, consume queues and positions back to ``offset`` (a record boundary)."""
    log = store.commit_log
    if not log.min_offset <= offset <= log.max_offset:
        raise ValueError(f"truncate offset {offset} outside [{log.min_offset}, {log.max_offset}]")
    if offset < log.max_offset and offset % log.segment_size and not _boundary(store, offset):
        raise ValueError(f"truncate offset {offset} is not a record boundary")
    store.truncate_generation += 1
    log.truncate(offset)
    store.queue_store.truncate_by_phys(offset)
    d = store.dispatcher
    d.set_positions(dispatched=min(d.dispatched, offset), valid_end=min(d.valid_end, offset),
                    flushed=min(d.flushed, offset), confirm_cap=offset)  # fmt: skip
    store.rebuild_next_offsets()
    store.checkpoint_now()
    store.log.info("commit_log_truncated", offset=offset)


def _boundary(store: MaintainedStore, offset: int) -> bool:
    if store.commit_log.record_size_at(offset) > 0:
        return True
    f = store.commit_log.file_for(offset)
    if f is None:
        return False
    size, magic = _SIZE_MAGIC.unpack_from(f.mm, offset - f.base)
    return bool(magic == MAGIC_BLANK and size == f.end - offset)


def validate_raw(buf: bytes, base_phys: int, segment_size: int) -> int:
    """Return the physical end of the complete records in ``buf`` (which starts at ``base_phys``).

    Raises ValueError for a corrupt record or a bad blank marker; an incomplete tail is not an error.
    """
    p = 0
    n = len(buf)
    while n - p >= 8:
        phys = base_phys + p
        room = segment_size - phys % segment_size
        size, magic = _SIZE_MAGIC.unpack_from(buf, p)
        if magic == MAGIC_BLANK:
            if size != room:
                raise ValueError(f"bad blank marker at {phys}: size {size}, segment room {room}")
        elif size + 8 > room:
            raise ValueError(f"record at {phys} of {size} bytes crosses a segment boundary")
        if p + size > n:
            break
        if magic != MAGIC_BLANK:
            try:
                verify_record(buf, p, n)
            except CorruptRecordError as exc:
                raise ValueError(f"corrupt replicated record at {phys}: {exc}") from exc
        p += size
    return base_phys + p


def records_end(buf: bytes, base_phys: int, segment_size: int) -> tuple[int, int]:
    """(physical end of the complete records in ``buf``, which starts at ``base_phys`` on a record boundary of the
    store's own log; store timestamp of the last one, 0 when none). A blank end-of-segment marker counts as
    complete. Hops over record headers only (no validation: these are bytes the store wrote or verified when they
    were replicated). Pure: callable from any thread."""
    n, p, last = len(buf), 0, -1
    while n - p >= 8:
        size, magic = _SIZE_MAGIC.unpack_from(buf, p)
        if size <= 0 or p + size > n or (magic == MAGIC_BLANK and size != segment_size - (base_phys + p) % segment_size):
            break
        if magic != MAGIC_BLANK:
            last = p
        p += size
    return base_phys + p, store_timestamp_in(buf, last) if last >= 0 else 0


def scan_for_dispatch(buf: bytes | memoryview, base_phys: int, segment_size: int) -> list[Scanned]:
    """What dispatch needs of each complete record in ``buf`` (from record boundary ``base_phys``): the C scanner's
    tuples, or the same built by the Python reference. Pure: callable from any thread. ValueError when corrupt."""
    scan = raw_scan.SCANNER
    if scan is not None:
        return scan(buf, base_phys, segment_size, False)[1]
    end = validate_raw(bytes(buf), base_phys, segment_size)
    out: list[Scanned] = []
    p = 0
    while base_phys + p < end:
        size, magic = _SIZE_MAGIC.unpack_from(buf, p)
        if magic != MAGIC_BLANK:
            i = parse_for_dispatch(buf, p, size)
            pr = i.properties
            out.append((base_phys + p, size, i.topic, i.queue_id, i.queue_offset, i.sys_flag, i.store_ts,
                        pr.get(TAGS), pr.get(KEYS), pr.get(UNIQ_KEY), pr.get(DELAY)))  # fmt: skip
        p += size
    return out


def append_raw(store: MaintainedStore, offset: int, data: bytes | memoryview) -> int:
    """Append raw commit-log bytes (a replication chunk, may end mid-record) and dispatch complete records.

    ``offset`` must equal ``max_phy_offset`` (an empty store also takes a segment start: it begins there). Corrupt
    data raises ValueError and writes nothing.
    Returns the new max physical offset.
    """
    log = store.commit_log
    d = store.dispatcher
    if not log.files and offset != log.max_offset and offset % log.segment_size == 0:
        d.set_positions(dispatched=offset, valid_end=offset, flushed=offset)  # an empty slave starts where the
        # master's log starts (its oldest segments expired)
    elif offset != log.max_offset:
        raise ValueError(f"raw append at {offset} but the log ends at {log.max_offset}")
    if not store.running_flags.writeable:
        raise RuntimeError(f"store not writeable: {store.running_flags!r} {store.last_error or ''}")
    start = d.valid_end
    prefix = log.read_raw(start, offset) if offset > start else b""
    scan = raw_scan.SCANNER
    records: list[Scanned] | None = None
    if scan is None:  # the reference: validate here, parse again in reput
        new_end = validate_raw(prefix + bytes(data), start, log.segment_size)
    else:  # validated and parsed for dispatch in one pass
        new_end, records = scan(prefix + bytes(data) if prefix else data, start, log.segment_size, True)
    try:
        log.append_raw(offset, data)
    except OSError as exc:
        store.io_failed("append_raw", exc)
        raise
    d.valid_end = new_end
    # queue entries, index keys, next queue offsets (listeners wait for the confirm offset)
    if records is None:
        d.reput(new_end)
    else:
        d.reput_scanned(start, new_end, records)
    store.last_store_timestamp = max(store.last_store_timestamp, d.last_reput_timestamp)
    store.request_flush()
    return log.max_offset
