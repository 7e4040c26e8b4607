"""The compiled load generator (scripts/bench/gen.c → build/mqgen): build it when missing or older than its
source, and run it as a subprocess returning its one-line JSON report.

gen.c sends the frames loadgen.py's default ``json_uniq`` shape sends (SEND_MESSAGE_V2, JSON header, TAGS, WAIT
and a unique UNIQ_KEY), pre-built per queue, so the generator spends next to nothing per message."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "scripts" / "bench" / "gen.c"
BINARY = ROOT / "build" / "mqgen"


def build() -> pathlib.Path | None:
    """The generator's path, compiled with gcc -O2 if needed; None when there is no C compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    if cc is None:
        return None
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    tmp = BINARY.with_suffix(".tmp")
    subprocess.run([cc, "-O2", "-Wall", "-o", str(tmp), str(SOURCE)], check=True, capture_output=True, text=True)
    tmp.replace(BINARY)
    return BINARY


def command(addr: str, topic: str, *, conns: int, body: int = 1024, queues: int = 8, inflight: int = 0,
            total: int = 0, rate: float = 0.0, seconds: float = 0.0, start: float = 0.0,
            lat_out: pathlib.Path | None = None) -> list[str]:
    """The generator's command line: closed loop (inflight, total) or open loop (rate, seconds[, start])."""
    exe = build()
    if exe is None:
        raise RuntimeError("no C compiler (gcc or cc) to build scripts/bench/gen.c")
    cmd = [str(exe), "--addr", addr, "--topic", topic, "--conns", str(conns), "--body", str(body),
           "--queues", str(queues)]
    if rate > 0:
        cmd += ["--rate", str(rate), "--seconds", str(seconds)] + (["--start", repr(start)] if start else [])
    else:
        cmd += ["--inflight", str(inflight), "--total", str(total)]
    if lat_out is not None:
        cmd += ["--lat-out", str(lat_out)]
    return cmd


def report(stdout: str) -> dict[str, object]:
    """The generator's JSON report (its last output line)."""
    out: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return out


def run(addr: str, topic: str, timeout: float = 900, **kw: object) -> dict[str, object]:
    """Run the generator to completion (see ``command`` for the keywords) and return its report."""
    proc = subprocess.run(command(addr, topic, **kw), capture_output=True, text=True, timeout=timeout)  # type: ignore[arg-type]
    if not proc.stdout.strip():
        raise RuntimeError(f"mqgen failed ({proc.returncode}): {proc.stderr.strip()}")
    return report(proc.stdout)
