"""Broker liveness: leader-local soft state fed by BROKER_HEARTBEAT (904), never replicated.

Incremental bookkeeping: a heartbeat from a live broker is an O(1) field update. Each live broker sits in one
slot of a hashed timer wheel at its *scheduled* deadline; when that slot comes due the broker is either dead
(reported) or re-slotted at its real deadline. So a broker costs about one wheel operation per timeout period,
and `expire()` costs what is due, not the cluster size. Legacy mode instead uses `scan_all()`, the old O(n) scan.

Pure code: time comes from an injected clock in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from controller.statemachine.events import BrokerLiveness

K = TypeVar("K", bound=Hashable)
BrokerKey = tuple[str, int]  # (brokerName, brokerId)
DEFAULT_PRIORITY = 2**31 - 1


class TimerWheel(Generic[K]):
    """Hashed timer wheel with `tick_ms` slots. `schedule` returns the slot; `advance` pops due (slot, key)s."""

    def __init__(self, tick_ms: int, now_ms: float) -> None:
        if tick_ms <= 0:
            raise ValueError("tick_ms must be positive")
        self.tick_ms = tick_ms
        self.cursor = int(now_ms // tick_ms)  # next slot to process
        self.slots: dict[int, set[K]] = {}

    def schedule(self, key: K, deadline_ms: float) -> int:
        slot = max(-(-int(deadline_ms) // self.tick_ms), self.cursor)  # ceil, never in the past
        self.slots.setdefault(slot, set()).add(key)
        return slot

    def cancel(self, key: K, slot: int) -> None:
        bucket = self.slots.get(slot)
        if bucket is not None:
            bucket.discard(key)
            if not bucket:
                del self.slots[slot]

    def advance(self, now_ms: float) -> Iterator[tuple[int, K]]:
        end = int(now_ms // self.tick_ms)
        if end < self.cursor:
            return
        if end - self.cursor > 4 * len(self.slots):  # long gap (idle or a clock jump): visit only used slots
            due = sorted(s for s in self.slots if s <= end)
        else:
            due = [s for s in range(self.cursor, end + 1) if s in self.slots]
        self.cursor = end + 1
        for s in due:
            for key in self.slots.pop(s):
                yield s, key

    def __len__(self) -> int:
        return sum(len(b) for b in self.slots.values())


@dataclass(slots=True)
class LiveInfo:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    last_seen_ms: float
    timeout_ms: int
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    priority: int = DEFAULT_PRIORITY
    alive: bool = True
    slot: int | None = None  # timer-wheel slot while alive (incremental mode)

    @property
    def key(self) -> BrokerKey:
        return (self.broker_name, self.broker_id)


class LivenessTracker:
    """Implements `LivenessView` for decide, plus heartbeat intake and expiry."""

    def __init__(self, clock: Callable[[], float], timeout_ms: int, tick_ms: int = 50, incremental: bool = True) -> None:
        self.clock = clock
        self.timeout_ms = timeout_ms
        self.incremental = incremental
        self.wheel: TimerWheel[BrokerKey] = TimerWheel(tick_ms, clock())
        self.by_set: dict[str, dict[int, LiveInfo]] = {}
        self.live_count = 0

    # -- intake ----------------------------------------------------------------------------------------

    def heartbeat(self, cluster: str, broker_name: str, broker_id: int, address: str, epoch: int, max_offset: int,
                  confirm_offset: int, priority: int, timeout_ms: int | None = None) -> bool:
        """Record a heartbeat. Returns True when the broker was not alive before (new or revived)."""
        now = self.clock()
        per_set = self.by_set.get(broker_name)
        if per_set is None:
            per_set = self.by_set[broker_name] = {}
        info = per_set.get(broker_id)
        timeout = timeout_ms if timeout_ms and timeout_ms > 0 else self.timeout_ms
        if info is not None and info.alive and now - info.last_seen_ms > info.timeout_ms:
            # past its deadline but not yet expired by the wheel: is_alive() already said dead (elections may have
            # acted on it), so this heartbeat is a revival, not a refresh
            self._die(info)
        if info is None or not info.alive:
            # new or revived: start from this heartbeat's data, as RocketMQ re-creates the live entry
            info = LiveInfo(cluster, broker_name, broker_id, address, now, timeout, epoch, max_offset,
                            confirm_offset, priority)
            per_set[broker_id] = info
            self.live_count += 1
            if self.incremental:
                info.slot = self.wheel.schedule(info.key, now + timeout)
            return True
        info.last_seen_ms = now
        info.timeout_ms = timeout
        info.address = address
        info.priority = priority
        if epoch > info.epoch or (epoch == info.epoch and max_offset > info.max_offset):
            info.epoch, info.max_offset, info.confirm_offset = epoch, max_offset, confirm_offset
        return False

    def _die(self, info: LiveInfo) -> None:
        info.alive = False
        self.live_count -= 1
        if info.slot is not None:
            self.wheel.cancel(info.key, info.slot)
            info.slot = None

    def mark_dead(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        """A closed channel counts as inactive immediately. Returns the info if it was alive."""
        info = self.by_set.get(broker_name, {}).get(broker_id)
        if info is None or not info.alive:
            return None
        self._die(info)
        return info

    def forget(self, broker_name: str, broker_ids: tuple[int, ...] | None = None) -> None:
        per_set = self.by_set.get(broker_name)
        if per_set is None:
            return
        for bid in list(per_set) if broker_ids is None else broker_ids:
            info = per_set.pop(bid, None)
            if info is not None and info.alive:
                self._die(info)
        if not per_set:
            del self.by_set[broker_name]

    # -- expiry ----------------------------------------------------------------------------------------

    def expire(self) -> list[LiveInfo]:
        """Incremental: brokers whose heartbeats stopped, found through the wheel slots that came due."""
        now = self.clock()
        dead: list[LiveInfo] = []
        for slot, (name, bid) in self.wheel.advance(now):
            info = self.by_set.get(name, {}).get(bid)
            if info is None or info.slot != slot:
                continue
            info.slot = None
            deadline = info.last_seen_ms + info.timeout_ms
            if deadline >= now:  # dead only once strictly past the timeout, as is_alive and scan_all judge
                info.slot = self.wheel.schedule(info.key, deadline)
            else:
                self._die(info)
                dead.append(info)
        return dead

    def scan_all(self) -> list[LiveInfo]:
        """Legacy: visit every known broker (RocketMQ's scanNotActiveBroker)."""
        now = self.clock()
        dead = [i for per_set in self.by_set.values() for i in per_set.values()
                if i.alive and now - i.last_seen_ms > i.timeout_ms]
        for info in dead:
            self._die(info)
        return dead

    # -- LivenessView ------------------------------------------------------------------------------------

    def get(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        return self.by_set.get(broker_name, {}).get(broker_id)

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        info = self.by_set.get(broker_name, {}).get(broker_id)
        return info is not None and info.alive and self.clock() - info.last_seen_ms <= info.timeout_ms

    def liveness(self, broker_name: str, broker_id: int) -> BrokerLiveness:
        info = self.by_set.get(broker_name, {}).get(broker_id)
        if info is None:
            return BrokerLiveness(broker_id, False)
        return BrokerLiveness(broker_id, self.is_alive(broker_name, broker_id), info.epoch, info.max_offset,
                              info.confirm_offset, info.priority)

    def alive_ids(self, broker_name: str) -> list[int]:
        return sorted(bid for bid in self.by_set.get(broker_name, {}) if self.is_alive(broker_name, bid))
