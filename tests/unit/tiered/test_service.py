"""The tiered service on real stores: a master uploads chunks of its confirmed log; a new master (higher epoch, a
replica of the same log) claims the tier and resumes at the breakpoint without re-uploading or skipping a byte;
the deposed master's next upload is refused by the manifest and it stops; an empty store bootstraps from the tier
and serves the whole range."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from brokerd.store.message_store import MessageStore
from brokerd.tiered.backend import PosixBackend
from brokerd.tiered.config import TierConfig
from brokerd.tiered.manifest import MANIFEST_PREFIX, Manifest
from brokerd.tiered.service import TieredService
from tests.unit.store.conftest import make_msg

SEG = 64 * 1024
CFG = TierConfig(segment_size=SEG, chunk_bytes=SEG, upload_interval_ms=10)
HOST = ("127.0.0.1", 10911)


async def until(cond: Any, what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def fill(store: MessageStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        assert store.append_message(make_msg("T", i % 4, b"x" * 900 + b"%06d" % i, keys=f"k{i}")).status.name == "PUT_OK"


def replicate(src: MessageStore, dst: MessageStore) -> None:
    """dst takes src's log bytes from its end (a slave catching up)."""
    while dst.max_phy_offset < src.max_phy_offset:
        view = src.read_range(dst.max_phy_offset, 1 << 20)
        data = bytes(view)
        view.release()
        dst.append_raw(dst.max_phy_offset, data)


def records(store: MessageStore, q: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        r = store.get_message("T", q, len(out), 32, 1 << 24)
        if not r.buffers:
            return out
        out += [bytes(x) for x in r.buffers]


def chain(backend: PosixBackend) -> list[Manifest]:
    return [Manifest.decode(backend.get(n)) for n in backend.list(MANIFEST_PREFIX)]


async def test_a_new_master_resumes_at_the_breakpoint_and_the_deposed_one_is_fenced(
        make_store: Any, tmp_path: pathlib.Path) -> None:  # fmt: skip
    backend = PosixBackend(tmp_path / "tier")
    a = await make_store(tmp_path / "a", mapped_file_size_commit_log=SEG)
    b = await make_store(tmp_path / "b", mapped_file_size_commit_log=SEG)
    a.append_epoch(1, 0)
    b.append_epoch(1, 0)
    ta = TieredService(CFG, a, backend, HOST)
    ta.on_master(1, 0)
    fill(a, 200)
    await until(lambda: ta.manifest.end >= 2 * SEG, "a's first segments in the tier")
    replicate(a, b)

    b.append_epoch(2, b.max_phy_offset)  # b is elected (epoch 2); a is cut off but still believes it is master
    tb = TieredService(CFG, b, backend, HOST)
    tb.on_master(2, 1)
    await until(lambda: tb.manifest.epoch == 2, "b's claim")
    fill(a, 200, 200)  # a writes alone: its uploads must be refused
    await until(lambda: ta.fenced is not None, "a fenced")
    fill(b, 200, 400)
    await until(lambda: tb.manifest.end >= 5 * SEG, "b's uploads")

    versions = chain(backend)
    claim = next(i for i, m in enumerate(versions) if m.epoch == 2)
    assert all(m.epoch == 2 for m in versions[claim:])  # nothing from a after b's claim
    breakpoint_at = versions[claim].end
    assert breakpoint_at >= 2 * SEG
    final = versions[-1]
    assert final.min_offset == 0 and all(x.end == y.start for x, y in zip(final.chunks, final.chunks[1:], strict=False))
    assert tb.uploaded_bytes == final.end - breakpoint_at  # resumed at the breakpoint: nothing twice, nothing skipped
    for c in final.chunks:  # the tier is b's log, byte for byte
        assert backend.get(c.name) == bytes(b.read_raw(c.start, c.end))
    await ta.stop()
    await tb.stop()


async def test_an_empty_store_bootstraps_from_the_tier_and_serves_the_whole_range(
        make_store: Any, tmp_path: pathlib.Path) -> None:  # fmt: skip
    backend = PosixBackend(tmp_path / "tier")
    a = await make_store(tmp_path / "a", mapped_file_size_commit_log=SEG)
    a.append_epoch(1, 0)
    ta = TieredService(CFG, a, backend, HOST)
    ta.on_master(1, 0)
    fill(a, 300)
    await until(lambda: ta.manifest.end >= 3 * SEG, "segments in the tier")
    await ta.stop()

    empty = await make_store(tmp_path / "empty", mapped_file_size_commit_log=SEG)
    te = TieredService(CFG, empty, backend, HOST)
    got = await te.bootstrap_from_tier_if_empty()
    assert got == ta.manifest.end == empty.max_phy_offset
    assert [(e.epoch, e.start_offset) for e in empty.epoch_entries()] == [(1, 0)]
    replicate(a, empty)  # the rest comes from the master
    for q in range(4):
        want = records(a, q)
        assert records(empty, q) == want and len(want) == 75
    await te.stop()
