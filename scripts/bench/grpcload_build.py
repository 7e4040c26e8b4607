"""The compiled gRPC load client (scripts/bench/grpcload, Go): built once per source version under build/go/, and
run in step with a caller that samples a server's CPU around exactly the measured run."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "scripts" / "bench" / "grpcload"


def grpcload_binary() -> str:
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(SRC.iterdir()) if p.is_file())).hexdigest()[:12]
    out = ROOT / "build" / "go" / f"grpcload-{digest}"
    if not out.exists():
        go = shutil.which("go") or "/usr/local/go/bin/go"
        r = subprocess.run([go, "build", "-o", str(out), "."], cwd=SRC, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"go build of scripts/bench/grpcload failed:\n{r.stderr[-3000:]}")
    return str(out)


def run_synced(binary: str, args: list[str], server_cpu: Callable[[], float], timeout: float = 1200) -> dict[str, Any]:
    """Run the load client with -sync: once it is connected, ``server_cpu()`` is sampled, the run released and
    sampled again when the client reports; the result gains ``server_cpu_s``."""
    p = subprocess.Popen([binary, "-sync", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdin is not None and p.stdout is not None
    try:
        line = p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"grpcload did not start: {line} {p.stderr.read() if p.stderr else ''}")
        c0 = server_cpu()
        p.stdin.write("go\n")
        p.stdin.flush()
        out = p.stdout.readline()
        c1 = server_cpu()
        p.wait(timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if not out.strip():
        raise RuntimeError(f"grpcload failed: {p.stderr.read() if p.stderr else ''}")
    res: dict[str, Any] = json.loads(out)
    res["server_cpu_s"] = c1 - c0
    return res
