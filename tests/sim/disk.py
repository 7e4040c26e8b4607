"""Simulated disk: durable WAL records and snapshot image of one node, with crash semantics.

Operations arrive as `storage.plan_ready`/`plan_checkpoint` plans (the same plans the real driver
executes). While an operation is in flight nothing of it is durable; a crash keeps a random prefix of
its records (a torn write is truncated to whole records by the real WAL's CRC check). Records appended
without fsync may also be lost at a crash, except those followed by a synced append; whatever a restart
recovers is durable (the WAL fsyncs it when opened).
"""

from __future__ import annotations

import random

from controller.raft.storage import DiskOp, Record, RecoveredState, recover, replay
from controller.raft.types import Snapshot


class SimDisk:
    def __init__(self) -> None:
        self.image: Snapshot | None = None
        self.records: list[Record] = []
        self.synced_len = 0  # records[:synced_len] survive any crash
        self.in_flight: list[DiskOp] | None = None
        self.in_flight_sync = True

    def begin(self, ops: list[DiskOp], sync: bool) -> None:
        assert self.in_flight is None, "one disk operation at a time"
        self.in_flight = ops
        self.in_flight_sync = sync

    def complete(self) -> None:
        ops, self.in_flight = self.in_flight, None
        assert ops is not None
        for kind, arg in ops:
            self._do(kind, arg, len(arg) if kind != "image" else 1)
        if self.in_flight_sync:
            self.synced_len = len(self.records)

    def _do(self, kind: str, arg: object, count: int) -> None:
        if kind == "image":
            assert isinstance(arg, Snapshot)
            self.image = arg
        elif kind == "append":
            assert isinstance(arg, list)
            self.records.extend(arg[:count])
        elif kind == "rotate":
            assert isinstance(arg, list)
            self.records = list(arg)  # temp file + fsync + rename: all or nothing
            self.synced_len = len(self.records)
        else:
            raise AssertionError(kind)

    def crash(self, rng: random.Random) -> None:
        """Lose what was not durable: a random prefix of the in-flight op, maybe unsynced records."""
        ops, self.in_flight = self.in_flight, None
        # Unsynced appends from earlier Readies: keep a random prefix of them.
        if self.synced_len < len(self.records):
            keep = rng.randint(self.synced_len, len(self.records))
            if keep < len(self.records):
                del self.records[keep:]
                return  # the WAL's CRC scan stops at the first lost record: nothing after it counts
        if ops is None:
            return
        for kind, arg in ops:
            if kind == "append":
                assert isinstance(arg, list)
                n = rng.randint(0, len(arg))
                self._do(kind, arg, n)
                if n < len(arg):
                    return
            elif rng.random() < 0.5:
                self._do(kind, arg, 1)
            else:
                return

    def load(self) -> RecoveredState:
        """Recover like the driver does, including its WAL rewrite when the image is ahead of the WAL.

        `WriteAheadLog.open` fsyncs what it recovered, so every record that survived the crash (kept
        unsynced records and a kept prefix of the interrupted write) is durable from here on.
        """
        self.synced_len = len(self.records)
        st = recover(self.image, replay(self.records))
        if st.rewrite is not None:
            self.records = list(st.rewrite)
            self.synced_len = len(self.records)
        return st
