"""Half messages the endpoint can end (TransactionDataManager): what END_TRANSACTION needs of a transactional
send or of a broker's check-back (broker, queue offset in the half topic, commit-log offset), by producer group
and transaction id; entries expire. Pure."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from brokerd.proxy.route import TopicRoute


@dataclass(frozen=True, slots=True)
class TransactionData:
    broker: str  # broker name (or address when the name was not known)
    topic: str
    tran_state_table_offset: int
    commit_log_offset: int
    expire_at: float


class TransactionTable:
    def __init__(self, expire_ms: int = 30_000, max_per_key: int = 15,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.expire_s = expire_ms / 1000
        self.max_per_key = max_per_key
        self.clock = clock
        self._data: dict[tuple[str, str], list[TransactionData]] = {}

    def add(self, group: str, transaction_id: str, broker: str, topic: str, tran_state_table_offset: int,
            commit_log_offset: int) -> None:
        items = self._data.setdefault((group, transaction_id), [])
        items.append(TransactionData(broker, topic, tran_state_table_offset, commit_log_offset,
                                     self.clock() + self.expire_s))
        if len(items) > self.max_per_key:
            del items[0]
        if len(self._data) > 100_000:
            self.clean()

    def poll(self, group: str, transaction_id: str) -> TransactionData | None:
        """The newest unexpired entry (removed), as pollNoExpireTransactionData."""
        items = self._data.get((group, transaction_id))
        now = self.clock()
        while items:
            d = items.pop()
            if d.expire_at >= now:
                if not items:
                    del self._data[(group, transaction_id)]
                return d
        self._data.pop((group, transaction_id), None)
        return None

    def clean(self) -> None:
        now = self.clock()
        for key in [k for k, v in self._data.items() if all(d.expire_at < now for d in v)]:
            del self._data[key]

    def __len__(self) -> int:
        return len(self._data)

    @staticmethod
    def broker_of(route: TopicRoute | None, addr: str) -> str:
        """The name of the broker at ``addr`` (from the topic's route), else the address itself."""
        if route is not None:
            for b in route.brokers.values():
                if addr in b.addrs.values():
                    return b.name
        return addr
