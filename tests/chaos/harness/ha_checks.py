"""Checkers for replicated broker sets (pure functions over a ``History``; docs/chaos.md states each rule).

They need to know, for an operation a broker answered, at which master epoch that broker was. Role polls give
bounds (``EpochView``): a broker's reported ``masterEpoch`` never goes down (it only moves to newer epochs, and
a restarted broker reports 0 until the controller gives it the current one; 0 is ignored), so at an operation
answered by broker B during [call, ret]:

* ``lo`` = the highest epoch B reported in a poll that returned before ``call``;
* ``hi`` = over B's polls that started after ``ret``, the lowest of: the epoch (B answered as master), or the
  epoch - 1 (B answered as slave: it was deposed by that newer epoch, so it acknowledged at an older one).

``newest(set, t)``: the highest epoch any broker of the set reported in a poll that returned before ``t``. An
operation is *certainly deposed* when ``hi < newest(set, call)``: its broker had been replaced before the
request was even sent (it had not learned it yet).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .checks_common import commits_by_key, offset_floor
from .history import Commit, FaultEvent, History, OffsetRead, RoleSample, Send

if TYPE_CHECKING:
    from .checkers import CheckSettings

KILL_KINDS = ("kill", "powerloss")
PAUSE_KINDS = ("pause",)
PARTITION_KINDS = ("isolate", "split", "oneway", "cut-ctl", "cut-peers", "loss", "slow")
DELAY_KINDS = ("delay",)


def category(kind: str) -> str:
    if kind in KILL_KINDS:
        return "kill"
    if kind in PAUSE_KINDS:
        return "pause"
    if kind in DELAY_KINDS:
        return "delay"
    return "partition" if kind in PARTITION_KINDS else "other"


class EpochView:
    """Bounds on a broker's master epoch at any moment, from role polls (see the module docstring)."""

    def __init__(self, samples: Iterable[RoleSample]) -> None:
        polls = [x for x in samples if x.epoch]
        by_broker: dict[str, list[RoleSample]] = defaultdict(list)
        by_set: dict[str, list[RoleSample]] = defaultdict(list)
        for x in polls:
            by_broker[x.broker].append(x)
            by_set[x.bset].append(x)
        self._lo: dict[str, tuple[list[float], list[int]]] = {}
        self._hi: dict[str, tuple[list[float], list[float]]] = {}
        for b, xs in by_broker.items():
            xs.sort(key=lambda x: x.ret)
            self._lo[b] = ([x.ret for x in xs], _running(xs, lambda x: int(x.epoch or 0), max))
            xs.sort(key=lambda x: x.call)
            caps = [float(x.epoch or 0) if x.master else float(x.epoch or 0) - 1 for x in xs]
            self._hi[b] = ([x.call for x in xs], _suffix_min(caps))
        self._newest: dict[str, tuple[list[float], list[int]]] = {}
        for bset, xs in by_set.items():
            xs.sort(key=lambda x: x.ret)
            self._newest[bset] = ([x.ret for x in xs], _running(xs, lambda x: int(x.epoch or 0), max))
        self.by_set = by_set
        self._failovers: dict[str, list[tuple[int, float, float]]] = {}

    def lo(self, broker: str, call: float) -> int:
        times, vals = self._lo.get(broker, ([], []))
        i = bisect.bisect_right(times, call)
        return vals[i - 1] if i else 0

    def hi(self, broker: str, ret: float) -> float:
        times, vals = self._hi.get(broker, ([], []))
        i = bisect.bisect_left(times, ret)
        return vals[i] if i < len(vals) else math.inf

    def newest(self, bset: str, t: float) -> int:
        times, vals = self._newest.get(bset, ([], []))
        i = bisect.bisect_right(times, t)
        return vals[i - 1] if i else 0

    def deposed(self, bset: str, broker: str, call: float, ret: float) -> bool:
        return self.hi(broker, ret) < self.newest(bset, call)

    def failovers(self, bset: str) -> list[tuple[int, float, float]]:
        """(epoch, lb, ub) per epoch after the first seen: the election happened in [lb, ub]. ub: the first
        answer reporting that epoch; lb: the last poll start at which its master still reported an older one."""
        if bset not in self._failovers:
            self._failovers[bset] = self._compute_failovers(bset)
        return self._failovers[bset]

    def _compute_failovers(self, bset: str) -> list[tuple[int, float, float]]:
        xs = self.by_set.get(bset, [])
        out = []
        for e in sorted({int(x.epoch or 0) for x in xs})[1:]:
            ub = min(x.ret for x in xs if (x.epoch or 0) >= e)
            masters = {x.broker for x in xs if x.epoch == e and x.master}
            before = [x.call for x in xs if x.broker in masters and 0 < (x.epoch or 0) < e and x.call <= ub]
            out.append((e, max(before, default=0.0), ub))
        return out


def _running(xs: list[RoleSample], key: Any, fn: Any) -> list[int]:
    out: list[int] = []
    for x in xs:
        out.append(key(x) if not out else fn(out[-1], key(x)))
    return out


def _suffix_min(vals: list[float]) -> list[float]:
    out = list(vals)
    for i in range(len(out) - 2, -1, -1):
        out[i] = min(out[i], out[i + 1])
    return out


# ---------------------------------------------------------------------------------------------- two masters


def two_masters(h: History, s: CheckSettings) -> dict[str, Any]:
    """Never two writable masters in one broker set. A violation is any of:

    (a) two brokers of a set answering a role poll as master with the same master epoch;
    (b) two brokers of a set acknowledging sends (SUCCESS) in the same master epoch: both acknowledgements'
        epoch bounds pin the epoch (lo == hi) to the same value;
    (c) a stale acknowledgement: broker X acknowledged send x, broker Y acknowledged send y, Y's epoch was
        certainly newer (hi(x) < lo(y)) and Y's acknowledgement had returned before X's send was sent
        (y.ret < x.call): the deposed master still took writes after its successor had.
    Reported, not failed: role answers of a deposed master that has not learned of its successor yet (stale
    claims: it keeps its role until the controller reaches it, as in RocketMQ; (c) checks it wrote nothing)."""
    view = EpochView(h.roles)
    violations: list[str] = []
    claims: dict[tuple[str, int], set[str]] = defaultdict(set)
    stale_claims = 0
    for r in h.roles:
        if r.master and r.epoch:
            claims[(r.bset, r.epoch)].add(r.broker)
            stale_claims += int(r.epoch < view.newest(r.bset, r.call))
    violations += [f"{b}: {' and '.join(sorted(v))} both answered master at epoch {e}"
                   for (b, e), v in sorted(claims.items()) if len(v) > 1]
    acks = [x for x in h.sends if x.ok and x.ret is not None and x.broker]
    by_set: dict[str, list[tuple[Send, int, float]]] = defaultdict(list)
    for x in acks:
        by_set[x.bset].append((x, view.lo(x.broker, x.call), view.hi(x.broker, x.ret or x.call)))
    for bset, items in by_set.items():
        violations += _same_epoch_acks(bset, items) + _stale_acks(bset, items, s.examples)
    return {"ok": not violations, "acks_checked": len(acks), "epochs": len(claims), "violations": len(violations),
            "stale_master_claims": stale_claims, "examples": violations[: s.examples]}


def _same_epoch_acks(bset: str, items: list[tuple[Send, int, float]]) -> list[str]:
    exact: dict[int, set[str]] = defaultdict(set)
    for x, lo, hi in items:
        if lo == hi:
            exact[lo].add(x.broker)
    return [f"{bset}: {' and '.join(sorted(v))} both acknowledged sends at epoch {e}"
            for e, v in sorted(exact.items()) if len(v) > 1]


def _stale_acks(bset: str, items: list[tuple[Send, int, float]], limit: int) -> list[str]:
    """(c): for each acknowledgement x, the earliest-returning acknowledgement of another broker at an epoch
    above hi(x); a violation if it returned before x was sent."""
    brokers = {x.broker for x, _, _ in items}
    first_ret: dict[str, list[tuple[int, float, str]]] = {}  # broker -> [(lo, earliest ret at lo >= that)]
    for b in brokers:
        best: dict[int, tuple[float, str]] = {}
        for x, lo, _ in items:
            if x.broker == b and (lo not in best or (x.ret or 0) < best[lo][0]):
                best[lo] = (x.ret or 0.0, x.id)
        suffix: list[tuple[int, float, str]] = []
        run = (math.inf, "")
        for lo, (ret, ident) in sorted(best.items(), reverse=True):
            run = min(run, (ret, ident))
            suffix.append((lo, run[0], run[1]))
        first_ret[b] = list(reversed(suffix))
    keys = {b: [r[0] for r in rows] for b, rows in first_ret.items()}
    out: list[str] = []
    for x, _, hi in items:
        for b, rows in first_ret.items():
            if b == x.broker or hi == math.inf:
                continue
            i = bisect.bisect_right(keys[b], hi)
            if i < len(rows) and rows[i][1] < x.call:
                out.append(f"{bset}: {x.broker} acknowledged {x.id} (sent {x.call:.3f}s, epoch <= {hi:.0f}) after "
                           f"{b} had acknowledged {rows[i][2]} at epoch >= {rows[i][0]} by {rows[i][1]:.3f}s")
                break
        if len(out) >= limit:
            break
    return out


# ---------------------------------------------------------------------------------------------- minority


def minority_side(h: History, f: FaultEvent, bset: str) -> list[str]:
    """The brokers of ``bset`` on the minority side of fault ``f``: on a process cut (either direction) from a
    majority of the controllers and from every other process holding a broker of the set."""
    cut = {(a, b) for a, b in f.cut} | {(b, a) for a, b in f.cut}
    nodes = {addr: node for addr, (node, b) in h.brokers.items() if b == bset}
    out = []
    for addr, node in nodes.items():
        ctl_cut = sum(1 for c in h.controllers if (node, c) in cut)
        peers = {n for a, n in nodes.items() if n != node}
        if h.controllers and ctl_cut > len(h.controllers) // 2 and peers and all((node, p) in cut for p in peers):
            out.append(addr)
    return out


def minority_acks(h: History, s: CheckSettings) -> dict[str, Any]:
    """The minority side of a partition never acknowledges a send: no broker on the minority side of a network
    fault (``minority_side``) answers SUCCESS to a send sent after the fault was in force (call >= applied) and
    answered before its heal began (ret <= healing). Allowed, and counted: the sync state set held that broker
    alone when the fault began (no other replica could be elected: RocketMQ keeps writing, see docs/ha.md)."""
    violations, allowed, checked, attempts = [], 0, 0, 0
    by_broker: dict[str, list[Send]] = defaultdict(list)
    for x in sorted(h.sends, key=lambda x: x.call):
        by_broker[x.broker].append(x)
    calls = {b: [x.call for x in xs] for b, xs in by_broker.items()}
    for f in h.faults:
        if not f.cut or f.applied is None or f.healing is None:
            continue
        for bset in sorted({b for _, b in h.brokers.values()}):
            minority = minority_side(h, f, bset)
            if not minority:
                continue
            checked += 1
            sss = (f.state.get(bset) or {}).get("sss") or []
            window = [x for b in minority for x in by_broker.get(b, [])[
                bisect.bisect_left(calls.get(b, []), f.applied): bisect.bisect_right(calls.get(b, []), f.healing)]]
            for x in window:
                attempts += 1
                if x.ok and x.ret is not None and x.ret <= f.healing:
                    if list(sss) == [x.broker]:
                        allowed += 1
                    else:
                        violations.append(f"{f.kind} {f.target} [{f.applied:.3f}, {f.healing:.3f}]s: {x.broker} "
                                          f"({bset}, minority) acknowledged {x.id} at {x.ret:.3f}s")
    return {"ok": not violations, "minority_sets_checked": checked, "sends_to_minority": attempts,
            "violations": len(violations),
            "allowed_sole_replica": allowed, "examples": violations[: s.examples]}


# ---------------------------------------------------------------------------------------------- unavailability


def fault_unavailability(h: History, s: CheckSettings) -> dict[str, Any]:
    """Per broker set and fault category (kill: kill, powerloss; pause; partition: network faults), the
    unavailability a fault caused: the longest stretch between consecutive acknowledged sends of the set that
    overlaps the fault, from when it was in force to when the deployment was ready again. Reported as count,
    p50, p99 and max over the faults; failed when a p99 is above its target (``s.targets_s``, if set). The real
    client's sends (their own pseudo set, ``rc``: it refreshes routes on its own schedule) are reported only."""
    out: dict[str, Any] = {}
    over: list[str] = []
    real_sets = {b for _, b in h.brokers.values()}
    for bset in sorted({x.bset for x in h.sends}):
        acks = sorted(x.ret for x in h.sends if x.bset == bset and x.ok and x.ret is not None)
        pts = [0.0] + acks + [max((x.call for x in h.sends if x.bset == bset), default=0.0)]
        per: dict[str, list[float]] = defaultdict(list)
        for f in h.faults:
            if f.kind == "unexpected-exit" or f.applied is None:
                continue
            hi = f.ready if f.ready is not None else (f.end or h.end)
            per[category(f.kind)].append(_worst_gap(pts, f.applied, hi))
        out[bset] = {cat: _stats(v) for cat, v in sorted(per.items())}
        for cat, st in out[bset].items():
            target = (s.targets_s or {}).get(cat)
            if target is not None and st["p99_s"] > target and (not real_sets or bset in real_sets):
                over.append(f"{bset} {cat}: p99 {st['p99_s']} s > {target} s")
    return {"ok": not over, "targets_s": s.targets_s, "per_broker_set": out, "examples": over}


def _worst_gap(pts: list[float], lo: float, hi: float) -> float:
    """The longest stretch between consecutive points (sorted) that overlaps [lo, hi]."""
    i = max(0, bisect.bisect_right(pts, lo) - 1)
    worst = 0.0
    while i + 1 < len(pts) and pts[i] < hi:
        worst = max(worst, pts[i + 1] - pts[i])
        i += 1
    return round(worst, 3)


def delay_windows(h: History, s: CheckSettings) -> dict[str, Any]:
    """Reported, never failed: what each delay fault did to the broker sets. Per fault and set: the sends sent
    and acknowledged while it was in force (call >= applied, ret <= healing), their latency (p50 and p99, ms),
    and the longest stretch without an acknowledged send from applied to ready (its unavailability, also in
    ``unavailability_by_fault`` as category ``delay``); ``baseline_p50_ms``: the median latency of sends made
    while no fault was in force, for comparison."""
    faults = [f for f in h.faults if category(f.kind) == "delay" and f.applied is not None and f.healing is not None]
    acked = sorted((x for x in h.sends if x.ok and x.ret is not None), key=lambda x: x.call)
    busy = sorted((f.start, f.ready if f.ready is not None else (f.end or h.end)) for f in h.faults)
    starts = [a for a, _ in busy]
    baseline: dict[str, list[float]] = defaultdict(list)
    for x in acked:  # sends that began and ended with no fault in force (faults run one at a time)
        i = bisect.bisect_right(starts, x.ret or x.call)
        if i == 0 or busy[i - 1][1] < x.call:
            baseline[x.bset].append(1000 * ((x.ret or x.call) - x.call))
    windows = []
    for f in faults:
        assert f.applied is not None and f.healing is not None
        sets: dict[str, Any] = {}
        for bset in sorted({x.bset for x in h.sends}):
            lat = sorted(1000 * ((x.ret or 0) - x.call) for x in acked
                         if x.bset == bset and x.call >= f.applied and (x.ret or 0) <= f.healing)
            pts = [x.ret or 0.0 for x in acked if x.bset == bset]
            sets[bset] = {"acked": len(lat), "p50_ms": round(_pick(lat, 0.5), 1), "p99_ms": round(_pick(lat, 0.99), 1),
                          "longest_gap_s": _worst_gap(sorted(pts), f.applied, f.ready or f.end or h.end)}
        windows.append({"kind": f.kind, "target": f.target, "applied": round(f.applied, 3),
                        "healing": round(f.healing, 3), "detail": f.detail, "sets": sets})
    return {"ok": True, "faults": len(windows),
            "baseline_p50_ms": {b: round(_pick(sorted(v), 0.5), 1) for b, v in sorted(baseline.items())},
            "windows": windows}


def _pick(xs: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values (0 for none)."""
    return xs[max(0, min(len(xs) - 1, math.ceil(q * len(xs)) - 1))] if xs else 0.0


def _stats(v: list[float]) -> dict[str, Any]:
    xs = sorted(v)  # nearest rank: with a few faults per category, p99 is the worst
    return {"faults": len(xs), "p50_s": _pick(xs, 0.5), "p99_s": _pick(xs, 0.99), "max_s": xs[-1] if xs else 0.0}


# ---------------------------------------------------------------------------------------------- offsets, metadata


def _maybe_lost_at_failover(view: EpochView, faults: list[FaultEvent], bset: str, call: float, ret: float,
                            until: float, s: CheckSettings) -> bool:  # fmt: skip
    """A change acknowledged in [call, ret] that a failover before ``until`` may have lost: the master stopped
    passing changes on (the election, or a fault put in force: a kill, a pause, a cut) less than ``s.metasync_s``
    (+ slack) after it acknowledged the change, so the promoted slave may never have received it."""
    horizon = ret + s.metasync_s + s.persist_slack_s
    stops = [f.applied for f in faults if f.applied is not None and call - s.persist_slack_s <= f.applied < horizon]
    return any(ub >= call and lb <= until and (lb < horizon or any(t <= ub for t in stops))
               for _, lb, ub in view.failovers(bset))


def replicated_offsets(h: History, s: CheckSettings) -> dict[str, Any]:
    """Replicated sets: a committed offset read from the set's master is never below what the last acknowledged
    commit the set had to keep left there (``offset_floor``: later commits may lower it). Not kept (allowed,
    counted): commits acknowledged by a certainly deposed master, those a failover may have lost
    (``_maybe_lost_at_failover``), and those within the persist interval of a crash. Reads answered by a
    certainly deposed master are skipped (counted): it serves its own, older table."""
    view = EpochView(h.roles)
    by_key = commits_by_key(h)
    deposed_commits = {id(c) for c in h.commits
                       if c.ok and c.ret is not None and c.broker and view.deposed(c.bset, c.broker, c.call, c.ret)}

    def kept(c: Commit, r: OffsetRead) -> bool:
        assert c.ret is not None
        crash = any(x.bset == r.bset and c.ret <= x.t <= r.t and x.t - c.ret < s.offset_persist_s + s.persist_slack_s
                    for x in h.crashes)
        return (id(c) not in deposed_commits and not crash
                and not _maybe_lost_at_failover(view, h.faults, c.bset, c.call, c.ret, r.t, s))

    violations, allowed, deposed_reads = [], 0, 0
    for r in h.offset_reads:
        if r.broker and view.deposed(r.bset, r.broker, r.call if r.call is not None else r.t, r.t):
            deposed_reads += 1
            continue
        floor, expected = offset_floor(by_key.get((r.group, r.bset, r.topic, r.queue), []), r, kept)
        if r.offset < floor:
            violations.append(f"{(r.group, r.bset, r.topic, r.queue)} read {r.offset} at {r.t:.3f}s from {r.broker}, "
                              f"below kept commit {floor}")
        elif r.offset < expected:
            allowed += 1
    return {"ok": not violations, "reads": len(h.offset_reads), "violations": len(violations),
            "not_yet_replicated": allowed, "reads_from_deposed_master": deposed_reads,
            "commits_on_deposed_master": len(deposed_commits), "examples": violations[: s.examples]}


def replicated_metadata(h: History, s: CheckSettings) -> dict[str, Any]:
    """Replicated sets: every topic and group whose creation was acknowledged exists at the end. With the
    incremental sync (RIP-81, ``s.incremental_metadata``: a creation is acknowledged once its change record is
    held by the sync state set) there is no exception. With the 4.x full pull, allowed and counted: creations
    acknowledged by a certainly deposed master and those a failover may have lost (``_maybe_lost_at_failover``)."""
    view = EpochView(h.roles)
    present = {k: set(v) for k, v in h.meta_present.items()}
    lost, at_failover, deposed = [], 0, 0
    for m in h.meta:
        if not m.ok or m.ret is None or m.name in present.get(m.kind, set()):
            continue
        reason = ""
        if m.broker and view.deposed(m.bset, m.broker, m.call, m.ret):
            deposed, reason = deposed + 1, " by a deposed master"
        elif _maybe_lost_at_failover(view, h.faults, m.bset, m.call, m.ret, h.end, s):
            at_failover, reason = at_failover + 1, " shortly before a failover"
        if s.incremental_metadata or not reason:
            lost.append(f"{m.kind} {m.name} ({m.bset}) acknowledged by {m.broker} at {m.ret:.3f}s{reason}")
    return {"ok": not lost, "acknowledged": sum(1 for m in h.meta if m.ok), "lost": len(lost),
            "incremental_sync": s.incremental_metadata, "lost_at_failover": at_failover,
            "lost_on_deposed_master": deposed, "examples": lost[: s.examples]}
