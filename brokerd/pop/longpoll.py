"""Long polling of POP and NOTIFICATION requests: parked per (topic, group, queue id) until a message arrives,
their FIFO queue unblocks, or their ``bornTime + pollTime`` deadline passes (PopLongPollingService).

The store's dispatch listener reports each arrival (with the confirm hold: once replicated); an arrival in a
topic wakes, for every group with parked requests on it, one request parked on all queues (-1), else one parked on
that queue — as RocketMQ does; a woken request that finds messages and more are left wakes the next one. An
arrival in a group's POP retry topic wakes that group's requests of the topic. Woken requests run at the loop's
next turn; one that finds nothing parks again until its deadline, then is answered as timed out.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection

PollKey = tuple[str, str, int]  # topic, group, queue id (-1: all queues)
Runner = Callable[[bool], RemotingCommand | None]
"""``run(final)``: the request's answer, or None when it found nothing and may park again; with ``final`` (its
deadline passed) it must answer."""


@dataclass(eq=False, slots=True)
class Parked:
    conn: Connection
    key: PollKey
    deadline: float  # loop time
    run: Runner
    fut: asyncio.Future[RemotingCommand | None]
    timer: asyncio.TimerHandle | None = None


class LongPolling:
    def __init__(self, max_total: Callable[[], int], max_per_key: Callable[[], int]) -> None:
        self.max_total = max_total
        self.max_per_key = max_per_key
        self.parked: dict[PollKey, deque[Parked]] = {}
        self.groups: dict[str, set[str]] = {}  # topic -> groups with requests parked on it
        self.retry_of: dict[str, tuple[str, str]] = {}  # POP retry topic -> (topic, group)
        self._per_group: dict[tuple[str, str], int] = {}  # (topic, group) -> requests parked
        self.total = 0
        self._woken: list[Parked] = []

    # ------------------------------------------------------------------ parking

    def park(self, conn: Connection, key: PollKey, remaining_ms: int, run: Runner,
             retry_topic: str | None = None) -> asyncio.Future[RemotingCommand | None] | None:  # fmt: skip
        """Park a request for up to ``remaining_ms``; None when the broker's or the key's limit is reached
        (POLLING_FULL)."""
        q = self.parked.get(key)
        if self.total >= self.max_total() or (q is not None and len(q) >= self.max_per_key()):
            return None
        loop = conn.closed.get_loop()
        p = Parked(conn, key, loop.time() + remaining_ms / 1000.0, run, loop.create_future())
        self._add(p)
        if retry_topic is not None:
            self.retry_of[retry_topic] = (key[0], key[1])
        return p.fut

    def _add(self, p: Parked) -> None:
        self.parked.setdefault(p.key, deque()).append(p)
        self.groups.setdefault(p.key[0], set()).add(p.key[1])
        tg = (p.key[0], p.key[1])
        self._per_group[tg] = self._per_group.get(tg, 0) + 1
        self.total += 1
        loop = p.fut.get_loop()
        p.timer = loop.call_at(p.deadline, self._expire, p)

    def _remove(self, p: Parked) -> bool:
        q = self.parked.get(p.key)
        if q is None or p not in q:
            return False
        q.remove(p)
        self.total -= 1
        if not q:
            del self.parked[p.key]
        topic, group, _ = p.key
        left = self._per_group.get((topic, group), 1) - 1
        if left > 0:
            self._per_group[(topic, group)] = left
        else:
            self._per_group.pop((topic, group), None)
            groups = self.groups.get(topic)
            if groups is not None:
                groups.discard(group)
                if not groups:
                    del self.groups[topic]
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        return True

    def count(self, key: PollKey) -> int:
        q = self.parked.get(key)
        return len(q) if q else 0

    # ------------------------------------------------------------------ waking

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """The store's dispatch listener (hot path: two dict lookups when nobody waits)."""
        groups = self.groups.get(topic)
        if groups:
            for g in tuple(groups):
                self.wake_one(topic, g, queue_id)
        owner = self.retry_of.get(topic)
        if owner is not None:
            self.wake_one(owner[0], owner[1], -1, any_queue=True)

    def wake_one(self, topic: str, group: str, queue_id: int, *, any_queue: bool = False) -> bool:
        """Wake one request of ``group`` on ``topic``: parked on all queues first, else on ``queue_id`` (or on
        any queue with ``any_queue``)."""
        keys = [(topic, group, -1)]
        if any_queue:
            keys += [k for k in self.parked if k[0] == topic and k[1] == group and k[2] >= 0]
        elif queue_id >= 0:
            keys.append((topic, group, queue_id))
        for key in keys:
            q = self.parked.get(key)
            while q:
                p = q[0]
                self._remove(p)
                if p.conn.is_open and not p.fut.done():
                    self._wake(p)
                    return True
                if not p.fut.done():
                    p.fut.set_result(None)
                q = self.parked.get(key)
        return False

    def _wake(self, p: Parked) -> None:
        if not self._woken:
            p.fut.get_loop().call_soon(self._run_woken)
        self._woken.append(p)

    def _run_woken(self) -> None:
        woken, self._woken = self._woken, []
        loop = asyncio.get_running_loop()
        for p in woken:
            final = loop.time() >= p.deadline
            self._settle(p, final)

    def _settle(self, p: Parked, final: bool) -> None:
        if p.fut.done():
            return
        if not p.conn.is_open:
            p.fut.set_result(None)
            return
        try:
            res = p.run(final)
        except Exception as e:  # noqa: BLE001 - answered as an error by the connection
            p.fut.set_exception(e)
            return
        if res is not None:
            p.fut.set_result(res)
        elif final:
            p.fut.set_result(None)
        else:
            self._add(p)  # nothing for it after all: back in line until its deadline

    def _expire(self, p: Parked) -> None:
        p.timer = None
        if self._remove(p):
            self._settle(p, True)

    def wake_all(self) -> None:
        """Answer every parked request now (role change, shutdown)."""
        for q in list(self.parked.values()):
            for p in list(q):
                self._remove(p)
                self._settle(p, True)
