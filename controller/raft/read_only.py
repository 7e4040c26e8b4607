"""ReadIndex bookkeeping on the leader (etcd `read_only.go`), pure.

Each read request records the commit index at arrival and a context. The leader sends a heartbeat
round carrying the newest context; an acknowledgement from a quorum for context C proves the node was
still leader when C was registered, and so for every request queued before C too.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ReadIndexStatus:
    index: int
    ctx: bytes
    frm: str  # requesting node; the leader's own id for local reads
    acks: set[str] = field(default_factory=set)


class ReadOnly:
    __slots__ = ("pending", "queue")

    def __init__(self) -> None:
        self.pending: dict[bytes, ReadIndexStatus] = {}
        self.queue: list[bytes] = []

    def add_request(self, index: int, ctx: bytes, frm: str, self_id: str) -> None:
        if ctx in self.pending:
            return
        self.pending[ctx] = ReadIndexStatus(index, ctx, frm, {self_id})
        self.queue.append(ctx)

    def recv_ack(self, frm: str, ctx: bytes) -> int:
        status = self.pending.get(ctx)
        if status is None:
            return 0
        status.acks.add(frm)
        return len(status.acks)

    def advance(self, ctx: bytes) -> list[ReadIndexStatus]:
        """Release every request queued up to and including `ctx`."""
        if ctx not in self.pending:
            return []
        pos = self.queue.index(ctx)
        released_ctx = self.queue[: pos + 1]
        del self.queue[: pos + 1]
        return [self.pending.pop(c) for c in released_ctx]

    def last_pending_ctx(self) -> bytes:
        return self.queue[-1] if self.queue else b""

    def reset(self) -> None:
        self.pending.clear()
        self.queue.clear()
