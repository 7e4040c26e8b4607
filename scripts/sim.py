#!/usr/bin/env python3
"""Replay one deterministic Raft simulation: python scripts/sim.py --seed N --nodes 3 --steps K.

Prints the run's statistics, or the failure (with the same message the tests print) and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sim.cluster import SimFailure, SimParams, Simulation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--nodes", type=int, default=3, choices=[1, 3, 5, 7])
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--show-params", action="store_true", help="print the seed-derived fault parameters")
    ap.add_argument("--trace", action="store_true", help="print faults, crashes and leadership changes")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    params = SimParams.from_seed(args.seed, args.nodes, args.steps)
    if args.show_params:
        print(params)
    try:
        trace = print if args.trace else None
        result = Simulation(args.seed, args.nodes, args.steps, params, trace=trace).run()
    except SimFailure as e:
        print(str(e), file=sys.stderr)
        return 1
    print(json.dumps(result.__dict__, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
