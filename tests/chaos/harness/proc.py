"""One daemon process of a deployment, as the nemesis sees it: start, SIGKILL, SIGSTOP/SIGCONT, stop, and the
power loss (SIGKILL, then its files rebuilt from its durability journal)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .powerloss import RestoreReport, restore


@dataclass
class ProcNode:
    """A daemon: ``argv`` run with ``prefix`` (e.g. ``ip netns exec <ns>``), its own session, output to ``log``.

    ``data_roots`` are the directories a power loss rewrites; ``journal`` is where its durability journal goes
    (``BROKERD_POWERLOSS_JOURNAL``, set only when ``powerloss`` is on, so other runs pay nothing)."""

    name: str
    kind: str  # "container" | "controller"
    argv: list[str]
    log: Path
    data_roots: list[Path]
    journal: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    prefix: list[str] = field(default_factory=list)
    bsets: list[str] = field(default_factory=list)  # broker sets whose brokers live in this process
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    expected_down: bool = False  # stopped by the harness (kill, power loss, stop), not on its own
    starts: int = 0
    on_start: list[Callable[[ProcNode], None]] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive():
            raise RuntimeError(f"{self.name} is already running")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if self.journal is not None:
            env["BROKERD_POWERLOSS_JOURNAL"] = str(self.journal)
        with open(self.log, "ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.prefix + self.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.paused = False
        self.expected_down = False
        self.starts += 1
        for hook in self.on_start:
            hook(self)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap (a stopped process dies too)."""
        self.expected_down = True
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def power_loss(self) -> RestoreReport:
        """SIGKILL, then drop everything the process wrote but did not make durable."""
        if self.journal is None:
            raise RuntimeError(f"{self.name}: started without a durability journal (powerloss off)")
        self.kill()
        return restore(self.data_roots, [self.journal])

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (after SIGCONT if paused) and wait; SIGKILL when it does not exit in time."""
        self.expected_down = True
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def exited_on_its_own(self) -> int | None:
        """The exit code of a process that ended without the harness stopping it, else None."""
        if self.proc is None or self.expected_down:
            return None
        return self.proc.poll()

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""
