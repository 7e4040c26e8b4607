"""The derived index of the timer topic: the wheel (in memory, snapshotted) over the timer log (files), under
``<storePathRootDir>/timer/``. Built like a consume queue from the timer topic's queue 0 (``add`` per parked
message, in queue order; ``next_q`` is the next one to add), on a master and on a slave alike.

Durability: the snapshot (``wheel.snapshot``: the wheel's arrays, the timer log's end, ``next_q`` and the floor)
is written every ``timerFlushIntervalMs`` after the timer log is synced up to that end, replacing the previous
one atomically. A start loads it, cuts the timer log back to its end and adds the timer topic's messages from its
``next_q`` on again: nothing the snapshot does not cover is trusted, so a crash or a power loss at any point leaves
an index that catches up. A snapshot that does not fit the log any more (the log was cut back under it, the
precision or the window changed, a torn file) is dropped and the index is built again from the timer topic.

The floor: granules below it are released; their slots start over. A master moves it without looking (every
entry placed below the floor is resolved); a slave moves it following the master's markers and carries the entries
the markers do not show resolved yet to the new floor (``advance``), so that it holds every unresolved timer at or
above its floor when it is promoted.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgpack

from brokerd.fsutil import fsync_fd, fsync_path
from brokerd.timer.timerlog import FILE_SIZE, Entry, TimerLog
from brokerd.timer.wheel import EMPTY, Wheel, place, slots_for

SNAPSHOT: Final = "wheel.snapshot"
_LEN: Final = struct.Struct("<I")


class TimerIndex:
    def __init__(self, root: Path, precision_ms: int, window_slots: int) -> None:
        self.dir = root / "timer"
        self.precision = precision_ms
        self.window = window_slots
        self.slots = slots_for(window_slots)
        self.wheel = Wheel(self.slots)
        self.tlog = TimerLog(self.dir / "timerlog")
        self.next_q = 0  # the next timer-topic queue offset to add
        self.floor_g = 0  # granules below are released
        self.seg_max: dict[int, int] = {}  # timer-log segment -> the highest granule placed in it
        self.added = 0  # entries added since the last snapshot (0: nothing to snapshot)
        self.last_phys = -1  # commit-log offset of the message at ``next_q - 1`` (the snapshot checks the log by it)

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> bool:
        """The last snapshot, the timer log cut back to it; False (nothing loaded) when there is none that fits."""
        path = self.dir / SNAPSHOT
        self.tlog.close()
        try:
            blob = path.read_bytes()
            hlen = _LEN.unpack_from(blob)[0]
            if zlib.crc32(blob[:-4]) != _LEN.unpack_from(blob, len(blob) - 4)[0]:
                return False
            head = msgpack.unpackb(blob[4 : 4 + hlen], strict_map_key=False)
            if head["p"] != self.precision or head["n"] != self.slots:
                return False
            wheel = Wheel.from_bytes(memoryview(blob)[4 + hlen : -4], self.slots)
            self.tlog.open(int(head["e"]))
        except (OSError, ValueError, KeyError, TypeError, struct.error, msgpack.UnpackException):
            return False
        self.wheel = wheel
        self.next_q, self.floor_g, self.last_phys = int(head["q"]), int(head["f"]), int(head["x"])
        self.seg_max = {int(k): int(v) for k, v in head["m"].items()}
        self.added = 0
        return True

    def fresh(self, next_q: int, floor_g: int, last_phys: int) -> None:
        """Start over: an empty wheel and timer log; the timer topic is added again from ``next_q`` (the message
        before it is at ``last_phys``, -1: none)."""
        self.tlog.reset()
        self.wheel = Wheel(self.slots)
        self.next_q, self.floor_g, self.last_phys = next_q, floor_g, last_phys
        self.seg_max = {}
        self.added = 0
        (self.dir / SNAPSHOT).unlink(missing_ok=True)  # the old one does not describe this index

    def close(self) -> None:
        self.tlog.close()

    # ------------------------------------------------------------------ entries

    def add(self, qoff: int, phys: int, size: int, due_ms: int) -> int:
        """Index the parked message at ``qoff``; returns the granule it is placed in."""
        g = place(due_ms // self.precision, self.floor_g, self.window)
        self._link(g, due_ms, qoff, phys, size)
        if qoff >= self.next_q:
            self.next_q, self.last_phys = qoff + 1, phys
        return g

    def skip(self, qoff: int, phys: int) -> None:
        """The message at ``qoff`` needs no entry (resolved already)."""
        if qoff >= self.next_q:
            self.next_q, self.last_phys = qoff + 1, phys

    def _link(self, g: int, due_ms: int, qoff: int, phys: int, size: int) -> None:
        tl = self.tlog
        pos = tl.end
        prev = self.wheel.link(g, pos, self.floor_g)
        tl.append(prev, due_ms, qoff, phys, g, size)
        seg = pos - pos % FILE_SIZE
        if self.seg_max.get(seg, -1) < g:
            self.seg_max[seg] = g
        self.added += 1

    def chain(self, head: int) -> Iterator[Entry]:
        """The entries of a chain, newest first."""
        pos = head
        while pos != EMPTY:
            e = self.tlog.read(pos)
            yield e
            pos = e.prev

    def read(self, g: int) -> list[Entry]:
        """Granule ``g``'s entries in queue order (entries placed later in the same slot are linked again there)."""
        found = list(self.chain(self.wheel.chain(g)))
        later = [e for e in found if e.place > g]
        if later:  # not expected (module doc of wheel): keep them for their own granule
            self.wheel.release(g)
            keep = [e for e in found if e.place <= g]
            for e in reversed(keep + later):
                self._link(e.place, e.due, e.qoff, e.phys, e.size)
            found = keep
        found.sort(key=lambda e: e.qoff)
        return found

    def held_between(self, lo: int, hi: int) -> list[int]:
        """The granules in ``[lo, hi)`` holding entries, ascending."""
        return list(self.wheel.held_between(lo, hi))

    def count(self, g: int) -> int:
        return self.wheel.count(g)

    def advance(self, floor_g: int, unresolved: Callable[[int], bool] | None) -> int:
        """Release the granules below ``floor_g``. With ``unresolved`` (a slave), the entries it says are not
        resolved are placed again at or above the new floor; returns how many."""
        if floor_g <= self.floor_g:
            return 0
        carried: list[Entry] = []
        if unresolved is not None:
            for g in list(self.wheel.held_between(self.floor_g, floor_g)):
                carried += [e for e in self.chain(self.wheel.release(g)) if unresolved(e.qoff)]
        self.floor_g = floor_g
        for e in sorted(carried, key=lambda x: x.qoff):
            self._link(place(e.due // self.precision, floor_g, self.window), e.due, e.qoff, e.phys, e.size)
        if unresolved is None:
            self.added += 1  # the floor is part of the snapshot
        return len(carried)

    def pending_from(self, g: int) -> Iterator[tuple[int, int]]:
        """(granule, entries) of the granules ``>= g`` that hold entries."""
        return self.wheel.counts_from(g)

    # ------------------------------------------------------------------ snapshot and retention

    def snapshot(self) -> tuple[list[bytes], list[tuple[int, Path]]]:
        """The snapshot's pieces (copies of the wheel's arrays: ~1 ms on the loop for the default 2-day window, where
        joining and checksumming them took ~5 ms) and the timer-log segments to sync before it is written
        (``write_snapshot``, in a worker thread: it joins nothing, and its CRC-32 runs without the GIL)."""
        self.tlog.flush()
        head = msgpack.packb({"p": self.precision, "n": self.slots, "e": self.tlog.end, "q": self.next_q,
                              "f": self.floor_g, "x": self.last_phys, "m": self.seg_max})  # fmt: skip
        parts = [_LEN.pack(len(head)) + head, *self.wheel.parts()]
        self.added = 0
        return parts, self.tlog.sync_targets()

    def write_snapshot(self, parts: list[bytes], targets: list[tuple[int, Path]]) -> None:
        """Sync the timer log, then replace the snapshot atomically: the pieces, then their CRC-32 (a worker thread
        runs it)."""
        TimerLog.sync(targets, self.tlog.dir)
        crc = 0
        for part in parts:
            crc = zlib.crc32(part, crc)
        tmp = self.dir / (SNAPSHOT + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for part in [*parts, _LEN.pack(crc)]:
                view = memoryview(part)
                while view:
                    view = view[os.write(fd, view) :]
            fsync_fd(fd, tmp)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / SNAPSHOT)
        fsync_path(self.dir)

    def drop_released_segments(self) -> int:
        """Delete the timer-log segments whose entries are all placed below the floor."""
        keep_from = self.tlog.end
        for seg in sorted(self.seg_max):
            if self.seg_max[seg] >= self.floor_g:
                keep_from = seg
                break
        dropped = self.tlog.drop_below(keep_from)
        for seg in [s for s in self.seg_max if s + FILE_SIZE <= keep_from and s < self.tlog.first]:
            del self.seg_max[seg]
        return dropped
