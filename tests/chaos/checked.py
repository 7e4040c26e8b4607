"""One chaos run for a test: the run lasts until `tail_s` after its last fault heals, every check must pass and no
planned fault may have been skipped (the report's path is printed, and named in a failure). A fault window run
again because it saw no traffic for its checks (``nemesis.WINDOW_TRIES``) is printed; one that never got it is a
skipped fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chaos.harness.runner import RunSpec, run


def run_checked(tmp_path: Path, spec: RunSpec, *, tail_s: float, keep_deploy: bool = False) -> dict[str, Any]:
    spec.duration_s = max(f.at + f.duration for f in spec.faults()) + tail_s
    result = run(spec, tmp_path, keep_deploy=keep_deploy)
    assert result["error"] is None, result["error"]
    checks = result["checks"]
    print(f"\n{result['dir']}\n" + "\n".join(f"  {n}: {c}" for n, c in checks.items() if n != "unavailability"))
    if result.get("retried_windows"):
        print(f"  windows run again (no traffic for their checks): {result['retried_windows']}")
    failed = {n: c for n, c in checks.items() if not c["ok"]}
    assert not failed, f"checks failed: {failed} (report: {result['dir']}/report.md)"
    assert not result["skipped_faults"], result["skipped_faults"]
    return result
