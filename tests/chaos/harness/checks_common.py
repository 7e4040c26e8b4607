"""Helpers shared by the checkers of ``checkers.py`` and ``ha_checks.py``."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

from .history import Commit, History, OffsetRead


def commits_by_key(h: History) -> dict[tuple[str, str, str, int], list[Commit]]:
    out: dict[tuple[str, str, str, int], list[Commit]] = defaultdict(list)
    for c in sorted(h.commits, key=lambda c: c.call):
        out[(c.group, c.bset, c.topic, c.queue)].append(c)
    return out


def offset_floor(commits: list[Commit], r: OffsetRead,
                 kept: Callable[[Commit, OffsetRead], bool]) -> tuple[int, int]:
    """(floor, expected) for read ``r`` over one queue's commits (sorted by call): the lowest value committed
    from the last kept acknowledged commit on, and from the last acknowledged one on (-1: none). Only commits
    sent before the read returned count, and only those acknowledged before it was sent can be the anchor."""
    rcall = r.call if r.call is not None else r.t
    before = commits[: bisect.bisect_left([c.call for c in commits], r.t)] if commits else []
    floor = expected = -1
    low = None  # the lowest offset committed from index i on
    for i in range(len(before) - 1, -1, -1):
        c = before[i]
        low = c.offset if low is None else min(low, c.offset)
        if not (c.ok and c.ret is not None and c.ret <= rcall):
            continue
        if expected < 0:
            expected = low
        if kept(c, r):
            floor = low
            break
    return floor, expected
