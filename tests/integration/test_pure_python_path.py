"""With the C module switched off (BROKERD_NATIVE=0, as on a machine without a compiler) the broker still
works: the codec tests and the broker protocol tests pass on the pure-Python path, daemons included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_codec_and_broker_protocol_on_the_pure_python_path(tmp_path: Path) -> None:
    env = {**os.environ, "BROKERD_NATIVE": "0"}
    impl = subprocess.run([sys.executable, "-c", "import brokerd.native as n; print(n.IMPLEMENTATION)"], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    assert impl.stdout.strip() == "python"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
                          "tests/unit/remoting", "tests/integration/test_broker_protocol.py"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
