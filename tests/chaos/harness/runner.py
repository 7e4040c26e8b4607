"""One chaos run: deployment up, workload running, the fault schedule executed, everything healed, the final
read-back, the checkers, the report. ``RunSpec`` (with its schedule) is stored in the result, so
``replay(result)`` runs the same schedule again. A run directory holds ``result.json`` (spec, checks, summary),
``history.json.gz`` (everything recorded: ``History.from_json`` reads it back), ``report.md``, ``timeline.png``
and ``deploy/`` (configs, logs, data)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import gzip
import json
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import realclient, report, tier_check
from .checkers import CheckSettings, check_all
from .controller_workload import ControllerWorkload, SyncStateSetModel
from .deployments import ControllerGroup, Deployment, make_deployment
from .ha import HA_BROKER_DEFAULTS
from .history import History
from .nemesis import Fault, Nemesis, generate
from .net import make_network
from .probe import WindowProbe
from .workload import RC_TOPIC, TOPIC, BrokerWorkload, WorkloadSpec, summarize


@dataclass
class RunSpec:
    deployment: str = "single"  # single | controller
    net: str = "loopback"  # loopback | netns | proxy | auto
    flush: str = "SYNC_FLUSH"
    seed: int = 1
    duration_s: float = 10.0  # workload time; the schedule must fit in it
    kinds: list[str] = field(default_factory=lambda: ["kill"])
    cycles: int = 2
    targets: list[str] = field(default_factory=lambda: ["container"])
    hold_s: tuple[float, float] = (0.5, 1.5)
    gap_s: tuple[float, float] = (1.0, 2.0)
    schedule: list[Fault] | None = None  # None: generated from seed/kinds/cycles/targets
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    tmpfs_mb: int = 0
    broker_extra: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    targets_s: dict[str, float] | None = None  # p99 unavailability targets per fault category (kill, partition, ...)

    def faults(self) -> list[Fault]:
        if self.schedule is None:
            self.schedule = generate(self.seed, self.kinds, self.cycles, hold=self.hold_s, gap=self.gap_s,
                                     targets=self.targets)
        return self.schedule

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["schedule"] = [f.to_json() for f in self.faults()]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunSpec:
        d = dict(d)
        d["workload"] = WorkloadSpec(**d.get("workload", {}))
        d["schedule"] = [Fault(**f) for f in d["schedule"]] if d.get("schedule") is not None else None
        d["hold_s"], d["gap_s"] = tuple(d.get("hold_s", (0.5, 1.5))), tuple(d.get("gap_s", (1.0, 2.0)))
        return cls(**d)


def check_settings(spec: RunSpec) -> CheckSettings:
    interval = float(spec.broker_extra.get("flushIntervalCommitLog", 200)) / 1000
    ha = spec.deployment.startswith("ha-")
    extra = {**(HA_BROKER_DEFAULTS if ha else {}), **spec.broker_extra}
    incremental = str(extra.get("allowMetadataIncrementalSync", "false")).lower() == "true"
    if incremental:  # offsets: one record per changed queue every metadataOffsetFlushInterval
        metasync = float(extra.get("metadataOffsetFlushInterval", 100)) / 1000
    else:  # the 4.x full pull
        metasync = float(extra.get("slaveSyncMetadataInterval", 3000)) / 1000
    return CheckSettings(flush=spec.flush, flush_interval_s=interval, replicated=ha, metasync_s=metasync,
                         incremental_metadata=incremental, targets_s=spec.targets_s)


def controller_clients(spec: RunSpec) -> int:
    """The controller workload's clients: the controller deployment's, and (fewer) alongside the HA brokers."""
    if spec.workload.controller_clients is not None:
        return spec.workload.controller_clients
    return {"controller": 6}.get(spec.deployment, 2 if spec.deployment.startswith("ha-") else 0)


def run(spec: RunSpec, out_root: Path, log: Any = print, *, keep_deploy: bool = True) -> dict[str, Any]:
    """Run ``spec``; write result.json, report.md and timeline.png under a new directory of ``out_root``.
    ``keep_deploy=False``: remove ``deploy/`` (configs, logs, data) when the run passed."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = out_root.resolve() / f"{spec.label or spec.deployment}-seed{spec.seed}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(_run(spec, out, log))
    result["dir"] = str(out)
    hist = result.pop("history")
    with gzip.open(out / "history.json.gz", "wt") as f:
        json.dump(hist, f)
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str))
    report.write(result, hist, out)
    if result["ok"] and not keep_deploy:
        shutil.rmtree(out / "deploy", ignore_errors=True)
    result["history"] = hist
    return result


async def _run(spec: RunSpec, out: Path, log: Any) -> dict[str, Any]:
    schedule = spec.faults()
    powerloss = any(f.kind == "powerloss" for f in schedule)
    net = make_network(spec.net, spec.seed)
    h = History()
    nem: Nemesis | None = None
    dep_stores: dict[str, list[Path]] = {}
    wall = time.time()
    error = None
    try:
        dep = make_deployment(spec.deployment, out / "deploy", net, flush=spec.flush, powerloss=powerloss,
                              tmpfs_mb=spec.tmpfs_mb, broker_extra=spec.broker_extra)
        h.brokers = dep.topology()
        dep_stores = stores_of(dep)
        h.controllers = [n for n, node in dep.nodes.items() if node.kind == "controller"]
        try:
            dep.start()
            await dep.wait_ready()
            t0 = time.monotonic()
            nem = Nemesis(dep, h, t0, spec.seed, log)
            await _drive(spec, dep, h, t0, nem, out, log)
        except Exception:  # noqa: BLE001 - a deployment that does not come back is a result, not a crash
            error = traceback.format_exc()
            log(f"[run] aborted: {error}")
        finally:
            await dep.aclose()
            dep.stop()
    finally:
        net.teardown()
    settings = check_settings(spec)
    model = SyncStateSetModel() if controller_clients(spec) else None
    checks = check_all(h, settings, model=model)
    if tier_check.tiered(spec.broker_extra) and dep_stores:
        tc = tier_check.tier_consistent(dep_stores, spec.broker_extra, "ChaosCluster")
        checks["checks"]["tier_consistent"] = tc
        checks["ok"] = checks["ok"] and tc["ok"]
    return {"spec": spec.to_json(), "started": wall, "ok": checks["ok"] and error is None, "error": error,
            "summary": summarize(h),
            "checks": checks["checks"], "skipped_faults": nem.skipped if nem else [],
            "retried_windows": nem.retried if nem else [],
            "power_loss_restores": nem.restores if nem else [], "history": h.to_json()}


def stores_of(dep: Deployment) -> dict[str, list[Path]]:
    """Per broker set, the store directories of its replicas (HA deployments)."""
    out: dict[str, list[Path]] = {}
    for s in getattr(dep, "spots", []):
        out.setdefault(s.bset, []).append(dep.root / s.node / "store" / s.bset)  # type: ignore[attr-defined]
    return out


async def _drive(spec: RunSpec, dep: Deployment, h: History, t0: float, nem: Nemesis, out: Path, log: Any) -> None:
    bw = BrokerWorkload(dep, h, t0, spec.workload, spec.seed) if dep.broker_sets() else None
    group = dep if isinstance(dep, ControllerGroup) else getattr(dep, "ctl", None)
    n = controller_clients(spec)
    pace = 0.0 if isinstance(dep, ControllerGroup) else 0.05
    cw = ControllerWorkload(group, h.controller_ops, t0, spec.seed, clients=n, pace_s=pace) if group and n else None
    rc = None
    if cw is not None:
        await cw.start()
    if bw is not None:
        await bw.setup()
        bw.start()
        nem.probe = WindowProbe(bw, h)  # fault windows whose checks need traffic get probe sends
        if spec.workload.real_client and realclient.available():
            bsets = list(dep.broker_sets())
            rc = realclient.RealProducer(dep.namesrv_addr() or "", bsets[0] if len(bsets) == 1 else "rc",
                                         out / "deploy" / "real-client", t0)
    try:
        await nem.run(spec.faults())
        rest = spec.duration_s - (time.monotonic() - t0)
        if rest > 0:
            await asyncio.sleep(rest)  # sleep-ok: the workload runs for the configured time
    finally:
        await nem.heal_all()
        if rc is not None:
            rc.stop(h)
        for w in (bw, cw):
            if w is not None:
                await w.finish()
    if bw is not None:
        await bw.final_reads([TOPIC] + ([RC_TOPIC] if rc is not None else []))
    h.end = time.monotonic() - t0
    log(f"[run] done at {h.end:.1f}s: {summarize(h)}")


def replay(result_path: Path, out_root: Path, log: Any = print, *, keep_deploy: bool = True) -> dict[str, Any]:
    doc = json.loads(Path(result_path).read_text())
    return run(RunSpec.from_json(doc["spec"]), out_root, log, keep_deploy=keep_deploy)
