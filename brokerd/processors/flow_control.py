"""Flow control of refused sends ("start flow control for a while", as RocketMQ's SYSTEM_BUSY remarks say).

A refused send is answered at once (``admission.py``), and a client resends at once: while the broker refuses
for its state (a full send queue, a slow flush, a busy page cache) every resend would be refused too, and with
enough sends in flight the broker would spend its time reading, refusing and answering resends (seen with a
compiled flood client: over a million refusals a second, and the flushes of the stored sends starved of CPU, so
successes fell to a tenth of what the broker stores without shedding). So a connection refused for the broker's
state is not read again until the broker takes sends again (``SendAdmission.state_refusal`` lets them in: checked
when stored sends are answered and every millisecond) or ``HOLD_MAX_S`` passed; what the client sends meanwhile
waits in its socket (bounded by the kernel's buffers), then is read and either stored or refused. A refusal still
goes out at once; only the next read of that connection waits, by at most ``HOLD_MAX_S``. A connection whose sends
were refused for their own wait (they arrived ``waitTimeMillsInSendQueue`` ago) is not held: what follows them in
its socket is younger, and holding it would only make that older.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from brokerd.processors.admission import SendAdmission

HOLD_MAX_S = 0.002
POLL_S = 0.001


class Holdable(Protocol):
    def hold_reading(self) -> None: ...

    def release_reading(self) -> None: ...


class FlowControl:
    def __init__(self, admission: SendAdmission) -> None:
        self.admission = admission
        self._held: dict[Holdable, float] = {}  # connection -> when it is read again at the latest
        self._timer: asyncio.TimerHandle | None = None
        self.holds = 0  # connections held so far (observability, tests)

    def refused(self, conn: Holdable) -> None:
        """``conn``'s sends were refused (``admission.refusal``): held when for the broker's state."""
        if self.admission.holds:
            self.hold(conn)

    def hold(self, conn: Holdable) -> None:
        """``conn`` is not read until the broker takes sends again (or HOLD_MAX_S)."""
        if conn in self._held:
            return
        conn.hold_reading()
        self._held[conn] = time.monotonic() + HOLD_MAX_S
        self.holds += 1
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(POLL_S, self._tick)

    def poke(self) -> None:
        """Stored sends were answered: the held connections are read again once sends are taken."""
        if self._held and self.admission.state_refusal(time.monotonic()) is None:
            self._release(lambda _deadline: True)

    def _tick(self) -> None:
        self._timer = None
        now = time.monotonic()
        taking = self.admission.state_refusal(now) is None
        self._release(lambda deadline: taking or deadline <= now)
        if self._held:
            self._timer = asyncio.get_running_loop().call_later(POLL_S, self._tick)

    def _release(self, due: Callable[[float], bool]) -> None:
        for conn, deadline in list(self._held.items()):
            if due(deadline):
                del self._held[conn]
                conn.release_reading()
