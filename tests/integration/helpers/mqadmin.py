"""Running the `mqadmin` console script as an operator does, for the tests/integration/test_mqadmin_*.py modules."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Any

from tests.support import VENV_BIN, wait_for

MQADMIN = str(VENV_BIN / "mqadmin")


class MQAdmin:
    """`mqadmin` against one deployment: its name servers in NAMESRV_ADDR (as RocketMQ's tool reads them)."""

    def __init__(self, namesrv: str, cwd: str | None = None, **env: str) -> None:
        """``cwd``: where the commands run (consumerStatus writes its per-client files there, as RocketMQ's does);
        a fresh temporary directory by default, never the checkout."""
        self.env = {**os.environ, "NAMESRV_ADDR": namesrv, **env}
        self.cwd = cwd or tempfile.mkdtemp(prefix="mqadmin-cwd-")

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([MQADMIN, *args], capture_output=True, text=True, timeout=timeout, env=self.env,
                              cwd=self.cwd)

    def ok(self, *args: str, timeout: float = 60) -> str:
        """stdout of a command that must succeed."""
        r = self(*args, timeout=timeout)
        assert r.returncode == 0, f"mqadmin {' '.join(args)} failed: {r.stderr}{r.stdout[-2000:]}"
        return r.stdout

    def fails(self, *args: str, needle: str) -> str:
        """stderr of a command that must fail with one line containing `needle`."""
        r = self(*args)
        assert r.returncode == 1, f"mqadmin {' '.join(args)} answered {r.returncode}: {r.stdout}{r.stderr}"
        assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
        return r.stderr

    def until(self, args: tuple[str, ...], pattern: str, timeout: float, what: str) -> re.Match[str]:
        """Run a command until its output matches `pattern` (a condition with a deadline)."""
        def matched() -> Any:
            r = self(*args)
            return re.search(pattern, r.stdout, re.M) if r.returncode == 0 else None
        found: re.Match[str] = wait_for(matched, timeout, what, interval=0.5)
        return found


def diff_total(progress: str) -> int:
    """consumerProgress's `Consume Diff Total: N`."""
    m = re.search(r"^Consume Diff Total: (\d+)$", progress, re.M)
    assert m, progress
    return int(m.group(1))
