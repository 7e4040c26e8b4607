"""Read bookkeeping, pure: ReadIndex rounds on the leader (etcd `read_only.go`) and forwarded reads on
followers.

Leader: each read request records the commit index at arrival, its requester and the requester's
context. Contexts are chosen by each member independently, so two members (or the leader itself) may use
the same bytes at the same time: requests are keyed by (requester, ctx), and heartbeat rounds carry a
leader-local round key instead of a client context. An acknowledgement from a quorum for key K proves
the node was still leader when K was registered, and so for every request queued before K too.

Follower: a read forwarded to the leader stays pending here until its answer arrives. It is sent again
when the known leader changes and every `retry_ticks` while unanswered (the request or the answer may be
lost: the transport drops frames for a peer that is not connected), until answered, cancelled, or
`give_up_ticks` after it was first sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ReadIndexStatus:
    index: int
    ctx: bytes  # the requester's context
    frm: str  # requesting node; the leader's own id for local reads
    acks: set[str] = field(default_factory=set)


class ReadOnly:
    __slots__ = ("pending", "queue", "_by_request", "_seq")

    def __init__(self) -> None:
        self.pending: dict[bytes, ReadIndexStatus] = {}  # round key -> request
        self.queue: list[bytes] = []  # round keys in arrival order
        self._by_request: dict[tuple[str, bytes], bytes] = {}  # (frm, ctx) -> round key
        self._seq = 0  # never reset: a round key is never reused by this core

    def add_request(self, index: int, ctx: bytes, frm: str, self_id: str) -> None:
        """Queue a read; a repeat of a still-pending (frm, ctx) request (a retry) is ignored."""
        if (frm, ctx) in self._by_request:
            return
        self._seq += 1
        key = self._seq.to_bytes(8, "big")
        self.pending[key] = ReadIndexStatus(index, ctx, frm, {self_id})
        self._by_request[(frm, ctx)] = key
        self.queue.append(key)

    def recv_ack(self, frm: str, key: bytes) -> int:
        status = self.pending.get(key)
        if status is None:
            return 0
        status.acks.add(frm)
        return len(status.acks)

    def advance(self, key: bytes) -> list[ReadIndexStatus]:
        """Release every request queued up to and including round key `key`."""
        if key not in self.pending:
            return []
        pos = self.queue.index(key)
        released = self.queue[: pos + 1]
        del self.queue[: pos + 1]
        out = [self.pending.pop(k) for k in released]
        for status in out:
            del self._by_request[(status.frm, status.ctx)]
        return out

    def last_pending_ctx(self) -> bytes:
        """The round key a heartbeat should carry (the newest pending request), or b""."""
        return self.queue[-1] if self.queue else b""

    def reset(self) -> None:
        self.pending.clear()
        self.queue.clear()
        self._by_request.clear()


class ForwardedReads:
    """Follower reads sent to the leader and not answered yet: ctx -> (first sent tick, last sent tick)."""

    __slots__ = ("_pending", "sent_to", "retry_ticks", "give_up_ticks")

    def __init__(self, retry_ticks: int, give_up_ticks: int) -> None:
        self._pending: dict[bytes, tuple[int, int]] = {}
        self.sent_to = ""  # the leader the pending reads were last sent to
        self.retry_ticks = retry_ticks
        self.give_up_ticks = give_up_ticks

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, ctx: bytes, now: int) -> None:
        self._pending.setdefault(ctx, (now, now))

    def answered(self, ctx: bytes) -> bool:
        """Remove `ctx`; False when it was not pending (a duplicate, late or cancelled answer)."""
        return self._pending.pop(ctx, None) is not None

    def cancel(self, ctx: bytes) -> None:
        self._pending.pop(ctx, None)

    def take_all(self) -> list[bytes]:
        out = list(self._pending)
        self._pending.clear()
        return out

    def due(self, now: int, *, all_of_them: bool) -> list[bytes]:
        """Contexts to send again now (all of them after a leader change); expired ones are dropped."""
        out: list[bytes] = []
        for ctx, (first, last) in list(self._pending.items()):
            if now - first >= self.give_up_ticks:
                del self._pending[ctx]
            elif all_of_them or now - last >= self.retry_ticks:
                self._pending[ctx] = (first, now)
                out.append(ctx)
        return out
