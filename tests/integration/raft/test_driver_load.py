"""RaftNode under load: many concurrent follower reads, and checkpoints of a multi-MB state machine
that must not stall the event loop (docs/RAFT-REQUESTS.md items 5 and 6)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from controller.raft.api import RaftConfig, RaftNode
from tests.integration.raft.conftest import RaftCluster, bind_port0, wait_until
from tests.sim.kv import KVStateMachine, encode_put

pytestmark = pytest.mark.timeout(120)

IMAGE_BYTES = 4 * 1024 * 1024
MAX_LOOP_GAP_S = 0.050


class BigImageKV(KVStateMachine):
    """A KV whose snapshot also carries a fixed multi-MB blob: a large image at almost no encoding cost,
    so what the test measures is the Raft checkpoint path, not the state machine's snapshot()."""

    blob = os.urandom(IMAGE_BYTES)

    def snapshot(self) -> bytes:
        out: bytes = msgpack.packb([super().snapshot(), self.blob])
        return out

    def restore(self, data: bytes) -> None:
        kv, _blob = msgpack.unpackb(data)
        super().restore(kv)


class LoopLag:
    """A ticker task that records the largest gap between its wake-ups (event-loop stall)."""

    def __init__(self, period_s: float = 0.002) -> None:
        self.period_s = period_s
        self.max_gap_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.period_s)  # sleep-ok: the ticker's period is what we measure against
            now = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, now - last - self.period_s)
            last = now

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_many_concurrent_follower_reads_on_both_followers_all_complete(
    cluster_factory: Callable[..., RaftCluster],
) -> None:
    c = cluster_factory(3, read_timeout_ms=5000)
    await c.start_all()
    leader = await c.wait_leader()
    followers = [n for n in c.nodes.values() if not n.is_leader]
    for round_no in range(5):
        await leader.propose(encode_put("x", round_no))
        # Each member numbers its reads from the same counter start, so these bursts used to collide.
        reads = [f.follower_read() for f in followers for _ in range(64)]
        reads += [leader.read_index() for _ in range(32)]
        results = await asyncio.gather(*reads, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, f"round {round_no}: {len(errors)} reads failed, first: {errors[0]!r}"
        for f in followers:
            assert c.sms[f.cfg.self_id].get("x")[0] == round_no


async def _single_node(tmp_path: Path, **overrides: Any) -> tuple[RaftNode, BigImageKV, Any]:
    sock = bind_port0()
    addr = f"127.0.0.1:{sock.getsockname()[1]}"
    cfg = RaftConfig(
        group="g1", self_id="n1", peers={"n1": addr}, data_dir=str(tmp_path / "n1"),
        election_timeout_ms=300, heartbeat_interval_ms=50, tick_ms=10, seed=7, **overrides,
    )
    sm = BigImageKV()
    node = RaftNode(cfg, sm, sock=sock)
    await node.start()
    await wait_until(lambda: node.is_leader and node.core.committed_in_term(), what="single node leads")
    return node, sm, sock


@pytest.mark.parametrize("fsync", [True, False])
async def test_checkpoint_of_a_multi_megabyte_image_does_not_stall_the_event_loop(
    tmp_path: Path, fsync: bool,
) -> None:
    node, sm, sock = await _single_node(tmp_path, snapshot_threshold_entries=20, snapshot_trailing_entries=5,
                                        fsync=fsync)
    try:
        with LoopLag() as lag:
            for round_no in range(3):
                for i in range(25):
                    await node.propose(encode_put(f"k{i}", round_no))
                await wait_until(lambda: node.snapshots_taken > round_no, what="a checkpoint")  # noqa: B023
        assert node.snapshots_taken >= 3
        assert lag.max_gap_s < MAX_LOOP_GAP_S, f"event loop stalled {lag.max_gap_s * 1000:.1f} ms"
    finally:
        await node.stop()
        sock.close()
    node2 = RaftNode(node.cfg, BigImageKV(), sock=bind_port0())
    await node2.start()
    try:
        await wait_until(lambda: node2.is_leader, what="restart")
        assert node2.sm.get("k24")[0] == 2, "the checkpointed state survives a restart"  # type: ignore[attr-defined]
    finally:
        await node2.stop()


class SlowSnapshotKV(BigImageKV):
    """A state machine whose snapshot() is ~0.1 s of Python-level work and may run off the loop."""

    snapshot_off_loop = True
    last_snapshot_s = 0.0

    def snapshot(self) -> bytes:
        t0 = time.monotonic()
        piece = self.blob[:32]
        parts = [msgpack.packb([i, piece]) for i in range(150_000)]
        out: bytes = msgpack.packb([KVStateMachine.snapshot(self), b"".join(parts)])
        self.last_snapshot_s = time.monotonic() - t0
        return out


async def test_a_state_machine_may_serialise_its_snapshot_off_the_loop(tmp_path: Path) -> None:
    sock = bind_port0()
    cfg = RaftConfig(
        group="g1", self_id="n1", peers={"n1": f"127.0.0.1:{sock.getsockname()[1]}"},
        data_dir=str(tmp_path / "n1"), election_timeout_ms=300, heartbeat_interval_ms=50, tick_ms=10, seed=7,
        snapshot_threshold_entries=20, snapshot_trailing_entries=5,
    )
    sm = SlowSnapshotKV()
    node = RaftNode(cfg, sm, sock=sock)
    await node.start()
    try:
        await wait_until(lambda: node.is_leader and node.core.committed_in_term(), what="single node leads")
        with LoopLag() as lag:
            for i in range(25):
                await node.propose(encode_put(f"k{i}", i))
            await wait_until(lambda: node.snapshots_taken >= 1, what="a checkpoint")
        assert sm.last_snapshot_s > MAX_LOOP_GAP_S, "the snapshot must be slow enough for the test to mean anything"
        assert lag.max_gap_s < MAX_LOOP_GAP_S, (
            f"event loop stalled {lag.max_gap_s * 1000:.1f} ms during a {sm.last_snapshot_s * 1000:.0f} ms snapshot"
        )
    finally:
        await node.stop()
        sock.close()
