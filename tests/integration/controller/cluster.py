"""Three real `mqcontroller` processes on free loopback ports with their own temp dirs."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError
from tests.support import free_port

REPO = pathlib.Path(__file__).resolve().parents[3]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int, offset: int) -> list[int]:
    """n free ports p such that p + offset is free too (the Raft port)."""
    out: list[int] = []
    while len(out) < n:
        p = free_port()  # outside the ephemeral range: nothing the kernel picks can take it before the daemon binds
        if p + offset < 65536 and p not in out and _port_free(p + offset):
            out.append(p)
    return out


@dataclass
class ControllerProcs:
    root: pathlib.Path
    n: int = 3
    extra: dict[str, str] = field(default_factory=dict)
    raft_offset: int = 1000
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ports = free_ports(self.n, self.raft_offset)
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(self.ports))
        for i in range(self.n):
            props = {
                "controllerDLegerGroup": "itg", "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
                "controllerStorePath": str(self.root / "store"), "controllerListenHost": "127.0.0.1",
                "raftPortOffset": str(self.raft_offset), "raftElectionTimeoutMs": "500",
                "raftHeartbeatIntervalMs": "100",
            }
            props.update(self.extra)
            (self.root / f"n{i}.conf").write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @property
    def addrs(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def log_path(self, i: int) -> pathlib.Path:
        return self.root / f"n{i}.log"

    def start(self, i: int) -> None:
        assert i not in self.procs or self.procs[i].poll() is not None
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        with open(self.log_path(i), "ab") as log:
            self.procs[i] = subprocess.Popen(
                [sys.executable, "-m", "controller.main", "-c", str(self.root / f"n{i}.conf")],
                cwd=str(REPO), env=env, stdout=log, stderr=subprocess.STDOUT)

    def start_all(self) -> None:
        for i in range(self.n):
            self.start(i)

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs[i]
        p.send_signal(sig)
        p.wait(10)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def alive(self, i: int) -> bool:
        return i in self.procs and self.procs[i].poll() is None

    def tail(self, i: int, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path(i).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    async def leader(self, client: ControllerClient, timeout: float = 15.0, exclude: int | None = None) -> int:
        """Index of the member that says it is leader (polling every member until the deadline)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for i, addr in enumerate(self.addrs):
                if i == exclude or not self.alive(i):
                    continue
                try:
                    meta = await client.metadata(addr)
                except (ConnectionClosed, RemotingTimeout, ControllerError, OSError):
                    continue
                if meta.get("isLeader") == "true":
                    return i
            await asyncio.sleep(0.01)  # sleep-ok: polling other processes until one becomes leader
        logs = "\n".join(f"--- n{i} ---\n{self.tail(i)}" for i in range(self.n))
        raise AssertionError(f"no controller leader within {timeout}s\n{logs}")
