"""Fixtures for Raft driver integration tests: real sockets (port 0), real WAL/snapshot files."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest_asyncio

from controller.raft.api import RaftConfig, RaftNode
from tests.sim.kv import KVStateMachine


async def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll `cond` until true or fail after `timeout_s` (a deadline, not a sleep-as-synchronisation)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)  # sleep-ok: poll interval of a deadline-bounded wait


def bind_port0() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


def rebind(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    return s


class RaftCluster:
    """N RaftNodes in this event loop, each with a KV state machine and its own data dir."""

    def __init__(self, base: Path, n: int, **overrides: Any) -> None:
        self.socks = {f"n{i + 1}": bind_port0() for i in range(n)}
        self.ports = {nid: s.getsockname()[1] for nid, s in self.socks.items()}
        peers = {nid: f"127.0.0.1:{port}" for nid, port in self.ports.items()}
        self.client_addrs = {nid: f"127.0.0.1:{20000 + i}" for i, nid in enumerate(peers)}  # port-ok: advertised, never bound
        defaults: dict[str, Any] = dict(
            election_timeout_ms=300, heartbeat_interval_ms=50, tick_ms=10, fsync=True, seed=7,
        )
        defaults.update(overrides)
        self.cfgs = {
            nid: RaftConfig(group="g1", self_id=nid, peers=peers, data_dir=str(base / nid), **defaults)
            for nid in peers
        }
        self.sms: dict[str, KVStateMachine] = {}
        self.nodes: dict[str, RaftNode] = {}

    async def start(self, nid: str) -> RaftNode:
        sock = self.socks.pop(nid, None) or rebind(self.ports[nid])
        self.sms[nid] = KVStateMachine()
        node = RaftNode(self.cfgs[nid], self.sms[nid], client_addrs=self.client_addrs, sock=sock)
        await node.start()
        self.nodes[nid] = node
        return node

    async def start_all(self) -> None:
        for nid in list(self.cfgs):
            await self.start(nid)

    async def stop(self, nid: str) -> None:
        node = self.nodes.pop(nid)
        await node.stop()

    async def stop_all(self) -> None:
        for nid in list(self.nodes):
            await self.stop(nid)

    def reconfigure(self, **changes: Any) -> None:
        self.cfgs = {nid: replace(cfg, **changes) for nid, cfg in self.cfgs.items()}

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.nodes.values() if n.is_leader]
        return leaders[0] if len(leaders) == 1 else None

    async def wait_leader(self, timeout_s: float = 10.0, exclude: str | None = None) -> RaftNode:
        def ok() -> bool:
            lead = self.leader()
            return lead is not None and lead.cfg.self_id != exclude and lead.core.committed_in_term()

        await wait_until(ok, timeout_s, "a leader")
        lead = self.leader()
        assert lead is not None
        return lead


@pytest_asyncio.fixture
async def cluster_factory(tmp_path: Path) -> AsyncIterator[Callable[..., RaftCluster]]:
    made: list[RaftCluster] = []

    def make(n: int = 3, **overrides: Any) -> RaftCluster:
        c = RaftCluster(tmp_path, n, **overrides)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.stop_all()
        for s in c.socks.values():
            s.close()
