"""Read paths of the message store: pull (``get_message``), time search and key query (pure over the files).

``get_message`` follows RocketMQ's ``DefaultMessageStore.getMessage``: the status table and the
``next_begin_offset`` of spec §2.3 PULL_MESSAGE, the in-memory transfer limits, and "always return at
least one message if one matches".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from brokerd.message import decode_properties, message_keys, record_layout
from brokerd.native import native
from brokerd.store.commit_log import CommitLog
from brokerd.store.config import CQ_UNIT_SIZE, StoreConfig
from brokerd.store.consume_queue import ENTRY, ConsumeQueue
from brokerd.store.index import IndexService
from brokerd.store.results import GetMessageResult, GetMessageStatus, QueryMessageResult

_MIN_FILTER_BYTES = 16000
_MAX_FILTER_BYTES = 128 * 1024 * 1024


def get_message(
    log: CommitLog,
    cq: ConsumeQueue | None,
    cfg: StoreConfig,
    offset: int,
    max_msg_nums: int,
    max_msg_bytes: int,
    tag_filter: Callable[[int], bool] | None,
    record_filter: Callable[[bytes], bool] | None = None,
    phys_limit: int | None = None,
) -> GetMessageResult:
    """Up to ``max_msg_nums`` stored records from ``offset``: ``tag_filter`` tests consume-queue tag codes before a
    record is read, ``record_filter`` the record itself (SQL92 on its properties); a record either rejects is
    skipped, and ``next_begin_offset`` moves past it. With ``phys_limit`` only records ending at or below it
    exist for the reader (the confirm offset: consumers never see unreplicated data)."""
    S = GetMessageStatus
    if cq is None:
        return GetMessageResult(S.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0)
    min_o = cq.min_offset
    max_o = cq.max_offset if phys_limit is None else cq.visible_max_offset(phys_limit)
    res = GetMessageResult(S.NO_MATCHED_MESSAGE, next_begin_offset=offset, min_offset=min_o, max_offset=max_o)
    if max_o == 0:
        res.status, res.next_begin_offset = S.NO_MESSAGE_IN_QUEUE, 0
    elif offset < min_o:
        res.status, res.next_begin_offset = S.OFFSET_TOO_SMALL, min_o
    elif offset == max_o:
        res.status = S.OFFSET_OVERFLOW_ONE
    elif offset > max_o:
        res.status, res.next_begin_offset = S.OFFSET_OVERFLOW_BADLY, max_o
    else:
        _scan(log, cq, cfg, offset, max_o, max(1, max_msg_nums), max_msg_bytes, tag_filter, record_filter, res)
    return res


@dataclass(slots=True)
class _Scan:
    """A pull's read in progress: what it may read and what it found so far (``_step``; native ``scan_pull`` takes
    the same ``limits`` and ``state``)."""

    limits: tuple[int, int, int, int, int, int]  # offset, filter bytes, max msgs, max bytes, max mem bytes, max count
    tag_filter: Callable[[int], bool] | None
    record_filter: Callable[[bytes], bool] | None
    res: GetMessageResult
    state: list[int]  # total, count, next_begin, status (_STATUS index), next_phy_file_start


_STATUS = (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.FOUND, GetMessageStatus.MESSAGE_WAS_REMOVING)
SCAN_PULL = native.scan_pull if native is not None and hasattr(native, "scan_pull") else None
"""The C loop (brokerd/csrc/pull_scan.c) when built; ``_step`` is the reference, and runs every entry it hands
back (a record not in a mapped file) and every entry of a SQL92 pull."""


def _scan(
    log: CommitLog,
    cq: ConsumeQueue,
    cfg: StoreConfig,
    offset: int,
    max_o: int,
    max_msg_nums: int,
    max_msg_bytes: int,
    tag_filter: Callable[[int], bool] | None,
    record_filter: Callable[[bytes], bool] | None,
    res: GetMessageResult,
) -> None:
    filter_bytes = min(max(_MIN_FILTER_BYTES, max_msg_nums * CQ_UNIT_SIZE), _MAX_FILTER_BYTES)
    scan_end = min(max_o, offset + filter_bytes // CQ_UNIT_SIZE + 1)
    if not cq.has_file_for(offset):
        res.status, res.next_begin_offset = GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset)
        return
    st = _Scan((offset, filter_bytes, max_msg_nums, max_msg_bytes, cfg.max_transfer_bytes_on_message_in_memory,
                cfg.max_transfer_count_on_message_in_memory), tag_filter, record_filter, res, [0, 0, offset, 0, -1])  # fmt: skip
    for q0, chunk in cq.chunks(offset, scan_end):
        if not _scan_chunk(log, st, q0, chunk):
            break
    total, count, res.next_begin_offset, status, _ = st.state
    res.status = _STATUS[status]
    res.message_count = count
    res.buffer_total_size = total


def _scan_chunk(log: CommitLog, st: _Scan, q0: int, chunk: bytes) -> bool:
    """The entries of one consume-queue file (the first at queue offset ``q0``): in C while it can, an entry it
    hands back by ``_step``; False once a limit ends the read."""
    native_scan = SCAN_PULL if st.record_filter is None else None
    i, n = 0, len(chunk) // CQ_UNIT_SIZE
    while i < n:
        if native_scan is not None:
            i, stopped = native_scan(chunk, q0, i, st.state, st.limits, st.tag_filter, log.files, log.segment_size,
                                     st.res.buffers, st.res.queue_offsets)  # fmt: skip
            if stopped:
                return False
            if i >= n:
                return True
        phys, size, tags = ENTRY.unpack_from(chunk, i * CQ_UNIT_SIZE)
        if not _step(log, st, q0 + i, phys, size, tags):
            return False
        i += 1
    return True


def _step(log: CommitLog, st: _Scan, qoff: int, phys: int, size: int, tags: int) -> bool:
    """One consume-queue entry of a pull's read: False when the read ends before it (a limit reached)."""
    offset, filter_bytes, max_msg_nums, max_msg_bytes, max_mem_bytes, max_count = st.limits
    state = st.state
    total, count, _, _, next_phy_file_start = state
    if (qoff - offset) * CQ_UNIT_SIZE > filter_bytes:
        return False
    if total and count and (
        count + 1 > max_msg_nums or total + size > max_msg_bytes or total + size > max_mem_bytes
        or count > max_count - 1
    ):  # fmt: skip
        return False
    state[2] = qoff + 1
    if size <= 0 or phys < next_phy_file_start:
        return True
    if st.tag_filter is not None and not st.tag_filter(tags):
        if not total:
            state[3] = 0
        return True
    data = log.read(phys, size)
    if data is None:
        if not total:
            state[3] = 2
        state[4] = log.roll_next_file(phys)
        return True
    if st.record_filter is not None and not st.record_filter(data):
        if not total:
            state[3] = 0
        return True
    st.res.buffers.append(data)
    st.res.queue_offsets.append(qoff)
    state[0], state[1], state[3], state[4] = total + size, count + 1, 1, -1
    return True


def store_time_at(log: CommitLog, cq: ConsumeQueue, offset: int) -> int:
    e = cq.entry(offset)
    if e is None or e[1] <= 0:
        return -1
    return log.store_timestamp_at(e[0], e[1])


def offset_by_timestamp(log: CommitLog, cq: ConsumeQueue | None, timestamp: int, boundary: str) -> int:
    """LOWER: first offset stored at or after ``timestamp`` (max_offset if none).
    UPPER: last offset stored at or before ``timestamp`` (min_offset if none). Empty queue: min_offset."""
    if cq is None:
        return 0
    lo, hi = cq.min_offset, cq.max_offset
    while lo < hi and store_time_at(log, cq, lo) < 0:  # skip entries whose record was removed
        lo += 1
    if lo >= hi:
        return cq.min_offset
    upper = boundary.upper() == "UPPER"
    if upper:
        # last offset with ts <= timestamp: binary search for first ts > timestamp, minus one
        a, b = lo, hi
        while a < b:
            mid = (a + b) // 2
            if store_time_at(log, cq, mid) > timestamp:
                b = mid
            else:
                a = mid + 1
        return a - 1 if a > lo else cq.min_offset
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        if store_time_at(log, cq, mid) >= timestamp:
            b = mid
        else:
            a = mid + 1
    return a


def _record_matches(data: bytes, topic: str, key: str) -> bool:
    try:
        _sysflag, body_pos, blen, topic_pos, tlen = record_layout(data, 0, len(data))
    except ValueError:
        return False
    if data[topic_pos : topic_pos + tlen].decode("utf-8", "replace") != topic:
        return False
    props_pos = topic_pos + tlen + 2
    return key in message_keys(decode_properties(data[props_pos:]))


def query_message(
    log: CommitLog, index: IndexService | None, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int,
    phys_limit: int | None = None,
) -> QueryMessageResult:
    res = QueryMessageResult()
    if index is None or max_num <= 0:
        return res
    res.index_last_update_timestamp, res.index_last_update_phyoffset = index.last_update
    for phys in index.query(topic, key, max_num, begin_ts, end_ts):
        size = log.record_size_at(phys)
        if size <= 0 or (phys_limit is not None and phys + size > phys_limit):
            continue
        data = log.read(phys, size)
        if data is not None and _record_matches(data, topic, key):
            res.buffers.append(data)
            if len(res.buffers) >= max_num:
                break
    return res


def look(log: CommitLog, phys: int, size: int) -> bytes | None:
    """The record starting at ``phys`` (of ``size`` bytes when ``size >= 0``), through the mapping or the tier; None
    when there is none (a blank filler, out of range, another size)."""
    found = log.record_size_at(phys)
    if found <= 0 or (size >= 0 and found != size):
        return None
    return log.read(phys, found)


def read_local(log: CommitLog, phys: int, size: int) -> bytes | None:
    """``size`` bytes of the local log at ``phys`` with one ``pread`` (the pages do not stay mapped in the process;
    never the tier); None unless they lie inside the written part of one local segment."""
    f = log.file_for(phys)
    pos = phys - f.base if f is not None else -1
    if f is None or size <= 0 or pos < 0 or pos + size > f.wrote:
        return None
    return f.read_at(pos, size)
