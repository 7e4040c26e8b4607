"""Read paths of the message store: pull (``get_message``), time search and key query (pure over the files).

``get_message`` follows RocketMQ's ``DefaultMessageStore.getMessage``: the status table and the
``next_begin_offset`` of spec §2.3 PULL_MESSAGE, the in-memory transfer limits, and "always return at
least one message if one matches".
"""

from __future__ import annotations

from collections.abc import Callable

from brokerd.message import decode_properties, message_keys, record_layout
from brokerd.store.commit_log import CommitLog
from brokerd.store.config import CQ_UNIT_SIZE, StoreConfig
from brokerd.store.consume_queue import ConsumeQueue
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
    S = GetMessageStatus
    filter_bytes = min(max(_MIN_FILTER_BYTES, max_msg_nums * CQ_UNIT_SIZE), _MAX_FILTER_BYTES)
    scan_end = min(max_o, offset + filter_bytes // CQ_UNIT_SIZE + 1)
    entries = cq.iter_from(offset, scan_end)
    if entries is None:
        res.status, res.next_begin_offset = S.OFFSET_FOUND_NULL, cq.roll_next_file(offset)
        return
    max_count = cfg.max_transfer_count_on_message_in_memory
    max_mem_bytes = cfg.max_transfer_bytes_on_message_in_memory
    buffers = res.buffers
    total = count = 0
    next_phy_file_start = -1
    next_begin = offset
    status = S.NO_MATCHED_MESSAGE
    for qoff, phys, size, tags in entries:
        if (qoff - offset) * CQ_UNIT_SIZE > filter_bytes:
            break
        if total and count and (
            count + 1 > max_msg_nums or total + size > max_msg_bytes or total + size > max_mem_bytes
            or count > max_count - 1
        ):  # fmt: skip
            break
        next_begin = qoff + 1
        if size <= 0 or phys < next_phy_file_start:
            continue
        if tag_filter is not None and not tag_filter(tags):
            if not total:
                status = S.NO_MATCHED_MESSAGE
            continue
        data = log.read(phys, size)
        if data is None:
            if not total:
                status = S.MESSAGE_WAS_REMOVING
            next_phy_file_start = log.roll_next_file(phys)
            continue
        if record_filter is not None and not record_filter(data):
            if not total:
                status = S.NO_MATCHED_MESSAGE
            continue
        buffers.append(data)
        res.queue_offsets.append(qoff)
        total += size
        count += 1
        status = S.FOUND
        next_phy_file_start = -1
    res.status = status
    res.next_begin_offset = next_begin
    res.message_count = count
    res.buffer_total_size = total


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
