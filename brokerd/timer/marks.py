"""The firing progress in the commit log, pure: the bodies of the markers on ``rmq_sys_wheel_timer_progress`` and
the state rebuilt by replaying them (``Progress``).

Markers (brokerd/logbatch.py brackets the batches; bodies are msgpack maps):

* ``BEGIN {t: [offsets delivered, in order], d: [offsets resolved without a delivery], w, s}`` then one delivery
  per ``t`` entry (the message in its real topic, or a roll: parked again in the timer topic), then
  ``END {w, s, n}``; ``n`` is -1, or how many deliveries a cut batch held when a later start closed it;
* ``RECALL {r: [offsets], w, s}``: timers recalled (RECALL_MESSAGE, or a send with TIMER_DEL_UNIQKEY);
* ``STATE {w, s, i, c, f}``: part ``i`` of ``c`` of the resolved set (``FiredSet.encode``), written every few
  seconds so that a start replays a bounded tail;

where offsets are queue offsets in ``rmq_sys_wheel_timer``, ``w`` is the *floor* (ms): every timer placed below
it is resolved, by this marker or before it; ``s`` the queue offset of the newest STATE (its first part).
A batch's timers count as resolved when its END is read (the first ``n`` deliveries of a closed cut batch).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from brokerd.logbatch import TAG_BEGIN, TAG_END, TAG_STATE
from brokerd.timer.fired import FiredSet

TAG_RECALL: Final = "RECALL"
STATE_PART_BYTES: Final = 2 * 1024 * 1024


def pack(**fields: Any) -> bytes:
    out: bytes = msgpack.packb(fields)
    return out


def unpack(body: bytes) -> dict[str, Any]:
    """A marker body; ValueError when it is not one."""
    try:
        out = msgpack.unpackb(body)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for garbage
        raise ValueError(f"bad marker body: {e}") from None
    if not isinstance(out, dict):
        raise ValueError("bad marker body: not a map")
    return out


def state_parts(fired: FiredSet, floor_ms: int, state_at: int) -> list[bytes]:
    """The STATE bodies of ``fired`` (several when it is large); ``state_at``: the queue offset the first gets."""
    blob = fired.encode()
    chunks = [blob[i : i + STATE_PART_BYTES] for i in range(0, len(blob), STATE_PART_BYTES)] or [b""]
    return [pack(w=floor_ms, s=state_at, i=i, c=len(chunks), f=c) for i, c in enumerate(chunks)]


@dataclass
class Resolved:
    """What one marker resolved, by kind (counters)."""

    fired: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    recalled: list[int] = field(default_factory=list)


class Progress:
    """The state of the marker queue, applied marker by marker in queue order."""

    def __init__(self) -> None:
        self.fired = FiredSet()
        self.floor_ms: int | None = None  # the newest marker's floor
        self.state_at = -1  # queue offset of the newest STATE
        self.next = 0  # the next marker to apply
        self.begin: tuple[int, dict[str, Any]] | None = None  # an open batch: BEGIN's offset and body
        self._floors: deque[tuple[int, int]] = deque()  # (marker end in the log, floor) not yet durable
        self.durable_floor_ms: int | None = None

    def load_state(self, parts: list[bytes], next_offset: int) -> None:
        """Start from a STATE snapshot (its bodies, in order); markers from ``next_offset`` follow."""
        bodies = [unpack(p) for p in parts]
        self.fired = FiredSet.decode(b"".join(bytes(b["f"]) for b in bodies))
        self.floor_ms = int(bodies[0]["w"])
        self.state_at = next_offset - len(parts)
        self.next = next_offset
        self.begin = None

    def apply(self, tag: str, body: bytes, qoff: int, end: int) -> Resolved:
        """Apply the marker at queue offset ``qoff`` (its record ends at log offset ``end``)."""
        out = Resolved()
        self.next = qoff + 1
        try:
            b = unpack(body)
        except ValueError:
            return out  # not ours: nothing to apply
        if tag == TAG_BEGIN:
            self.begin = (qoff, b)
        elif tag == TAG_END and self.begin is not None:
            _, begin = self.begin
            self.begin = None
            n = int(b.get("n", -1))
            delivered = [int(q) for q in begin.get("t", [])]
            out.fired = delivered if n < 0 else delivered[:n]
            out.dropped = [int(q) for q in begin.get("d", [])]
        elif tag == TAG_RECALL:
            out.recalled = [int(q) for q in b.get("r", [])]
        elif tag == TAG_STATE and int(b.get("i", 0)) == 0:
            self.state_at = qoff
        for group in (out.fired, out.dropped, out.recalled):
            for q in group:
                self.fired.mark(q)
        if "w" in b:
            self.floor_ms = int(b["w"])
            self._floors.append((end, self.floor_ms))
        return out

    def durable(self, flushed: int) -> int | None:
        """The floor of the newest marker the log holds durably (``flushed``: the log's durable end)."""
        while self._floors and self._floors[0][0] <= flushed:
            self.durable_floor_ms = self._floors.popleft()[1]
        return self.durable_floor_ms

    def local(self, end: int, floor_ms: int) -> None:
        """A marker this broker appended itself (applied by the caller): its floor becomes durable with ``end``."""
        self.floor_ms = floor_ms
        self._floors.append((end, floor_ms))
