"""Overload shedding for sends (RocketMQ's BrokerFastFailure), sans-I/O: the caller passes the clock.

RocketMQ queues sends for its send threads and answers SYSTEM_BUSY (2) at once to those that cannot be served
in time. This broker stores a send as soon as its frame is read off the socket; what queues is the answer: a
stored send waits for its put acknowledgement (the SYNC_FLUSH group commit, replica acks). So the broker's send
queue here is its unanswered stored sends, and a new send is refused before it is stored when

* ``TIMEOUT_CLEAN_QUEUE``: with SYNC_FLUSH, the oldest send still waiting for the disk flush has waited
  ``waitTimeMillsInSendQueue`` or more (measured from when its frame was read; a new one would wait about as
  long: the disk is the bottleneck). Waits for replica acks do not count: replication keeps its own timeouts
  and answers (FLUSH_SLAVE_TIMEOUT, ...);
* ``OVERLOAD``: ``sendThreadPoolQueueCapacity`` sends are unanswered (the queue is full);
* ``PCBUSY_CLEAN_QUEUE``: a put held the store longer than ``osPageCacheBusyTimeOutMills`` (the page cache is
  busy); sends are refused for ``waitTimeMillsInSendQueue`` after it.

The remarks are RocketMQ's. Both the Python send processor and the C send lane (which declines while this
refuses, so the Python processor answers) go through one ``SendAdmission`` per broker; refusals are counted per
reason (``refused``, on /metrics). The sends it lets in are bounded, and so is what they hold in memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from brokerd.broker_config import BrokerConfig

TIMEOUT = "timeout_clean_queue"
OVERLOAD = "overload"
PCBUSY = "pcbusy_clean_queue"
REASONS = (TIMEOUT, OVERLOAD, PCBUSY)


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    enabled: bool = True
    wait_ms: int = 200
    capacity: int = 10_000
    page_cache_busy_ms: int = 1000


    @classmethod
    def of(cls, c: BrokerConfig) -> AdmissionConfig:
        return cls(c.broker_fast_failure_enable, c.wait_time_mills_in_send_queue, c.send_thread_pool_queue_capacity,
                   c.os_page_cache_busy_time_out_mills)


@dataclass(slots=True)
class Waiting:
    read_at: float
    n: int  # 0 once answered
    end: int


class SendAdmission:
    """``broker_cfg`` returns the broker's current config (a live change takes effect on the next send)."""

    def __init__(self, broker_cfg: Callable[[], BrokerConfig], flushed: Callable[[], int | None]) -> None:
        self._broker_cfg = broker_cfg
        self._flushed = flushed  # the log offset durable so far with SYNC_FLUSH; None: the store flushes async
        self._source: BrokerConfig | None = None
        self.cfg = AdmissionConfig()
        self.pending = 0  # unanswered stored sends
        self._unflushed: deque[Waiting] = deque()  # with SYNC_FLUSH: stored sends waiting for the flush, oldest first
        self._busy_until = 0.0
        self._busy_ms = 0
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)

    def refusal(self, now: float) -> str | None:
        """The SYSTEM_BUSY remark a send read at ``now`` gets, or None when it may be stored (not counted)."""
        source = self._broker_cfg()
        if source is not self._source:
            self._source, self.cfg = source, AdmissionConfig.of(source)
        cfg = self.cfg
        if not cfg.enabled:
            return None
        if self.pending >= cfg.capacity:
            return "[OVERLOAD]system busy, start flow control for a while"
        q = self._unflushed
        if q:
            flushed = self._flushed()
            while q and (q[0].n == 0 or flushed is None or q[0].end <= flushed):
                q.popleft()
        if q:
            waited = int((now - q[0].read_at) * 1000)
            if waited >= cfg.wait_ms:
                return (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                        f"{waited}ms, size of queue: {self.pending}")
        if now < self._busy_until:
            return (f"[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{self._busy_ms}ms, size of queue: {self.pending}")
        return None

    def refuse(self, remark: str, n: int = 1) -> None:
        """Count ``n`` refusals with ``remark`` (from ``refusal``) under its reason."""
        reason = TIMEOUT if remark.startswith("[TIMEOUT") else PCBUSY if remark.startswith("[PCBUSY") else OVERLOAD
        self.refused[reason] += n

    def waiting(self, n: int, read_at: float, end: int) -> Waiting:
        """``n`` sends read at ``read_at`` were stored (their records end at log offset ``end``) and wait for
        their acknowledgement; hand the returned entry to ``answered`` when they are answered."""
        entry = Waiting(read_at, n, end)
        if self._flushed() is not None:
            self._unflushed.append(entry)
        self.pending += n
        return entry

    def answered(self, entry: Waiting) -> None:
        self.pending -= entry.n
        entry.n = 0

    def put_took(self, seconds: float, now: float) -> None:
        """A put (one message, or one run of the C lane) held the store for ``seconds``."""
        ms = int(seconds * 1000)
        if ms > self.cfg.page_cache_busy_ms:
            self._busy_ms = ms
            self._busy_until = now + self.cfg.wait_ms / 1000.0
