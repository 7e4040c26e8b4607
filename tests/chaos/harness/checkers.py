"""Checkers over a recorded ``History`` (pure functions; each returns a JSON-able dict with ``ok``).

Each checker states its rule in its docstring. ``check_all`` runs them all with the run's settings and gives
the verdict: a run passes when every checker's ``ok`` is true. What is *reported but allowed* (losses that
ASYNC_FLUSH permits under power loss, duplicates, offsets not yet persisted when a broker crashed) is counted
in each result, never hidden.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from controller.linearizability import Model, Operation, check

from .checks_common import commits_by_key, offset_floor
from .ha_checks import (
    delay_windows,
    fault_unavailability,
    minority_acks,
    replicated_metadata,
    replicated_offsets,
    two_masters,
)
from .history import Commit, Crash, History, OffsetRead, Send


@dataclass(frozen=True)
class CheckSettings:
    flush: str = "SYNC_FLUSH"  # the broker sets' flushDiskType
    flush_interval_s: float = 0.5  # flushIntervalCommitLog (ASYNC_FLUSH)
    offset_persist_s: float = 5.0  # how often the broker persists consumer offsets
    persist_slack_s: float = 1.0
    gap_s: float = 1.0  # a gap between acknowledged sends longer than this is an unavailability window
    examples: int = 10
    replicated: bool = False  # broker sets with replicas (HA): no loss is excused by a crash of one process
    metasync_s: float = 3.0  # how late a slave may be with offsets (and, 4.x full pull, topics and groups)
    incremental_metadata: bool = False  # RIP-81: topics and groups acknowledged once replicated (none lost)
    targets_s: dict[str, float] | None = None  # p99 unavailability targets per fault category (ha_checks)


def _powerlosses_after(crashes: list[Crash], bset: str, t: float) -> list[Crash]:
    """Power losses of ``bset`` that can have hit something acknowledged at ``t``: those whose process had not
    been restarted yet at ``t`` (an answer is stamped when the harness reads it, possibly just after the kill)."""
    return sorted((c for c in crashes if c.bset == bset and c.kind == "powerloss"
                   and (c.restart is None or c.restart >= t)), key=lambda c: c.t)


def acked_lost(h: History, s: CheckSettings) -> dict[str, Any]:
    """Every acknowledged send must be in the final read-back. The only allowed exception: with ASYNC_FLUSH and
    unreplicated sets, a message acknowledged before a power loss of its broker set (the page cache it sat in is
    gone). Such losses are reported with their age at the crash, which should stay within the flush interval.
    Replicated sets (``s.replicated``): no exception (an acknowledged message is held by every replica of the
    sync state set, and the nemesis takes down one process at a time)."""
    stored = {m.id for m in h.stored}
    acked: dict[str, Send] = {}
    for snd in h.sends:
        if snd.ok and snd.id not in acked:
            acked[snd.id] = snd
    lost = [snd for i, snd in acked.items() if i not in stored]
    allowed, violations, ages = [], [], []
    for snd in lost:
        after = _powerlosses_after(h.crashes, snd.bset, snd.ret or snd.call)
        if s.flush == "ASYNC_FLUSH" and after and not s.replicated:
            allowed.append(snd)
            ages.append(max(0.0, after[0].t - (snd.ret or snd.call)))
        else:
            violations.append(snd)
    max_age = max(ages, default=0.0)
    return {"ok": not violations, "acknowledged": len(acked), "lost": len(violations),
            "lost_allowed_async": len(allowed), "lost_examples": [x.id for x in violations[: s.examples]],
            "allowed_examples": [x.id for x in allowed[: s.examples]],
            "allowed_window_s": [round(min(ages, default=0.0), 3), round(max_age, 3)],
            "allowed_within_flush_interval": max_age <= s.flush_interval_s + 0.5}


def duplicates(h: History, s: CheckSettings) -> dict[str, Any]:
    """At-least-once allows duplicates: counted, never a failure. Stored: an id at more than one queue position
    (a retried send that had been stored). Delivered: an id delivered more than once (re-pull after a crash)."""
    stored: dict[str, int] = defaultdict(int)
    for m in h.stored:
        stored[m.id] += 1
    delivered: dict[str, int] = defaultdict(int)
    for d in h.deliveries:
        delivered[d.id] += 1
    sd = {k: v for k, v in stored.items() if v > 1}
    dd = {k: v for k, v in delivered.items() if v > 1}
    return {"ok": True, "stored_ids_duplicated": len(sd), "stored_extra_copies": sum(v - 1 for v in sd.values()),
            "delivered_ids_duplicated": len(dd), "delivered_extra": sum(v - 1 for v in dd.values()),
            "examples": sorted(sd)[: s.examples]}


def _erased_between(h: History, bset: str, t1: float, t2: float) -> bool:
    """A power loss of ``bset`` could have erased something observed at ``t1`` before ``t2``."""
    return any(c.bset == bset and c.kind == "powerloss" and (c.restart is None or c.restart >= t1) and c.t <= t2
               for c in h.crashes)


def queue_order(h: History, s: CheckSettings) -> dict[str, Any]:
    """Per queue: (1) in the stored queue, each producer's sequence numbers never go down (a producer sends the
    next message of a queue only after the previous one was acknowledged or given up); (2) one queue position
    holds one message: the same (broker set, topic, queue, offset) acknowledged, delivered or stored with a
    different id than seen before there is a violation, unless a power loss of the broker set came in between
    and the earlier id was not acknowledged at that position (consumers may read a message before it is
    flushed) or was acknowledged under ASYNC_FLUSH: the position was then legitimately reused. Replicated sets:
    never (consumers see only confirmed data, which every replica of the sync state set holds)."""
    violations: list[str] = []
    by_queue: dict[tuple[str, str, int], list[Any]] = defaultdict(list)
    for m in h.stored:
        by_queue[(m.bset, m.topic, m.queue)].append(m)
    for key, msgs in by_queue.items():
        last: dict[str, int] = {}
        for m in sorted(msgs, key=lambda x: x.offset):
            if m.producer and m.seq < last.get(m.producer, -1):
                violations.append(f"{key}: {m.producer} seq {m.seq} stored at {m.offset} after seq {last[m.producer]}")
            last[m.producer] = max(last.get(m.producer, -1), m.seq)
    Obs = tuple[float, str, str]  # (time, id, how)
    at: dict[tuple[str, str, int, int], list[Obs]] = defaultdict(list)
    for x in h.sends:
        if x.ok and x.offset is not None and x.ret is not None:
            at[(x.bset, x.topic, x.queue, x.offset)].append((x.ret, x.id, "acked"))
    for d in h.deliveries:
        at[(d.bset, d.topic, d.queue, d.offset)].append((d.t, d.id, "delivered"))
    for m in h.stored:
        at[(m.bset, m.topic, m.queue, m.offset)].append((h.end, m.id, "stored"))
    reused = 0
    for pos, obs in at.items():
        obs.sort()
        for (t1, id1, how1), (t2, id2, how2) in zip(obs, obs[1:], strict=False):
            if id1 == id2:
                continue
            acked_there = how1 == "acked" or any(o[1] == id1 and o[2] == "acked" for o in obs)
            if (not s.replicated and _erased_between(h, pos[0], t1, t2)
                    and (not acked_there or s.flush == "ASYNC_FLUSH")):
                reused += 1
            else:
                violations.append(f"{pos}: {how2} {id2} at {t2:.3f}s, but {how1} {id1} at {t1:.3f}s")
    return {"ok": not violations, "violations": len(violations), "examples": violations[: s.examples],
            "positions_reused_after_power_loss": reused, "queues": len(by_queue)}


def offset_regressions(h: History, s: CheckSettings) -> dict[str, Any]:
    """A committed offset the broker reports must not be below what the last acknowledged commit it had to keep
    left there: a commit acknowledged before the read was sent, with no crash of its broker set since, or
    acknowledged at least ``offset_persist_s`` (+ slack) before that crash (the broker persists offsets
    periodically, as RocketMQ does). Commits sent after that one (acknowledged or not) may have set a lower value
    (a consumer moved back, e.g. by an offset correction), so the floor is the lowest of them. A read above the
    floor but below what the last acknowledged commit left is counted as ``not_yet_persisted`` (allowed)."""
    violations, allowed = [], 0
    by_key = commits_by_key(h)

    def kept(c: Commit, r: OffsetRead) -> bool:
        assert c.ret is not None
        crash = next((x for x in h.crashes if x.bset == r.bset and c.ret <= x.t <= r.t), None)
        return crash is None or crash.t - c.ret >= s.offset_persist_s + s.persist_slack_s

    for r in h.offset_reads:
        key = (r.group, r.bset, r.topic, r.queue)
        floor, expected = offset_floor(by_key.get(key, []), r, kept)
        if r.offset < floor:
            violations.append(f"{key} read {r.offset} at {r.t:.3f}s, below kept commit {floor}")
        elif r.offset < expected:
            allowed += 1
    return {"ok": not violations, "reads": len(h.offset_reads), "violations": len(violations),
            "not_yet_persisted": allowed, "examples": violations[: s.examples]}


def metadata_lost(h: History, s: CheckSettings) -> dict[str, Any]:
    """Every topic and subscription group whose creation was acknowledged exists at the end (the broker
    persists them before answering)."""
    lost = []
    for m in h.meta:
        if m.ok and m.name not in set(h.meta_present.get(m.kind, [])):
            lost.append(f"{m.kind} {m.name} ({m.bset})")
    acked = sum(1 for m in h.meta if m.ok)
    return {"ok": not lost, "acknowledged": acked, "lost": len(lost), "examples": lost[: s.examples]}


def unavailability(h: History, s: CheckSettings, start: float = 0.0) -> dict[str, Any]:
    """Per broker set: windows longer than ``gap_s`` without an acknowledged send while producers were running
    (from ``start`` to the last send attempt), with the faults that overlap each window."""
    out: dict[str, Any] = {}
    for bset in sorted({x.bset for x in h.sends}):
        sends = [x for x in h.sends if x.bset == bset]
        end = max((x.call for x in sends), default=start)
        acks = sorted(x.ret for x in sends if x.ok and x.ret is not None)
        points = [start] + acks + [end]
        windows: list[dict[str, Any]] = []
        for a, b in zip(points, points[1:], strict=False):
            if b - a > s.gap_s:
                faults = [f"{f.kind}:{f.target}" for f in h.faults if f.start <= b and (f.end or h.end) >= a]
                windows.append({"start": round(a, 3), "end": round(b, 3), "s": round(b - a, 3), "faults": faults})
        gaps = sorted(float(w["s"]) for w in windows)
        out[bset] = {"windows": windows, "longest_s": gaps[-1] if gaps else 0.0,
                     "p99_s": gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] if gaps else 0.0}
    return {"ok": True, "per_broker_set": out}


def linearizable(ops: list[Operation], model: Model[Any] | None, s: CheckSettings) -> dict[str, Any]:
    """The controller history is linearizable (Wing-Gong, ``controller/linearizability.py``), per key."""
    if not ops:
        return {"ok": True, "ops": 0}
    res = check(ops, model=model)
    unknown = sum(1 for op in ops if op.ret is None)
    keys: set[Hashable] = {op.key for op in ops}
    return {"ok": res.ok is True, "verdict": {True: "linearizable", False: "NOT linearizable",
                                             None: "unknown (search budget)"}[res.ok],
            "ops": len(ops), "keys": len(keys), "unknown_outcome": unknown,
            "describe": "" if res.ok else res.describe()[:4000]}


def corrupt(h: History, s: CheckSettings) -> dict[str, Any]:
    """No record served by the broker fails decoding or its body CRC."""
    return {"ok": not h.corrupt, "count": len(h.corrupt), "examples": h.corrupt[: s.examples]}


def processes(h: History, s: CheckSettings) -> dict[str, Any]:
    """No process ended on its own: every exit was a fault the nemesis injected (or the final stop)."""
    exits = [f"{f.target} at {f.start:.2f}s: {f.detail}" for f in h.faults if f.kind == "unexpected-exit"]
    return {"ok": not exits, "unexpected_exits": len(exits), "examples": exits[: s.examples]}


def check_all(h: History, s: CheckSettings, *, model: Model[Any] | None = None,
              checks: Iterable[str] | None = None) -> dict[str, Any]:
    """Run the checkers (all, or those named in ``checks``) and give the verdict."""
    table = {
        "acked_lost": lambda: acked_lost(h, s), "duplicates": lambda: duplicates(h, s),
        "queue_order": lambda: queue_order(h, s),
        "offset_regressions": lambda: (replicated_offsets if s.replicated else offset_regressions)(h, s),
        "metadata_lost": lambda: (replicated_metadata if s.replicated else metadata_lost)(h, s),
        "unavailability": lambda: unavailability(h, s), "unavailability_by_fault": lambda: fault_unavailability(h, s),
        "delay_windows": lambda: delay_windows(h, s),
        "two_masters": lambda: two_masters(h, s), "minority_acks": lambda: minority_acks(h, s),
        "corrupt": lambda: corrupt(h, s), "linearizable": lambda: linearizable(h.controller_ops, model, s),
        "processes": lambda: processes(h, s),
    }
    names = list(checks) if checks is not None else list(table)
    results = {}
    for n in names:
        t = time.monotonic()
        results[n] = table[n]()
        results[n]["check_s"] = round(time.monotonic() - t, 2)
    return {"ok": all(r["ok"] for r in results.values()), "checks": results}
