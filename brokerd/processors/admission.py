"""Overload shedding for sends (RocketMQ's BrokerFastFailure), sans-I/O: the caller passes the clock.

RocketMQ queues sends for its send threads and answers SYSTEM_BUSY (2) at once to those that cannot be served
in time, so its producers retry them on another broker. Here a send is stored as soon as the event loop gets to
it; it waits before that in its socket and in the loop (the loop busy with other work, a paused connection), and
after that for its put acknowledgement (the SYNC_FLUSH group commit, replica acks). Every time is counted from the
send's arrival: when its bytes became readable on the broker's socket (``brokerd/remoting/arrival.py``). A send
is answered SYSTEM_BUSY and not stored when, as the broker gets to it:

* ``TIMEOUT_CLEAN_QUEUE`` (counted as ``timeout_clean_queue``): it arrived ``waitTimeMillsInSendQueue`` or more
  ago, whatever kept it waiting (its client would rather retry elsewhere than wait longer);
* ``TIMEOUT_CLEAN_QUEUE`` (counted as ``flush_clean_queue``): with SYNC_FLUSH, the oldest stored send still
  waiting for the disk flush arrived ``waitTimeMillsInSendQueue`` or more ago (a new one would wait about as
  long: the disk is the bottleneck). Waits for replica acks do not count: replication keeps its own timeouts and
  answers (FLUSH_SLAVE_TIMEOUT, ...);
* ``OVERLOAD``: ``sendThreadPoolQueueCapacity`` stored sends are unanswered (the queue is full);
* ``PCBUSY_CLEAN_QUEUE``: a put held the store longer than ``osPageCacheBusyTimeOutMills`` (the page cache is
  busy); sends are refused for ``waitTimeMillsInSendQueue`` after it.

The first reason is about the send, the others about the broker (``state_refusal``: a send arriving now would be
refused too; ``flow_control.py`` stops reading a connection refused for them for a while). The remarks are
RocketMQ's. Both the Python send processor and the C send lane (which refuses in C with the remark it is given)
go through one ``SendAdmission`` per broker; refusals are counted per reason (``refused``, on /metrics). The
sends it lets in are bounded, and so is what they hold in memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from brokerd.broker_config import BrokerConfig

TIMEOUT = "timeout_clean_queue"
FLUSH = "flush_clean_queue"
OVERLOAD = "overload"
PCBUSY = "pcbusy_clean_queue"
REASONS = (TIMEOUT, FLUSH, OVERLOAD, PCBUSY)
OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"


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
    arrived: float
    n: int  # 0 once answered
    end: int


def _timeout(waited_ms: int, pending: int) -> str:
    return (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {waited_ms}ms, "
            f"size of queue: {pending}")


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
        self.reason = ""  # the reason of the last refusal answered (``refusal``), for ``refuse`` and ``holds``
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)

    def _config(self) -> AdmissionConfig:
        source = self._broker_cfg()
        if source is not self._source:
            self._source, self.cfg = source, AdmissionConfig.of(source)
        return self.cfg

    def refusal(self, now: float, arrived: float) -> str | None:
        """The SYSTEM_BUSY remark a send that arrived at ``arrived`` gets at ``now``, or None when it may be stored
        (not counted: ``refuse`` counts)."""
        cfg = self._config()
        if not cfg.enabled:
            return None
        waited = int((now - arrived) * 1000)
        if waited >= cfg.wait_ms:
            self.reason = TIMEOUT
            return _timeout(waited, self.pending)
        return self.state_refusal(now)

    def state_refusal(self, now: float) -> str | None:
        """The refusal a send arriving at ``now`` gets: the broker's state alone (see the module docstring)."""
        cfg = self._config()
        if not cfg.enabled:
            return None
        if self.pending >= cfg.capacity:
            self.reason = OVERLOAD
            return OVERLOAD_REMARK
        q = self._unflushed
        if q:
            flushed = self._flushed()
            while q and (q[0].n == 0 or flushed is None or q[0].end <= flushed):
                q.popleft()
        if q:
            waited = int((now - q[0].arrived) * 1000)
            if waited >= cfg.wait_ms:
                self.reason = FLUSH
                return _timeout(waited, self.pending)
        if now < self._busy_until:
            self.reason = PCBUSY
            return (f"[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{self._busy_ms}ms, size of queue: {self.pending}")
        return None

    def stale_after(self) -> float:
        """Seconds after its arrival a send is refused (0: never); the remoting layer handles a kept read this old
        at once (``brokerd/remoting/turns.py``)."""
        cfg = self._config()
        return cfg.wait_ms / 1000.0 if cfg.enabled else 0.0

    def refuse(self, n: int = 1) -> None:
        """Count ``n`` sends refused with the last remark ``refusal`` returned."""
        self.refused[self.reason] += n

    @property
    def holds(self) -> bool:
        """The last refusal is about the broker, not the send: a send arriving now would be refused too."""
        return self.reason != TIMEOUT

    def waiting(self, n: int, arrived: float, end: int) -> Waiting:
        """``n`` sends that arrived at ``arrived`` were stored (their records end at log offset ``end``) and wait
        for their acknowledgement; hand the returned entry to ``answered`` when they are answered."""
        entry = Waiting(arrived, n, end)
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
