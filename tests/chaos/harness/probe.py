"""Making a fault window's precondition happen: sends driven at what a fault isolates or slows while it is in force.

A check about a fault's window means nothing when the window saw no send: "the minority side never acknowledges"
needs sends to the minority side made after the fault was in force, "a delay window's latency" needs sends
acknowledged inside it. The workload's senders cannot promise that: each waits for its previous send, and all of
them may be stuck in sends begun just before the fault. So while a fault holds, the nemesis drives probe sends:

* a network cut with a minority side (``ha_checks.minority_side``): one send at a time to every broker on that
  side (its masters must not acknowledge; its slaves refuse), until the window ends;
* a delay: sends to each broker set's master (as the routes name it) until one is acknowledged inside the window.

Probes are recorded like the workload's sends (producer ``probe<n>``, one message each, so no queue-order rule
spans two probes); every checker sees them. ``saw_traffic`` tells the nemesis whether the window got what its
checks need; a window that did not is run again, so a run never passes or fails by chance.

Likewise a fault is charged with the longest stretch without an acknowledged send from when it was in force to
when the deployment was ready again; if the next fault started before the sets' traffic resumed, that stretch
would run on into the next fault's. ``traffic_resumed`` makes the nemesis wait for an acknowledged send of every
set after a recovery before the next fault (on a loaded machine a recovery ends later than its schedule planned).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from .ha_checks import category, minority_side
from .history import FaultEvent, History, Send

PAUSE_S = 0.1  # between two probes of one target (a refusal comes back at once)
RESUME_TIMEOUT_S = 10.0  # how long the next fault waits for the sets' traffic to resume after a recovery
LOOKBACK_S = 5.0  # sends made this long before a recovery may still be answered after it


class ProbeSender(Protocol):
    def now(self) -> float: ...

    async def master_addr(self, bset: str) -> str | None: ...

    async def probe_send(self, addr: str, bset: str, timeout: float) -> Send: ...


class WindowProbe:
    def __init__(self, sender: ProbeSender, h: History) -> None:
        self.sender = sender
        self.h = h

    def minority(self, ev: FaultEvent) -> list[tuple[str, str]]:
        """(address, broker set) of every broker on the minority side of a cut."""
        if not ev.cut:
            return []
        return [(addr, bset) for bset in sorted({b for _, b in self.h.brokers.values()})
                for addr in minority_side(self.h, ev, bset)]  # fmt: skip

    def needed(self, ev: FaultEvent) -> bool:
        return bool(self.minority(ev)) or category(ev.kind) == "delay"

    async def drive(self, ev: FaultEvent, until: float, started: asyncio.Event) -> None:
        """Probe until ``until`` (run seconds); ``started`` is set once the first probe has been sent."""
        if self.minority(ev):
            jobs = [self._at_minority(addr, bset, until, started) for addr, bset in self.minority(ev)]
        elif category(ev.kind) == "delay":
            jobs = [self._until_acked(bset, until, started) for bset in sorted({b for _, b in self.h.brokers.values()})]
        else:
            started.set()
            return
        await asyncio.gather(*jobs)

    async def _at_minority(self, addr: str, bset: str, until: float, started: asyncio.Event) -> None:
        while self.sender.now() < until:
            probe = self.sender.probe_send(addr, bset, max(0.2, until - self.sender.now()))
            started.set()
            await self._settle(probe)

    async def _until_acked(self, bset: str, until: float, started: asyncio.Event) -> None:
        while self.sender.now() < until:
            addr = await self.sender.master_addr(bset)
            if addr is None:
                await asyncio.sleep(PAUSE_S)  # sleep-ok: no route yet, asked again
                continue
            probe = self.sender.probe_send(addr, bset, max(0.2, until - self.sender.now()))
            started.set()
            if (await self._settle(probe)).ok:
                return

    async def _settle(self, probe: Any) -> Send:
        snd: Send = await probe
        if not snd.ok:
            await asyncio.sleep(PAUSE_S)  # sleep-ok: probe pacing
        return snd

    async def traffic_resumed(self, since: float, timeout: float = RESUME_TIMEOUT_S) -> bool:
        """Wait until every broker set has a send acknowledged after ``since`` (the previous fault's recovery), so
        that the next fault's window does not start inside the previous one's unavailability (the stretch without
        an acknowledged send that a fault is charged with ends at that send). False after ``timeout``."""
        want = {b for _, b in self.h.brokers.values()}
        deadline = self.sender.now() + timeout
        while not want <= self._acked_since(since):
            if self.sender.now() > deadline:
                return False
            await asyncio.sleep(0.02)  # sleep-ok: polling the recorded history with a deadline
        return True

    def _acked_since(self, since: float) -> set[str]:
        out: set[str] = set()
        for x in reversed(self.h.sends):  # newest first; sends are recorded in the order they are made
            if x.call < since - LOOKBACK_S:
                break
            if x.ok and x.ret is not None and x.ret > since:
                out.add(x.bset)
        return out

    def saw_traffic(self, ev: FaultEvent) -> bool:
        """The window [applied, healing] got what its checks need (see the module docstring)."""
        if ev.applied is None or ev.healing is None:
            return True
        lo, hi = ev.applied, ev.healing
        minority = {addr for addr, _ in self.minority(ev)}
        if minority:
            return any(x.broker in minority and lo <= x.call <= hi for x in self.h.sends)
        if category(ev.kind) == "delay":
            bsets = {b for _, b in self.h.brokers.values()}
            acked = {x.bset for x in self.h.sends if x.ok and lo <= x.call and x.ret is not None and x.ret <= hi}
            return bsets <= acked
        return True
