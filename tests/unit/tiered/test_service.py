"""The tiered service on real stores: a master uploads chunks of its confirmed log; a new master (higher epoch, a
replica of the same log) claims the tier and resumes at the breakpoint without re-uploading or skipping a byte;
the deposed master's next upload is refused by the manifest and it stops; an empty store bootstraps from the tier
and serves the whole range."""

from __future__ import annotations

import pathlib
from typing import Any

from brokerd.store.message_store import MessageStore
from brokerd.tiered.backend import PosixBackend
from brokerd.tiered.config import TierConfig
from brokerd.tiered.manifest import MANIFEST_PREFIX, Manifest
from brokerd.tiered.service import TieredService
from tests.support import until
from tests.unit.store.conftest import make_msg

SEG = 64 * 1024
CFG = TierConfig(segment_size=SEG, chunk_bytes=SEG, upload_interval_ms=10)
HOST = ("127.0.0.1", 10911)  # port-ok: the host written into records, nothing binds it


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


class RecordingBackend(PosixBackend):
    """The tier directory as one broker sees it, recording the chunk objects it writes."""

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []

    def put(self, name: str, data: bytes | memoryview) -> None:
        self.puts.append(name)
        super().put(name, data)


async def uploaded(make_store: Any, tmp_path: pathlib.Path, messages: int, segments: int, cfg: TierConfig = CFG,
                   *, expired: bool = False) -> tuple[PosixBackend, MessageStore, TieredService]:  # fmt: skip
    """A master store ``a`` of ``messages`` whose tier holds at least ``segments`` segments (``expired``: and has
    dropped its oldest chunks); its service stopped."""
    backend = PosixBackend(tmp_path / "tier")
    a = await make_store(tmp_path / "a", mapped_file_size_commit_log=SEG)
    a.append_epoch(1, 0)
    ta = TieredService(cfg, a, backend, HOST)
    ta.on_master(1, 0)
    fill(a, messages)
    await until(lambda: ta.manifest.end >= segments * SEG and (not expired or ta.manifest.min_offset > 0),
                "segments in the tier")  # fmt: skip
    await ta.stop()
    return backend, a, ta


def chain(backend: PosixBackend) -> list[Manifest]:
    return [Manifest.decode(backend.get(n)) for n in backend.list(MANIFEST_PREFIX)]


async def test_a_new_master_resumes_at_the_breakpoint_and_the_deposed_one_is_fenced(
        make_store: Any, tmp_path: pathlib.Path) -> None:  # fmt: skip
    backend = PosixBackend(tmp_path / "tier")
    a_view, b_view = RecordingBackend(tmp_path / "tier"), RecordingBackend(tmp_path / "tier")
    a = await make_store(tmp_path / "a", mapped_file_size_commit_log=SEG)
    b = await make_store(tmp_path / "b", mapped_file_size_commit_log=SEG)
    a.append_epoch(1, 0)
    b.append_epoch(1, 0)
    fill(a, 400)
    a.set_confirm_offset(2 * SEG)  # its slave b had acknowledged this much so far
    ta = TieredService(CFG, a, a_view, HOST)
    ta.on_master(1, 0)
    await until(lambda: ta.manifest.end == 2 * SEG, "a's confirmed segments in the tier")
    replicate(a, b)

    b.append_epoch(2, b.max_phy_offset)  # b is elected (epoch 2)
    tb = TieredService(CFG, b, b_view, HOST)
    tb.on_master(2, 1)
    await until(lambda: tb.manifest.epoch == 2, "b's claim")
    a.set_confirm_offset(a.max_phy_offset)  # a, cut off, learns late that b held everything: it tries to upload
    await until(lambda: ta.fenced is not None, "a fenced")
    fill(b, 200, 400)
    await until(lambda: tb.manifest.end >= 7 * SEG, "b's uploads")
    await ta.stop()
    await tb.stop()

    versions = chain(backend)
    claim = next(i for i, m in enumerate(versions) if m.epoch == 2)
    assert all(m.epoch == 2 for m in versions[claim:])  # nothing from a after b's claim
    assert versions[claim].end == 2 * SEG and ta.uploaded_bytes == 2 * SEG
    final = versions[-1]
    assert final.min_offset == 0 and all(x.end == y.start for x, y in zip(final.chunks, final.chunks[1:], strict=False))
    # b resumed at the breakpoint: its chunk writes start there, continue without a gap, none twice; what a wrote
    # after b's claim (its refused attempt) is no object the tier names
    ranges = [tuple(int(x) for x in n.removeprefix("log/").split(".")[0].split("-")) for n in b_view.puts
              if n.startswith("log/")]
    assert ranges[0][0] == 2 * SEG and len(set(ranges)) == len(ranges)
    assert all(x[1] == y[0] for x, y in zip(ranges, ranges[1:], strict=False)) and ranges[-1][1] >= final.end
    a_logs = [n for n in a_view.puts if n.startswith("log/")]
    assert not set(a_logs[2:]) & {c.name for c in final.chunks} and len(a_logs) >= 3
    for c in final.chunks:  # the tier is b's log, byte for byte
        assert backend.get(c.name) == bytes(b.read_raw(c.start, c.end))


async def test_an_empty_store_bootstraps_from_the_tier_and_serves_the_whole_range(
        make_store: Any, tmp_path: pathlib.Path) -> None:  # fmt: skip
    backend, a, _ = await uploaded(make_store, tmp_path, 300, 3)

    empty = await make_store(tmp_path / "empty", mapped_file_size_commit_log=SEG)
    te = TieredService(CFG, empty, backend, HOST)
    got = await te.bootstrap_from_tier_if_empty()
    assert got == chain(backend)[-1].end == empty.max_phy_offset >= 3 * SEG
    assert [(e.epoch, e.start_offset) for e in empty.epoch_entries()] == [(1, 0)]
    replicate(a, empty)  # the rest comes from the master
    for q in range(4):
        want = records(a, q)
        assert records(empty, q) == want and len(want) == 75
    await te.stop()


async def test_chunks_smaller_than_a_segment_end_at_record_boundaries(make_store: Any, tmp_path: pathlib.Path) -> None:
    backend = PosixBackend(tmp_path / "tier")
    a = await make_store(tmp_path / "a", mapped_file_size_commit_log=SEG)
    a.append_epoch(1, 0)
    ta = TieredService(TierConfig(segment_size=SEG, chunk_bytes=20_000, upload_interval_ms=10), a, backend, HOST)
    ta.on_master(1, 0)
    fill(a, 300)
    await until(lambda: ta.manifest.end >= 3 * SEG, "chunks of three segments")
    m = ta.manifest
    assert all(x.end == y.start for x, y in zip(m.chunks, m.chunks[1:], strict=False))
    assert any(c.end % SEG for c in m.chunks) and any(c.end % SEG == 0 for c in m.chunks)  # both kinds of cut
    for c in m.chunks:
        data = backend.get(c.name)
        assert data == bytes(a.read_raw(c.start, c.end)) and c.end - c.start <= 20_000
        assert a.records_end(data, c.start)[0] == c.end  # whole records (a segment's last chunk: its blank end too)
    await ta.stop()


async def test_the_tier_keeps_data_for_its_own_retention_then_drops_whole_chunks(
        make_store: Any, tmp_path: pathlib.Path) -> None:  # fmt: skip
    keep_briefly = TierConfig(segment_size=SEG, chunk_bytes=SEG, upload_interval_ms=10, reserved_hours=1e-6)
    backend, a, ta = await uploaded(make_store, tmp_path, 400, 5, keep_briefly, expired=True)
    m = chain(backend)[-1]
    kept = {c.name for c in m.chunks}
    assert m.min_offset % SEG == 0 and len(kept) >= 1 and ta.trimmed_chunks >= 1
    assert set(backend.list("log/")) == kept  # the expired chunks' objects are gone, the rest are there
    assert set(backend.list("qi/")) == {c.index_name for c in m.chunks}


async def test_an_empty_store_with_short_local_retention_serves_older_data_from_the_tier(
        make_store: Any, tmp_path: pathlib.Path) -> None:  # fmt: skip
    """Local retention shorter than the tier's: the bootstrap fetches only the tier's last segment as log, and
    for the older chunks their queue index, so consume queues and the key index still reach back to the tier's
    start; those reads are served from the tier."""
    backend, a, _ = await uploaded(make_store, tmp_path, 300, 4)
    tier_end = chain(backend)[-1].end

    empty = await make_store(tmp_path / "empty", mapped_file_size_commit_log=SEG)
    short = TierConfig(segment_size=SEG, chunk_bytes=SEG, local_reserved_hours=1e-9)
    te = TieredService(short, empty, backend, HOST)
    got = await te.bootstrap_from_tier_if_empty()
    assert got == SEG and empty.min_phy_offset == tier_end - SEG  # only the last segment as local log
    replicate(a, empty)
    for q in range(4):  # the whole range, the older part through the tier
        want = records(a, q)
        assert records(empty, q) == want and len(want) == 75
    key = empty.query_message("T", "k1", 4, 0, 2**62)
    assert [bytes(x) for x in key.buffers] == [x for x in records(a, 1) if b"KEYS\x01k1\x02" in x]
    assert te.reader.fetches >= 1
    await te.stop()
