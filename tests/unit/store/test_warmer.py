"""The commit-log warmer fills the page cache ahead of arbitrary (unaligned) write positions in whole pages and
stays on (an early version handed madvise an unaligned address: one EINVAL switched warming off for every broker
of the process)."""

from __future__ import annotations

import mmap
import time
from pathlib import Path

from brokerd.store.mapped_file import MappedFile, Warmer, _WarmThread


def wait_until(cond: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)  # sleep-ok: polling another thread's progress with a deadline


def test_unaligned_targets_keep_warming_aligned_and_enabled(tmp_path: Path) -> None:
    shared = _WarmThread.get()
    if shared.disabled:  # no posix_fadvise on this platform
        return
    f = MappedFile.create(tmp_path, 0, 8 << 20)
    w = Warmer(ahead=2 << 20, chunk=1 << 20)
    try:
        w.track(f, 0)
        for pos in (600_000, 1_234_567, 2_000_003, 3_333_333, 5_555_555):  # writer positions, never page-aligned
            w.kick(pos)
            target = min(f.size, pos + w._ahead)
            wait_until(lambda t=target: f.warmed >= t, f"warmed past {target}")  # type: ignore[misc]
            assert f.warmed % mmap.PAGESIZE == 0 or f.warmed == f.size
            assert not shared.disabled
        assert f.warm_trigger < f.warmed  # the next kick comes before the writer reaches unwarmed pages
    finally:
        w.stop()
        f.close()
