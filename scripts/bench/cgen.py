"""The compiled benchmark clients: build them when missing or older than their source, and run them as
subprocesses returning their one-line JSON reports.

* ``build/mqgen`` (scripts/bench/gen.c): the load generator. It sends the frames ``shapes.write_templates``
  writes for a send shape (any of ``shapes.SHAPES`` or a captured client's), patching per send only the opaque,
  the UNIQ_KEY tails and the body's due time, so it spends next to nothing per message; closed loop, flood or
  open loop.
* ``build/mqconsume`` (scripts/bench/consume.c): a pull consumer (long polling, one pull in flight per queue) for
  consume throughput and end-to-end latency.
* ``build/mqpop`` (scripts/bench/pop.c): a POP consumer (queueId -1, pops in flight per connection, each answer
  acknowledged at once by one BATCH_ACK or one ACK per message).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import tempfile

from scripts.bench import shapes

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "bench"
BINARIES = {"mqgen": BENCH / "gen.c", "mqconsume": BENCH / "consume.c", "mqpop": BENCH / "pop.c"}


def build(name: str = "mqgen") -> pathlib.Path | None:
    """``name``'s path, compiled with gcc -O2 if needed; None when there is no C compiler."""
    source, binary = BINARIES[name], ROOT / "build" / name
    newest = max(source.stat().st_mtime, (BENCH / "mqgen.h").stat().st_mtime)
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    subprocess.run([cc, "-O2", "-Wall", "-o", str(tmp), str(source)], check=True, capture_output=True, text=True)
    tmp.replace(binary)
    return binary


def _exe(name: str) -> str:
    exe = build(name)
    if exe is None:
        raise RuntimeError(f"no C compiler (gcc or cc) to build {BINARIES[name]}")
    return str(exe)


def command(addr: str, frames: pathlib.Path, *, conns: int, inflight: int = 0, total: int = 0, rate: float = 0.0,
            seconds: float = 0.0, start: float = 0.0, tick_us: float = 0.0,
            lat_out: pathlib.Path | None = None) -> list[str]:
    """The generator's command line: closed loop (inflight, total), flood (inflight, seconds) or open loop (rate,
    seconds[, start])."""
    cmd = [_exe("mqgen"), "--addr", addr, "--frames", str(frames), "--conns", str(conns)]
    if rate > 0:
        cmd += ["--rate", str(rate), "--seconds", str(seconds)] + (["--start", repr(start)] if start else [])
        cmd += ["--tick-us", str(tick_us)] if tick_us else []
    elif total:
        cmd += ["--inflight", str(inflight), "--total", str(total)]
    else:
        cmd += ["--inflight", str(inflight), "--seconds", str(seconds)]
    if lat_out is not None:
        cmd += ["--lat-out", str(lat_out)]
    return cmd


def report(stdout: str) -> dict[str, object]:
    """A client's JSON report (its last output line)."""
    out: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return out


def _run(cmd: list[str], timeout: float) -> dict[str, object]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not proc.stdout.strip():
        raise RuntimeError(f"{pathlib.Path(cmd[0]).name} failed ({proc.returncode}): {proc.stderr.strip()}")
    out = report(proc.stdout)
    if proc.stderr.strip():
        out["stderr"] = proc.stderr.strip()[-2000:]
    return out


def run(addr: str, topic: str, timeout: float = 900, *, shape: str = "json_uniq", queues: int = 8,
        body: int = 1024, **kw: object) -> dict[str, object]:
    """Run the generator to completion with ``shape``'s frames (see ``command`` for the keywords)."""
    with tempfile.TemporaryDirectory(prefix="mqgen-") as d:
        frames = pathlib.Path(d) / "frames"
        shapes.write_templates(frames, shape, topic, queues, body)
        return _run(command(addr, frames, **kw), timeout)  # type: ignore[arg-type]


def consume_command(addr: str, topic: str, start: list[int], *, end: list[int] | None = None, group: str = "bench_cg",
                    conns: int = 1, max_msgs: int = 32, sub: str = "*", expression_type: str = "TAG",
                    post_sub: bool = False, heartbeat: pathlib.Path | None = None, expect_file: pathlib.Path | None = None,
                    ts: bool = False, lat_out: pathlib.Path | None = None, commit: bool = False,
                    timeout: float = 600) -> list[str]:
    """The consumer's command line (see consume.c)."""
    cmd = [_exe("mqconsume"), "--addr", addr, "--topic", topic, "--group", group, "--start", ",".join(map(str, start)),
           "--conns", str(conns), "--max-msgs", str(max_msgs), "--sub", sub, "--type", expression_type,
           "--timeout", str(timeout)]  # fmt: skip
    for flag, value in (("--end", end and ",".join(map(str, end))), ("--heartbeat", heartbeat),
                        ("--expect-file", expect_file), ("--lat-out", lat_out)):
        if value:
            cmd += [flag, str(value)]
    return cmd + (["--post-sub"] if post_sub else []) + (["--ts"] if ts else []) + (["--commit"] if commit else [])


def consume(addr: str, topic: str, start: list[int], **kw: object) -> dict[str, object]:
    """Run the consumer to completion (see ``consume_command``)."""
    timeout = float(kw.get("timeout", 600))  # type: ignore[arg-type]
    return _run(consume_command(addr, topic, start, **kw), timeout + 60)  # type: ignore[arg-type]


def pop(addr: str, topic: str, total: int, *, group: str = "bench_pop", broker: str = "broker-a", conns: int = 1,
        inflight: int = 8, max_msgs: int = 32, ack: str = "batch", timeout: float = 600) -> dict[str, object]:
    """Run the POP consumer until ``total`` messages are acknowledged (see pop.c)."""
    cmd = [_exe("mqpop"), "--addr", addr, "--topic", topic, "--total", str(total), "--group", group, "--broker", broker,
           "--conns", str(conns), "--inflight", str(inflight), "--max-msgs", str(max_msgs), "--ack", ack,
           "--timeout", str(timeout)]  # fmt: skip
    return _run(cmd, timeout + 60)
