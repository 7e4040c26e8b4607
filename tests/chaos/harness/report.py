"""Per-run report: ``report.md`` (one page: verdict, setup, schedule, every checker) and ``timeline.png``
(acknowledged sends per 100 ms per broker set, or completed controller operations per 100 ms, with the fault
windows shaded). The JSON result is written by the runner."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

BIN_S = 0.1


def series(points: list[float], end: float) -> tuple[list[float], list[int]]:
    """Counts of ``points`` per 100 ms bin from 0 to ``end``."""
    c = Counter(int(p / BIN_S) for p in points if p is not None and p >= 0)
    n = int(end / BIN_S) + 1
    return [i * BIN_S for i in range(n)], [c.get(i, 0) for i in range(n)]


def timeline_series(hist: dict[str, Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for s in hist.get("sends", []):
        if s["ok"] and s["ret"] is not None:
            out.setdefault(f"acked sends {s['bset']}", []).append(s["ret"])
    for op in hist.get("controller_ops", []):
        if op["ret"] is not None:
            out.setdefault(f"controller {op['kind']}", []).append(op["ret"])
    return out


COLORS = {"kill": "red", "powerloss": "black", "pause": "orange", "isolate": "purple", "split": "purple",
          "oneway": "magenta", "slow": "green", "delay": "olive", "loss": "green", "cut-ctl": "blue", "cut-peers": "teal",
          "diskfull": "brown"}


def panels(hist: dict[str, Any]) -> list[dict[str, list[float]]]:
    """The broker sets' acknowledged sends on one panel; the real client's and the controller workload's (other
    scales) on a second one when there are both."""
    sets = {b for _, b in hist.get("brokers", {}).values()}
    main: dict[str, list[float]] = {}
    other: dict[str, list[float]] = {}
    for label, pts in timeline_series(hist).items():
        (main if not sets or label.removeprefix("acked sends ") in sets else other)[label] = pts
    return [p for p in (main, other) if p]


def plot(result: dict[str, Any], hist: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    end = max(hist.get("end", 0.0), 0.1)
    groups = panels(hist) or [{}]
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 3.6 if len(groups) == 1 else 5.6), dpi=100, sharex=True,
                             squeeze=False)
    for k, (ax, group) in enumerate(zip(axes[:, 0], groups, strict=True)):
        for label, pts in sorted(group.items()):
            xs, ys = series(pts, end)
            ax.step(xs, ys, where="post", label=label, linewidth=0.9)
        if k == 0:
            ax.set_ylim(0, max(ax.get_ylim()[1], 1) * 1.5)  # room for the fault labels above the data
        for f in hist.get("faults", []):
            stop = f["end"] if f["end"] is not None else end
            ax.axvspan(f["start"], stop, color=COLORS.get(f["kind"], "grey"), alpha=0.18)
            if k == 0:
                ax.text(f["start"], ax.get_ylim()[1] * 0.95, f"{f['kind']} {f['target']}", fontsize=7, rotation=90,
                        va="top", ha="right")
        ax.set_ylabel("per 100 ms")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=7)
    axes[-1, 0].set_xlabel("seconds since start")
    axes[0, 0].set_title(f"{result['spec']['deployment']} seed {result['spec']['seed']}: "
                         f"{'PASS' if result['ok'] else 'FAIL'}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _check_line(name: str, c: dict[str, Any]) -> str:
    keys = {k: v for k, v in c.items() if k not in ("ok", "examples", "describe", "per_broker_set", "lost_examples",
                                                  "allowed_examples", "windows")}
    detail = ", ".join(f"{k}={v}" for k, v in keys.items())
    return f"| {name} | {'ok' if c['ok'] else '**FAIL**'} | {detail} |"


def markdown(result: dict[str, Any], hist: dict[str, Any], png: str | None) -> str:
    spec, checks = result["spec"], result["checks"]
    lines = [f"# Chaos run: {spec['deployment']} ({spec['flush']}, net {spec['net']}), seed {spec['seed']}",
             "", f"**Verdict: {'PASS' if result['ok'] else 'FAIL'}**", "",
             *([f"**The run was aborted** (checks ran on what was recorded):\n\n```\n{result['error']}```", ""]
               if result.get("error") else []),
             f"Replay: `scripts/chaos.py --replay {result.get('dir', '.')}/result.json`", "",
             "## Workload", "", ", ".join(f"{k}={v}" for k, v in result["summary"].items()), "",
             "## Fault schedule", "", "| at (s) | kind | target | hold (s) |", "|---|---|---|---|"]
    lines += [f"| {f['at']} | {f['kind']} | {f['target']} | {f['duration']} |" for f in spec["schedule"]]
    lines += ["", "Executed:", ""]
    lines += [f"* {f['start']:.2f}–{(f['end'] or 0):.2f} s: {f['kind']} **{f['target']}** ({f['detail']})"
              for f in hist["faults"]]
    lines += [f"* skipped {s['kind']} {s['target']}: {s['reason']}" for s in result.get("skipped_faults", [])]
    lines += ["", "## Checks", "", "| check | result | details |", "|---|---|---|"]
    lines += [_check_line(n, c) for n, c in checks.items()]
    unav = checks.get("unavailability", {}).get("per_broker_set", {})
    if unav:
        lines += ["", "## Unavailability (gaps > 1 s without an acknowledged send)", ""]
        for bset, u in unav.items():
            lines.append(f"* {bset}: longest {u['longest_s']} s, p99 {u['p99_s']} s, {len(u['windows'])} windows")
            lines += [f"  * {w['start']}–{w['end']} s ({w['s']} s) during {', '.join(w['faults']) or 'no fault'}"
                      for w in u["windows"][:8]]
    lines += _by_fault(checks.get("unavailability_by_fault", {}))
    lines += _delays(checks.get("delay_windows", {}))
    if result.get("power_loss_restores"):
        lines += ["", "## Power losses", ""]
    for r in result.get("power_loss_restores", [])[:10]:
        lines.append(f"* power loss {r['node']} at {r['t']} s: {r['bytes_zeroed']} bytes dropped "
                     f"({r['bytes_zeroed_by_dir']}), {r['entries_dropped_count']} entries dropped, "
                     f"{r['renames_undone_count']} renames undone, {r['never_synced_zeroed_count']} never-synced")
    failures = [(n, c) for n, c in checks.items() if not c["ok"]]
    for n, c in failures:
        lines += ["", f"### {n}: examples", "", "```", *(str(x) for x in c.get("examples", c.get("lost_examples", []))),
                  c.get("describe", ""), "```"]
    if png:
        lines += ["", f"![timeline]({png})"]
    return "\n".join(lines) + "\n"


def _by_fault(c: dict[str, Any]) -> list[str]:
    """The unavailability each fault caused, per broker set and fault category (``ha_checks``)."""
    per = c.get("per_broker_set") or {}
    if not per:
        return []
    lines = ["", "## Unavailability per fault (longest stretch without an acknowledged send, fault to ready)", "",
             f"Targets (p99): {c.get('targets_s') or 'none'}", "",
             "| broker set | category | faults | p50 (s) | p99 (s) | max (s) |", "|---|---|---|---|---|---|"]
    for bset, cats in per.items():
        lines += [f"| {bset} | {cat} | {st['faults']} | {st['p50_s']} | {st['p99_s']} | {st['max_s']} |"
                  for cat, st in cats.items()]
    return lines


def _delays(c: dict[str, Any]) -> list[str]:
    """Each delay fault: when it was in force and, per broker set, the sends acknowledged meanwhile, their
    latency and the longest stretch without an acknowledgement (``ha_checks.delay_windows``)."""
    if not c.get("windows"):
        return []
    lines = ["", "## Delay windows (sends sent and acknowledged while the delay was in force)", "",
             f"Send latency with no fault in force, p50: {c.get('baseline_p50_ms')} ms", "",
             "| fault | in force (s) | broker set | acknowledged | latency p50 / p99 (ms) | longest gap (s) |",
             "|---|---|---|---|---|---|"]
    for w in c["windows"]:
        for bset, st in w["sets"].items():
            lines.append(f"| {w['kind']} {w['target']} | {w['applied']}–{w['healing']} | {bset} | {st['acked']} | "
                         f"{st['p50_ms']} / {st['p99_ms']} | {st['longest_gap_s']} |")
    return lines


def write(result: dict[str, Any], hist: dict[str, Any], out: Path) -> None:
    png = "timeline.png" if plot(result, hist, out / "timeline.png") else None
    (out / "report.md").write_text(markdown(result, hist, png))
