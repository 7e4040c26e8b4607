"""Consume-queue and index files are sparse and written through their mappings: their writers reserve disk
blocks ahead of what they write, so a full disk is an OSError (ENOSPC) the store handles, never SIGBUS (which
would kill every broker of the container)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from brokerd.store.consume_queue import ConsumeQueue
from brokerd.store.index import IndexService
from brokerd.store.mapped_file import RESERVE_CHUNK

ROOT = Path(__file__).resolve().parents[3]
CQ_FILE = 20 * 300_000  # 6 MB, RocketMQ's consume-queue file


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_consume_queue_file_gets_blocks_a_chunk_ahead_of_its_entries(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, CQ_FILE)
    try:
        cq.put(0, 0, 100, 0)
        f = cq.files[0]
        assert f.reserved == RESERVE_CHUNK
        assert RESERVE_CHUNK <= allocated(f.path) < CQ_FILE  # sparse beyond the first chunk
        per_chunk = RESERVE_CHUNK // 20
        for q in range(1, per_chunk + 1):  # one entry past the first chunk
            cq.put(q, q * 100, 100, 0)
        assert f.reserved == 2 * RESERVE_CHUNK and allocated(f.path) >= 2 * RESERVE_CHUNK
        assert cq.entry(per_chunk) == (per_chunk * 100, 100, 0)
    finally:
        cq.close()


def test_an_index_file_reserves_its_slots_and_then_its_entries_as_they_come(tmp_path: Path) -> None:
    idx = IndexService(tmp_path / "index", slots=1000, max_entries=100_000)
    idx.load()
    try:
        idx.put_keys("T", ["k1", "k2"], 0, 1)
        f = idx.files[-1]
        assert f.mf.reserved >= f.entries_end(0) and allocated(f.mf.path) >= f.mf.reserved
        assert f.mf.reserved < f.mf.size  # 2.4 MB file, the entries beyond the first chunk still holes
        assert idx.query("T", "k2", 10, 0, 10) == [0]
    finally:
        idx.close()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    fs = tmp_path / "fs"
    fs.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(fs)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], capture_output=True)


FILL = textwrap.dedent("""
    import errno, sys
    from pathlib import Path
    from brokerd.store.consume_queue import ConsumeQueue
    from brokerd.store.index import IndexService
    fs, what = Path(sys.argv[1]), sys.argv[2]
    try:
        if what == "cq":
            cq = ConsumeQueue(fs, "T", 0, 20 * 300_000)
            for q in range(300_000):
                cq.put(q, q * 100, 100, 0)
        else:
            idx = IndexService(fs / "index", slots=1000, max_entries=100_000)
            idx.load()
            for i in range(1, 100_000):
                idx.put_keys("T", [f"k{i}"], i * 100, i)
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno))
    else:
        print("no error")
    # the filesystem is still full: a restart's recovery scans read into the holes
    if what == "cq":
        again = ConsumeQueue(fs, "T", 0, 20 * 300_000)
        again.load()
        again.recover(1 << 62)
        print(again.max_offset == cq.max_offset)
    else:
        again_idx = IndexService(fs / "index", slots=1000, max_entries=100_000)
        again_idx.load()
        print(again_idx.files[-1].count == idx.files[-1].count)
        try:  # a new index file on the full filesystem
            fresh = IndexService(fs / "index-new", slots=1000, max_entries=100_000)
            fresh.load()
            fresh.put_keys("T", ["k"], 0, 1)
        except OSError as e:
            print(errno.errorcode.get(e.errno, e.errno))
""")


@pytest.mark.parametrize("what", ["cq", "index"])
def test_a_full_disk_is_enospc_for_the_writer_not_sigbus(small_tmpfs: Path, what: str) -> None:
    """Files larger than their 1 MB filesystem, written until it is full, then opened again as at a restart, the
    filesystem still full (in a child: SIGBUS would kill it)."""
    r = subprocess.run([sys.executable, "-c", FILL, str(small_tmpfs), what], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)  # fmt: skip
    assert r.returncode == 0, f"the writer died (signal {-r.returncode}): {r.stderr[-2000:]}"
    out = [line for line in r.stdout.splitlines() if "[info" not in line]  # without the store's logs
    assert out == (["ENOSPC", "True"] if what == "cq" else ["ENOSPC", "True", "ENOSPC"])
