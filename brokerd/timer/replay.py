"""Reading the marker queue back: the newest STATE snapshot and the markers after it, into a ``Progress`` (at a
start, after a truncation, when a master becomes a slave), and the markers a follower has not applied yet."""

from __future__ import annotations

import structlog

from brokerd.logbatch import TAG_STATE, MarkedLog
from brokerd.timer.core import PROGRESS_TOPIC
from brokerd.timer.marks import Progress, Resolved, unpack

log = structlog.get_logger(component="timer")


def apply_markers(progress: Progress, marked: MarkedLog, n: int, durable_end: int | None) -> tuple[int, Resolved]:
    """Apply up to ``n`` markers from ``progress.next`` (only those whose record ends at or below ``durable_end``
    when given); returns how many and what they resolved."""
    total = Resolved()
    markers = marked.read_markers(progress.next, n, durable_end=durable_end)
    for mk in markers:
        r = progress.apply(mk.tag, mk.body, mk.queue_offset, mk.end)
        total.fired += r.fired
        total.dropped += r.dropped
        total.recalled += r.recalled
    return len(markers), total


def rebuild(marked: MarkedLog, durable_end: int | None) -> Progress:
    """The progress the marker queue holds: from its newest STATE (all of it when there is none), then every marker
    after it (up to ``durable_end``)."""
    p = Progress()
    local = marked.local
    lo = local.min_offset_in_queue(PROGRESS_TOPIC, 0)
    end = local.max_offset_in_queue(PROGRESS_TOPIC, 0)
    p.next = lo
    last = marked.last_marker()
    if last is not None:
        state_at = _state_of(last.tag, last.body, last.queue_offset)
        if lo <= state_at < end:
            parts = _state_parts(marked, state_at, durable_end)
            if parts is not None:
                p.load_state(parts, state_at + len(parts))
        elif lo > 0:
            log.warning("timer_state_missing", first_marker=lo, state_at=state_at)
    while True:
        n, _ = apply_markers(p, marked, 1024, durable_end)
        if n == 0:
            return p


def _state_of(tag: str, body: bytes, qoff: int) -> int:
    try:
        b = unpack(body)
    except ValueError:
        return -1
    if tag == TAG_STATE:
        return qoff - int(b.get("i", 0))
    return int(b.get("s", -1))


def _state_parts(marked: MarkedLog, at: int, durable_end: int | None) -> list[bytes] | None:
    """The bodies of the STATE snapshot starting at ``at`` (None when incomplete)."""
    first = marked.read_markers(at, 1, durable_end=durable_end)
    if not first or first[0].queue_offset != at or first[0].tag != TAG_STATE:
        return None
    count = int(unpack(first[0].body).get("c", 1))
    found = marked.read_markers(at, count, durable_end=durable_end)
    if len(found) != count or any(mk.tag != TAG_STATE or mk.queue_offset != at + i for i, mk in enumerate(found)):
        return None
    return [mk.body for mk in found]
