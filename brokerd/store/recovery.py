"""Commit-log recovery.

Recovery starts at S = min(checkpointed commit-log flushed offset, checkpointed logics offset); both are
record boundaries below which the log, consume queues and index are durable. Without a checkpoint S is
the first segment's start. From S every record is verified (magic, size bounds, inner lengths, body
CRC); the log ends at the first invalid one (a torn write), the rest of that segment is zeroed and
later segments are deleted. Consume-queue entries at or after S are dropped and rebuilt, with the
index, by re-dispatching the records in [S, end) (done by the store).

After a clean shutdown the checkpoint says S == end, so start-up only checks one header.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokerd.store.checkpoint import Checkpoint
from brokerd.store.commit_log import CommitLog


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    abnormal: bool
    start: int
    end: int
    deleted_segments: int
    torn_tail: bool
    checkpoint: Checkpoint | None


def recover_commit_log(log: CommitLog, checkpoint: Checkpoint | None, *, abnormal: bool) -> RecoveryResult:
    """Load segments and cut the log at its last valid record. Run before anything else uses ``log``."""
    log.load()
    if not log.files:
        return RecoveryResult(abnormal, 0, 0, 0, False, checkpoint)
    lo, hi = log.min_offset, log.files[-1].end
    if checkpoint is None:
        start = lo
    else:
        start = min(checkpoint.commit_log_flushed, checkpoint.logics_offset)
    start = min(max(start, lo), hi)
    end = log.scan_valid(start)
    deleted, torn = log.set_end(end, zero_tail=abnormal)
    return RecoveryResult(abnormal, start, end, deleted, torn, checkpoint)
