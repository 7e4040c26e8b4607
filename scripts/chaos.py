#!/usr/bin/env python3
"""Chaos and power-loss runs against real processes (docs/chaos.md).

    .venv/bin/python scripts/chaos.py --deployment single --faults kill,powerloss --cycles 6 --flush SYNC_FLUSH
    .venv/bin/python scripts/chaos.py --deployment controller --net netns --faults kill,pause,isolate --cycles 10
    .venv/bin/python scripts/chaos.py --deployment ha-2c --net netns --faults kill,pause,isolate,cut-peers,delay \
        --targets container,container,leader --cycles 12 --unavailability-targets kill=2,partition=5,pause=5,delay=5
    .venv/bin/python scripts/chaos.py --replay chaos-results/<run>/result.json
    .venv/bin/python scripts/chaos.py --cleanup        # namespaces/links left by a killed harness

Prints the run directory (result.json, report.md, timeline.png) and the verdict; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos.harness.deployments import DEPLOYMENTS  # noqa: E402
from tests.chaos.harness.nemesis import KINDS  # noqa: E402
from tests.chaos.harness.net import cleanup_stale  # noqa: E402
from tests.chaos.harness.runner import RunSpec, replay, run  # noqa: E402
from tests.chaos.harness.workload import WorkloadSpec  # noqa: E402


def _pair(text: str) -> tuple[float, float]:
    a, _, b = text.partition(",")
    return float(a), float(b or a)


def _targets(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        out[k.strip()] = float(v)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deployment", default="single", choices=list(DEPLOYMENTS))
    ap.add_argument("--net", default="auto", choices=["auto", "loopback", "netns", "proxy"])
    ap.add_argument("--flush", default=None, choices=["SYNC_FLUSH", "ASYNC_FLUSH"],
                    help="flushDiskType (default: ASYNC_FLUSH on HA deployments, as shipped; else SYNC_FLUSH)")
    ap.add_argument("--faults", default="kill", help=f"comma-separated kinds: {', '.join(KINDS)}")
    ap.add_argument("--targets", default=None, help="comma-separated: leader, container, controller, any, or names")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=0.0, help="workload seconds (default: fits the schedule)")
    ap.add_argument("--hold", type=_pair, default=(0.5, 1.5), help="fault hold time range, e.g. 0.5,2")
    ap.add_argument("--gap", type=_pair, default=(1.0, 2.0), help="time between faults, e.g. 1,3")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--pace-ms", type=float, default=0.0, help="each sender's pause between messages")
    ap.add_argument("--real-client", action="store_true", help="also run the real RocketMQ client as a producer")
    ap.add_argument("--tmpfs-mb", type=int, default=0, help="store on a tmpfs of this size (needed for diskfull)")
    ap.add_argument("--flush-interval-ms", type=int, default=200, help="flushIntervalCommitLog (ASYNC_FLUSH)")
    ap.add_argument("--unavailability-targets", type=_targets, default=None,
                    help="fail when a p99 per fault category (kill, pause, partition, delay) is above, "
                         "e.g. kill=2,partition=5,pause=5,delay=5")
    ap.add_argument("--controller-clients", type=int, default=None,
                    help="controller workload clients (default: 6 on the controller group, 2 alongside HA)")
    ap.add_argument("--tiered", action="store_true",
                    help="HA deployments: tiered storage on (a POSIX tier under --out, 64 KiB segments and chunks); "
                         "the run then also checks the tier against every replica's log")
    ap.add_argument("--out", default="chaos-results")
    ap.add_argument("--drop-deploy", action="store_true", help="remove deploy/ (configs, logs, data) of a passed run")
    ap.add_argument("--replay", default=None, help="a result.json: run its spec and schedule again")
    ap.add_argument("--cleanup", action="store_true")
    return ap.parse_args(argv)


def tiered_extra(out: Path) -> dict[str, object]:
    return {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix",
            "tieredStoreFilePath": str(out.resolve() / f"tier-{time.strftime('%Y%m%d-%H%M%S')}"),
            "mappedFileSizeCommitLog": 65536, "tieredChunkSize": 65536, "tieredUploadInterval": 100}


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.cleanup:
        print(json.dumps({"removed": cleanup_stale()}))
        return 0
    out = Path(a.out)
    if a.replay:
        result = replay(Path(a.replay), out, keep_deploy=not a.drop_deploy)
    else:
        kinds = [k for k in a.faults.split(",") if k]
        default_targets = ["leader"] if a.deployment == "controller" else ["container"]
        flush = a.flush or ("ASYNC_FLUSH" if a.deployment.startswith("ha-") else "SYNC_FLUSH")
        spec = RunSpec(deployment=a.deployment, net=a.net, flush=flush, seed=a.seed, kinds=kinds, cycles=a.cycles,
                       targets=a.targets.split(",") if a.targets else default_targets, hold_s=a.hold, gap_s=a.gap,
                       workload=WorkloadSpec(producers=a.producers, queues=a.queues, real_client=a.real_client,
                                             controller_clients=a.controller_clients, pace_s=a.pace_ms / 1000),
                       tmpfs_mb=a.tmpfs_mb, broker_extra={"flushIntervalCommitLog": a.flush_interval_ms,
                                                          **(tiered_extra(out) if a.tiered else {})},
                       targets_s=a.unavailability_targets)
        last = max((f.at + f.duration for f in spec.faults()), default=0.0)
        spec.duration_s = a.duration or last + 3.0
        result = run(spec, out, keep_deploy=not a.drop_deploy)
    print(json.dumps({"dir": result["dir"], "ok": result["ok"], "summary": result["summary"],
                      "failed": [n for n, c in result["checks"].items() if not c["ok"]]}))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
