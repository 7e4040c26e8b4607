"""The failover benchmark's bookkeeping: the producer's answer log (scripts/bench/ha_load.py), what it says about
each round (stalls, acknowledgements by a deposed master), and the final check that every acknowledged send is
on the set's master (acknowledged-but-lost must be 0)."""

from __future__ import annotations

import pathlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from brokerd.remoting.client import RemotingClient
from scripts.bench.ha_common import max_offset, read_queue


@dataclass(frozen=True)
class Answer:
    t_send: float
    t_resp: float
    set: str
    addr: str
    code: int
    qid: int
    qoff: int
    uniq: str


@dataclass
class RoundMark:
    """What the benchmark did in one round (monotonic seconds), for reading the log against."""

    kind: str
    victim: int
    t_kill: float
    old_masters: dict[str, str]  # every set's master before the kill
    victim_sets: list[str]
    t_resume: float | None = None  # SIGCONT (stop) or restart (kill)
    t_end: float | None = None  # next round's kill, or the end of the load


def load_answers(path: pathlib.Path) -> list[Answer]:
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                t0, t1, s, addr, code, qid, qoff, uniq = orjson.loads(line)
            except ValueError:  # the last line of a killed producer may be cut
                continue
            out.append(Answer(t0, t1, s, addr, code, qid, qoff, uniq))
    return out


def longest_gap(times: list[float], lo: float, hi: float) -> float:
    """Longest interval in [lo, hi] without an element of sorted `times` (ms)."""
    inside = [t for t in times if lo <= t <= hi]
    pts = [lo, *inside, hi]
    return round(max(b - a for a, b in zip(pts, pts[1:], strict=False)) * 1000, 1)


@dataclass
class RoundView:
    gaps_victim_ms: list[float] = field(default_factory=list)
    gaps_other_ms: list[float] = field(default_factory=list)
    acked_after_deposed: list[dict[str, Any]] = field(default_factory=list)
    acked_last_second_before_kill: int = 0  # victim sets' sends acknowledged in the second before a signal
    errors: Counter[str] = field(default_factory=Counter)


def analyse_rounds(answers: list[Answer], marks: list[RoundMark]) -> RoundView:
    """Per round and set: the longest time without a successful send from 0.5 s before the kill to the next
    round; and every SUCCESS answered by a deposed master after it was deposed (after SIGCONT / the kill)."""
    ok_times: dict[str, list[float]] = {}
    for a in answers:
        if a.code == 0:
            ok_times.setdefault(a.set, []).append(a.t_resp)
    for ts in ok_times.values():
        ts.sort()
    view = RoundView()
    for m in marks:
        hi = m.t_end if m.t_end is not None else m.t_kill + 30
        for s, ts in ok_times.items():
            gap = longest_gap(ts, m.t_kill - 0.5, min(hi, m.t_kill + 30))
            (view.gaps_victim_ms if s in m.victim_sets else view.gaps_other_ms).append(gap)
        since = m.t_resume if m.t_resume is not None else m.t_kill
        view.acked_last_second_before_kill += sum(1 for a in answers if a.code == 0 and a.set in m.victim_sets
                                                  and m.t_kill - 1 <= a.t_resp <= m.t_kill)  # fmt: skip
        deposed = {m.old_masters[s] for s in m.victim_sets}
        for a in answers:
            if a.code == 0 and a.addr in deposed and since < a.t_resp < hi:
                view.acked_after_deposed.append({"kind": m.kind, "addr": a.addr, "set": a.set, "qid": a.qid,
                                                 "qoff": a.qoff, "uniq": a.uniq, "sent_before_signal": a.t_send < m.t_kill,
                                                 "ms_after_resume": round((a.t_resp - since) * 1000, 1)})  # fmt: skip
    for a in answers:
        if a.code != 0:
            view.errors[str(a.code)] += 1
    return view


async def verify_acked(cli: RemotingClient, masters: dict[str, str], slaves: dict[str, list[str]], topic: str,
                       queues: int, acked: list[tuple[str, int, int, str]]) -> dict[str, Any]:
    """Read every queue back from each set's master; every acknowledged (set, queue, offset, key) must be there.
    Slaves' per-queue max offsets are compared with the master's too."""
    expect: dict[tuple[str, int], dict[int, str]] = {}
    conflicts = 0
    for s, qid, qoff, uniq in acked:
        prev = expect.setdefault((s, qid), {}).setdefault(qoff, uniq)
        conflicts += prev != uniq  # two acknowledged sends at one queue offset: two writable masters
    lost: list[dict[str, Any]] = []
    stored = 0
    slave_mismatch: list[dict[str, Any]] = []
    for s, addr in masters.items():
        for q in range(queues):
            got = await read_queue(cli, addr, topic, q)
            stored += len(got)
            for qoff, uniq in expect.get((s, q), {}).items():
                if got.get(qoff) != uniq:
                    lost.append({"set": s, "qid": q, "qoff": qoff, "uniq": uniq, "found": got.get(qoff)})
            m_max = await max_offset(cli, addr, topic, q)
            for sl in slaves.get(s, []):
                s_max = await max_offset(cli, sl, topic, q)
                if s_max != m_max:
                    slave_mismatch.append({"set": s, "qid": q, "master": m_max, "slave": sl, "slave_max": s_max})
    return {"lost_uniq": {x["uniq"] for x in lost}, "acked": sum(len(v) for v in expect.values()), "stored_on_masters": stored, "acked_but_lost": len(lost),
            "lost_examples": lost[:10], "conflicting_acks": conflicts, "slave_max_offset_mismatches": slave_mismatch}
