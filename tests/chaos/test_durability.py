"""The power-loss layer on real temp files: brokerd/durability.py journals syncs, powerloss.restore rebuilds the
last durable state (write / sync / crash / restore)."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from brokerd import durability
from brokerd.durability import Journal, before_fd_sync, before_mapped_sync, nonzero_extent
from tests.chaos.harness.powerloss import restore
from tests.support import ROOT

PAGE = mmap.PAGESIZE


@pytest.fixture()
def journal(tmp_path: Path) -> Journal:
    return Journal(str(tmp_path / "journal.jsonl"))


def _sync_file(j: Journal, path: Path, **kw: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        j.write(before_fd_sync(fd, path, **kw))  # type: ignore[arg-type]
    finally:
        os.close(fd)


def _sync_dir(j: Journal, path: Path) -> None:
    _sync_file(j, path)


def _sync_mapped(j: Journal, path: Path, wrote: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        note = before_mapped_sync(fd, path, wrote, os.fstat(fd).st_size)
        os.fdatasync(fd)
        j.write(note)
    finally:
        os.close(fd)


def _blob(j: Journal, path: Path) -> None:
    data = path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        j.write({"op": "blob", "path": str(path), "id": durability.file_id(fd), "sha": j.blob(data), "size": len(data)})
    finally:
        os.close(fd)


def test_the_hooks_are_off_without_the_environment_variable() -> None:
    assert os.environ.get(durability.JOURNAL_ENV) is None
    assert durability.ENABLED is False and durability.JOURNAL is None


@pytest.mark.parametrize(("data", "expected"), [(b"", 0), (b"ab", 2), (b"x" * PAGE, PAGE), (b"x" * (PAGE + 3), PAGE + 3),
                                                (b"x" * 10 + bytes(10) + b"y", 21)])
def test_nonzero_extent_of_an_append_only_buffer(data: bytes, expected: int) -> None:
    buf = data + bytes(5 * PAGE)
    assert nonzero_extent(buf, len(buf)) == expected


def test_unsynced_appends_are_lost_synced_ones_kept(tmp_path: Path, journal: Journal) -> None:
    log = tmp_path / "wal" / "wal-0000000000000001.log"
    log.parent.mkdir()
    log.write_bytes(b"A" * 100)
    _sync_file(journal, log)
    with open(log, "ab") as f:
        f.write(b"B" * 50)
    rep = restore([tmp_path / "wal"], [journal.path])
    assert log.read_bytes() == b"A" * 100
    assert rep.bytes_truncated == 50


def test_preallocated_segment_loses_its_unsynced_tail_and_keeps_its_size(tmp_path: Path, journal: Journal) -> None:
    seg = tmp_path / "store" / "commitlog" / "00000000000000000000"
    seg.parent.mkdir(parents=True)
    seg.write_bytes(bytes(16 * PAGE))
    with open(seg, "r+b") as f:
        f.write(b"r" * 1000)
    _sync_mapped(journal, seg, wrote=1000)
    with open(seg, "r+b") as f:
        f.seek(1000)
        f.write(b"s" * 500)
    rep = restore([tmp_path / "store"], [journal.path])
    data = seg.read_bytes()
    assert len(data) == 16 * PAGE and data[:1000] == b"r" * 1000 and data[1000:] == bytes(len(data) - 1000)
    assert rep.bytes_zeroed == 500 and rep.bytes_zeroed_by_dir == {"commitlog": 500}


def test_consume_queue_extent_comes_from_the_mapping_and_index_files_are_kept(tmp_path: Path, journal: Journal) -> None:
    cq = tmp_path / "s" / "consumequeue" / "T" / "0" / "00000000000000000000"
    idx = tmp_path / "s" / "index" / "20260101000000000"
    for p in (cq, idx):
        p.parent.mkdir(parents=True)
        p.write_bytes(bytes(8 * PAGE))
    for p in (cq, idx):
        with open(p, "r+b") as f:
            f.write(b"e" * 60)  # three 20-byte entries, synced with a stale writer position (0)
        _sync_mapped(journal, p, wrote=0)
        with open(p, "r+b") as f:
            f.seek(60)
            f.write(b"f" * 20)
    restore([tmp_path / "s"], [journal.path])
    assert cq.read_bytes()[:80] == b"e" * 60 + bytes(20)
    assert idx.read_bytes()[:80] == b"e" * 60 + b"f" * 20  # written out of order: nothing provable, kept


def test_a_never_synced_file_in_a_strict_place_is_lost_elsewhere_kept(tmp_path: Path, journal: Journal) -> None:
    seg = tmp_path / "commitlog" / "00000000000000004096"
    other = tmp_path / "epochFileCheckpoint"
    seg.parent.mkdir()
    seg.write_bytes(b"z" * PAGE)
    other.write_bytes(b"epochs")
    rep = restore([tmp_path], [journal.path])
    assert seg.read_bytes() == bytes(PAGE) and other.read_bytes() == b"epochs"
    assert rep.never_synced_zeroed == [str(seg)]


def _atomic(journal: Journal, d: Path, content: bytes, *, dir_sync: bool) -> None:
    tmp = d / "topics.json.tmp"
    tmp.write_bytes(content)
    _blob(journal, tmp)  # the tmp file's fsync
    os.replace(tmp, d / "topics.json")
    if dir_sync:
        _sync_dir(journal, d)


def test_a_rename_without_a_directory_fsync_is_undone(tmp_path: Path, journal: Journal) -> None:
    d = tmp_path / "config"
    d.mkdir()
    _atomic(journal, d, b"version-1", dir_sync=True)
    _atomic(journal, d, b"version-2", dir_sync=False)
    rep = restore([d], [journal.path])
    assert (d / "topics.json").read_bytes() == b"version-1"
    assert rep.renames_undone == [str(d / "topics.json")]


def test_a_rename_followed_by_a_directory_fsync_survives(tmp_path: Path, journal: Journal) -> None:
    d = tmp_path / "config"
    d.mkdir()
    _atomic(journal, d, b"version-1", dir_sync=True)
    _atomic(journal, d, b"version-2", dir_sync=True)
    (d / "late.json").write_bytes(b"created after the last directory fsync")
    (d / "sub").mkdir()
    rep = restore([d], [journal.path])
    assert (d / "topics.json").read_bytes() == b"version-2"
    assert sorted(os.listdir(d)) == ["topics.json"]
    assert sorted(rep.entries_dropped) == [str(d / "late.json"), str(d / "sub")]


def test_a_delete_without_a_directory_fsync_is_undone(tmp_path: Path, journal: Journal) -> None:
    d = tmp_path / "config"
    d.mkdir()
    _atomic(journal, d, b"kept", dir_sync=True)
    (d / "topics.json").unlink()
    restore([d], [journal.path])
    assert (d / "topics.json").read_bytes() == b"kept"


def test_lengths_journaled_out_of_order_keep_the_largest_until_a_truncation(tmp_path: Path, journal: Journal) -> None:
    seg = tmp_path / "commitlog" / "00000000000000000000"
    seg.parent.mkdir()
    seg.write_bytes(b"a" * 300 + bytes(PAGE))
    fd = os.open(seg, os.O_RDONLY)
    late, early = before_fd_sync(fd, seg, length=300), before_fd_sync(fd, seg, length=100)
    os.close(fd)
    journal.write(late)
    journal.write(early)  # a sync sampled earlier, journaled later (two flush threads)
    restore([tmp_path], [journal.path])
    assert seg.read_bytes()[:301] == b"a" * 300 + b"\0"
    fd = os.open(seg, os.O_RDONLY)
    journal.write(before_fd_sync(fd, seg, length=200, reset=True))  # a truncation (zero_from) then its sync
    os.close(fd)
    restore([tmp_path], [journal.path])
    assert seg.read_bytes()[:201] == b"a" * 200 + b"\0"


SCRIPT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from brokerd import durability
    from brokerd.store.mapped_file import MappedFile, sync_all
    from brokerd.metadata.persist import atomic_write
    from controller.raft.wal import WriteAheadLog
    root = Path(sys.argv[1])
    assert durability.ENABLED
    (root / "commitlog").mkdir()
    f = MappedFile.create(root / "commitlog", 0, 1 << 16)
    sync_all([root / "commitlog"], [])
    f.write_at(0, b"R" * 1000); f.wrote = 1000
    sync_all([], [f])
    f.write_at(1000, b"U" * 1000); f.wrote = 2000           # acknowledged only after the next sync: lost
    atomic_write(str(root / "config" / "topics.json"), b'{"v": 1}')
    atomic_write(str(root / "config" / "topics.json"), b'{"v": 2}')
    wal = WriteAheadLog(root / "raft" / "wal")
    wal.open()
    wal.append([(1, 1, b"synced")], sync=True)
    wal.append([(1, 2, b"not synced")], sync=False)
    os._exit(0)                                               # no clean shutdown
""")


def test_the_real_hooks_in_a_process_then_restore(tmp_path: Path) -> None:
    """MappedFile/sync_all, metadata atomic_write and the Raft WAL journal their syncs; restore after the
    process died keeps exactly what was synced."""
    root, journal = tmp_path / "data", tmp_path / "journal.jsonl"
    root.mkdir()
    env = {**os.environ, durability.JOURNAL_ENV: str(journal), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(root)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    wal = next((root / "raft" / "wal").glob("wal-*.log"))
    wal_before = wal.stat().st_size
    rep = restore([root], [journal])
    seg = (root / "commitlog" / "00000000000000000000").read_bytes()
    assert seg[:1000] == b"R" * 1000 and seg[1000:2000] == bytes(1000)
    assert (root / "config" / "topics.json").read_bytes() == b'{"v": 2}'
    assert wal.stat().st_size < wal_before and rep.bytes_truncated == wal_before - wal.stat().st_size
    assert not rep.unmodelled, rep.unmodelled


def test_directory_listings_journaled_out_of_order_keep_the_latest_sample(tmp_path: Path, journal: Journal) -> None:
    """Two threads fsync the same directory: the listing sampled first may be journaled last (e.g. the offsets
    file persisted on a worker thread while a group is created on the loop); the later sample must win."""
    d = tmp_path / "config"
    d.mkdir()
    _atomic(journal, d, b"old", dir_sync=True)
    fd = os.open(d, os.O_RDONLY)
    early = before_fd_sync(fd, d)  # sampled before the new version is renamed in, journaled after
    _atomic(journal, d, b"new", dir_sync=True)
    journal.write(early)
    os.close(fd)
    restore([d], [journal.path])
    assert (d / "topics.json").read_bytes() == b"new"
