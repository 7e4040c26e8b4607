"""Broker statistics as RocketMQ keeps them, sans-I/O (the caller passes the clock): the stats items of its
BrokerStatsManager (VIEW_BROKER_STATS_DATA, ``statsAll``, rocketmq-exporter's rates) and the figures of its
StoreStatsService (GET_BROKER_RUNTIME_INFO: putTps, getFoundTps, putMessageDistributeTime, ...).

Where the counts come from, cheap on the hot path (the C send lane stores most sends and calls no Python per
message):

* puts (``TOPIC_PUT_NUMS`` / ``TOPIC_PUT_SIZE`` by topic, ``BROKER_PUT_NUMS`` by cluster name) are read from the
  consume queues at each sample, not counted on the send path: a queue's entries added since the previous sample
  are its puts and the entries' size fields their bytes (``QueuePutCounter``). Every message stored into a
  topic's queues counts, whichever path stored it (a send, the C lane, a send-back, a delayed message coming
  due, a committed transaction), as RocketMQ 5 counts them; nothing is counted while the broker is a slave;
* gets (``GROUP_GET_NUMS`` / ``GROUP_GET_SIZE`` by ``topic@group``, ``BROKER_GET_NUMS``): one ``on_get`` per pull;
* send-backs (``SNDBCK_PUT_NUMS`` by ``topic@group``, the topic consumed): one ``on_send_back`` per stored one;
* put times (``putMessageDistributeTime``, ``putMessageEntireTimeMax``, ``putLatency99/999``): one ``put_took``
  per store append (a put of one message or batch, or one run of the C lane: the sends of one socket read,
  stored with one write).

Sampling follows RocketMQ's ``StatsItem``: every ``interval_ms`` (10 s) a snapshot (time, value, times) goes into
the minute list (7 kept: one minute), every 10 minutes into the hour list (7), every hour into the day list (25).
A window's figures are its last snapshot minus its first: ``sum``, ``tps`` (the sum per second of the time
between them) and ``avgpt`` (the sum per call). An item created between samples starts from zero at the previous
sample, so a burst on a new topic shows in its rate. The store figures are sampled every second (601 kept):
``putTps`` etc. over the last 10, 60 and 600 seconds (fewer while the broker is younger).
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import structlog

log = structlog.get_logger("stats")

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS, BROKER_PUT_NUMS,
               BROKER_GET_NUMS)
TOPIC_KEYED = (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE)
TOPIC_GROUP_KEYED = (GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS)
SEPARATOR = "@"

MINUTE, HOUR, DAY = 0, 1, 2
KEEP = (7, 7, 25)  # snapshots per window (RocketMQ's csListMinute / csListHour / csListDay)
HOUR_SAMPLE_MS = 600_000
DAY_SAMPLE_MS = 3_600_000

STORE_SAMPLES = 601  # 1 s store samples kept: 600 s of rates
DISTRIBUTE_DESC = ("<=0ms", "0~10ms", "10~50ms", "50~100ms", "100~200ms", "200~500ms", "500ms~1s", "1~2s", "2~3s",
                   "3~4s", "4~5s", "5~10s", "10s~")
_DISTRIBUTE_UPPER = (0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10_000)  # bucket i: value < upper[i]


def _latency_bounds() -> tuple[int, ...]:
    """RocketMQ's put-latency buckets (ms, upper bounds): 1..20 by 1, ..50 by 2, ..100 by 5, ..200 by 10,
    ..500 by 50, ..1000 by 100, ..10000 by 1000; then everything above."""
    out, at = [], 0
    for step, times in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
        for _ in range(times):
            at += step
            out.append(at)
    return tuple(out)


LATENCY_BOUNDS = _latency_bounds()
_TPS_COLUMNS = {"put": 1, "found": 2, "miss": 3, "get": 4}
_WORD = next(t for t in "IL" if array(t).itemsize == 4)  # an unsigned 32-bit array type code


class StatsWindow(NamedTuple):
    """One window of a stats item (RocketMQ's StatsSnapshot)."""

    sum: int
    tps: float
    avgpt: float
    times: int


_Snap = tuple[int, int, int]  # (time ms, value, times)


def window_of(snaps: deque[_Snap]) -> StatsWindow:
    if len(snaps) < 2:
        return StatsWindow(0, 0.0, 0.0, 0)
    t0, v0, n0 = snaps[0]
    t1, v1, n1 = snaps[-1]
    total, times, span = v1 - v0, n1 - n0, t1 - t0
    return StatsWindow(total, total * 1000.0 / span if span > 0 else 0.0, total / times if times > 0 else 0.0, times)


class StatsItem:
    """A counter (value, calls) and its minute / hour / day snapshot lists."""

    __slots__ = ("value", "times", "snaps")

    def __init__(self, starts: list[int | None]) -> None:
        self.value = 0
        self.times = 0
        self.snaps: tuple[deque[_Snap], ...] = tuple(deque(maxlen=k) for k in KEEP)
        for snaps, start in zip(self.snaps, starts, strict=True):
            if start is not None:
                snaps.append((start, 0, 0))

    def window(self, which: int) -> StatsWindow:
        return window_of(self.snaps[which])

    def to_json(self) -> dict[str, dict[str, float]]:
        """VIEW_BROKER_STATS_DATA's body (RocketMQ's BrokerStatsData)."""
        out = {}
        for name, which in (("statsMinute", MINUTE), ("statsHour", HOUR), ("statsDay", DAY)):
            w = self.window(which)
            out[name] = {"sum": w.sum, "tps": w.tps, "avgpt": w.avgpt}
        return out


class BrokerStatsManager:
    """The broker's stats items, by stats name and key (RocketMQ's names: ``TOPIC_PUT_NUMS`` by topic,
    ``GROUP_GET_NUMS`` by ``topic@group``, ``BROKER_PUT_NUMS`` by cluster name, ...), and its store figures."""

    def __init__(self, cluster: str = "DefaultCluster", *, boot_ms: int | None = None,
                 interval_ms: int = 10_000) -> None:
        self.cluster = cluster
        self.boot_ms = boot_ms if boot_ms is not None else int(time.time() * 1000)
        self.interval_ms = interval_ms
        self.sets: dict[str, dict[str, StatsItem]] = {name: {} for name in STATS_NAMES}
        self.last_sample: list[int | None] = [None, None, None]  # of each window
        self.store = StoreStats(self.boot_ms, minute_ms=6 * interval_ms)
        self.day_marks = DailyTotals()

    # -- counting ------------------------------------------------------------------------------------------

    def inc(self, name: str, key: str, value: int, times: int = 1) -> None:
        items = self.sets[name]
        item = items.get(key)
        if item is None:
            item = items[key] = StatsItem(self.last_sample)
        item.value += value
        item.times += times

    def on_puts(self, topic: str, msgs: int, size: int) -> None:
        """``msgs`` messages of ``size`` bytes were stored to ``topic`` (``QueuePutCounter``)."""
        self.inc(TOPIC_PUT_NUMS, topic, msgs, msgs)
        self.inc(TOPIC_PUT_SIZE, topic, size, msgs)
        self.inc(BROKER_PUT_NUMS, self.cluster, msgs, msgs)

    def on_get(self, group: str, topic: str, msgs: int, size: int, seconds: float) -> None:
        """A pull of ``group`` on ``topic`` got ``msgs`` messages (``size`` bytes; 0: none found) in ``seconds``."""
        self.store.on_get(msgs, seconds)
        if msgs > 0:
            key = topic + SEPARATOR + group
            self.inc(GROUP_GET_NUMS, key, msgs)
            self.inc(GROUP_GET_SIZE, key, size)
            self.inc(BROKER_GET_NUMS, self.cluster, msgs)

    def on_send_back(self, group: str, topic: str) -> None:
        """A message of ``topic`` consumed by ``group`` was sent back (stored for a retry or in the DLQ)."""
        self.inc(SNDBCK_PUT_NUMS, topic + SEPARATOR + group, 1)

    def put_took(self, seconds: float, *_: object) -> None:
        """One store append took ``seconds`` (extra arguments are ignored: the put observer's shape)."""
        self.store.put_took(seconds)

    # -- reading -------------------------------------------------------------------------------------------

    def item(self, name: str, key: str) -> StatsItem | None:
        items = self.sets.get(name)
        return items.get(key) if items is not None else None

    def view(self, name: str, key: str) -> dict[str, dict[str, float]] | None:
        """VIEW_BROKER_STATS_DATA's body for (statsName, statsKey); None: no such item (RocketMQ answers
        SYSTEM_ERROR "The stats <name> <key> not exist")."""
        item = self.item(name, key)
        return item.to_json() if item is not None else None

    def minute(self, name: str, key: str) -> StatsWindow | None:
        item = self.item(name, key)
        return item.window(MINUTE) if item is not None else None

    def minute_tps(self, name: str, key: str) -> float:
        """The item's per-second rate over the last minute (0.0 without the item), e.g. GET_CONSUME_STATS'
        consumeTps: ``minute_tps(GROUP_GET_NUMS, "topic@group")``."""
        w = self.minute(name, key)
        return w.tps if w is not None else 0.0

    def tps_line(self, kind: str) -> str:
        """A runtime-table rate line, "<10 s> <60 s> <600 s>": ``put`` (putTps), ``get`` (getTransferredTps),
        ``found`` (getFoundTps), ``miss`` (getMissTps), ``total`` (getTotalTps)."""
        if kind == "total":
            return self.store.get_total_tps_text()
        return self.store.tps_text(_TPS_COLUMNS[kind])

    # -- sampling ------------------------------------------------------------------------------------------

    def due(self, now_ms: int) -> list[int]:
        """The windows whose sample is due at ``now_ms``."""
        last = self.last_sample
        slack = min(200, self.interval_ms // 10)  # a timer firing a little early still takes its sample
        periods = (self.interval_ms, HOUR_SAMPLE_MS, DAY_SAMPLE_MS)
        return [w for w in (MINUTE, HOUR, DAY) if last[w] is None or now_ms - (last[w] or 0) >= periods[w] - slack]

    def sample(self, now_ms: int, windows: list[int]) -> None:
        for _ in self.sample_steps(now_ms, windows):
            pass

    def sample_steps(self, now_ms: int, windows: list[int], slice_items: int = 2000) -> Iterator[None]:
        """``sample``, yielding every ``slice_items`` items (an item created meanwhile starts at this sample)."""
        for w in windows:
            self.last_sample[w] = now_ms
        n = 0
        for items in self.sets.values():
            for item in list(items.values()):
                v = (now_ms, item.value, item.times)
                for w in windows:
                    item.snaps[w].append(v)
                n += 1
                if n % slice_items == 0:
                    yield

    def on_topic_deleted(self, topic: str) -> None:
        for name in TOPIC_KEYED:
            self.sets[name].pop(topic, None)
        prefix = topic + SEPARATOR
        for name in TOPIC_GROUP_KEYED:
            items = self.sets[name]
            for key in [k for k in items if k.startswith(prefix)]:
                del items[key]

    def retain_topics(self, topics: Mapping[str, object]) -> int:
        """Forget the items of topics the broker no longer has (deleted); returns how many were dropped."""
        dropped = 0
        for name in TOPIC_KEYED:
            items = self.sets[name]
            for key in [k for k in items if k not in topics]:
                del items[key]
                dropped += 1
        for name in TOPIC_GROUP_KEYED:
            items = self.sets[name]
            for key in [k for k in items if k.partition(SEPARATOR)[0] not in topics]:
                del items[key]
                dropped += 1
        return dropped

    def on_group_deleted(self, group: str) -> None:
        suffix = SEPARATOR + group
        for name in TOPIC_GROUP_KEYED:
            items = self.sets[name]
            for key in [k for k in items if k.endswith(suffix)]:
                del items[key]


class StoreStats:
    """RocketMQ's StoreStatsService figures: put / get counts sampled every second, put-time distribution of the
    last full minute, the longest put and get."""

    def __init__(self, boot_ms: int, *, minute_ms: int = 60_000) -> None:
        self.boot_ms = boot_ms
        self.minute_ms = minute_ms  # the put-time distribution's period (6 stats samples: a minute by default)
        self.get_found = 0  # pulls that found messages
        self.get_miss = 0
        self.transferred = 0  # messages returned by pulls
        self.put_entire_time_max = 0  # ms
        self.get_entire_time_max = 0
        self.dispatch_max_buffer = 0
        self.samples: deque[tuple[int, int, int, int, int]] = deque(maxlen=STORE_SAMPLES)
        self._dist = [0] * len(DISTRIBUTE_DESC)
        self.last_dist: list[int] | None = None
        self._buckets = [0] * (len(LATENCY_BOUNDS) + 1)
        self.last_buckets = [0] * (len(LATENCY_BOUNDS) + 1)
        self._rotated_ms = boot_ms

    def put_took(self, seconds: float) -> None:
        ms = max(0, int(seconds * 1000))
        i = 0
        while i < len(_DISTRIBUTE_UPPER) and not (ms <= 0 if i == 0 else ms < _DISTRIBUTE_UPPER[i]):
            i += 1
        self._dist[i] += 1
        self._buckets[_bucket_of(ms)] += 1
        if ms > self.put_entire_time_max:
            self.put_entire_time_max = ms

    def on_get(self, msgs: int, seconds: float) -> None:
        if msgs > 0:
            self.get_found += 1
            self.transferred += msgs
        else:
            self.get_miss += 1
        ms = int(seconds * 1000)
        if ms > self.get_entire_time_max:
            self.get_entire_time_max = ms

    def sample(self, now_ms: int, puts_total: int, dispatch_behind: int) -> None:
        """The once-a-second sample (``puts_total``: messages stored since start); rotates the put-time
        distribution once a minute (``minute_ms``)."""
        self.samples.append((now_ms, puts_total, self.get_found, self.get_miss, self.transferred))
        if dispatch_behind > self.dispatch_max_buffer:
            self.dispatch_max_buffer = dispatch_behind
        if now_ms - self._rotated_ms >= self.minute_ms:
            self._rotated_ms = now_ms
            self.last_dist, self._dist = self._dist, [0] * len(DISTRIBUTE_DESC)
            self.last_buckets, self._buckets = self._buckets, [0] * (len(LATENCY_BOUNDS) + 1)

    def tps(self, column: int, seconds: int) -> float:
        """Per second over the last ``seconds`` samples of ``column`` (1 puts, 2 found, 3 miss, 4 transferred)."""
        s = self.samples
        if len(s) < 2:
            return 0.0
        back = min(seconds, len(s) - 1)
        first, last = s[-1 - back], s[-1]
        span = last[0] - first[0]
        return (last[column] - first[column]) * 1000.0 / span if span > 0 else 0.0

    def tps_text(self, column: int) -> str:
        return " ".join(repr(self.tps(column, n)) for n in (10, 60, 600))

    def get_total_tps_text(self) -> str:
        return " ".join(repr(self.tps(2, n) + self.tps(3, n)) for n in (10, 60, 600))

    def distribute_text(self) -> str:
        """putMessageDistributeTime: the last full minute's put times by bucket ("[<=0ms]:n [0~10ms]:n ... ")."""
        dist = self.last_dist if self.last_dist is not None else [0] * len(DISTRIBUTE_DESC)
        return "".join(f"[{d}]:{n} " for d, n in zip(DISTRIBUTE_DESC, dist, strict=True))

    def latency_px(self, px: float) -> float:
        """The ``px`` quantile (ms) of the last full minute's put times, interpolated in its bucket."""
        counts = self.last_buckets
        index = int(sum(counts) * px)
        passed = 0
        bounds = (*LATENCY_BOUNDS, sys.maxsize)
        for i, n in enumerate(counts):
            if index <= passed + n:
                rel = index - passed
                if i == 0:
                    return bounds[0] * rel / n if n else 0.0
                lo = bounds[i - 1]
                return lo + ((bounds[i] - lo) * rel / n if n else 0.0)
            passed += n
        return 0.0


def _bucket_of(ms: int) -> int:
    lo, hi = 0, len(LATENCY_BOUNDS)
    while lo < hi:  # the first bound >= ms (RocketMQ: TreeMap.ceilingEntry)
        mid = (lo + hi) // 2
        if LATENCY_BOUNDS[mid] >= ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def human_bytes(n: int) -> str:
    """RocketMQ's MixAll.humanReadableByteCount(n, si=false): "512 B", "1.5 KiB", "2.0 GiB"."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def disk_used_ratio(path: str) -> float:
    """RocketMQ's UtilAll.getDiskPartitionSpaceUsedPercent: used / (used + usable), rounded up to a whole
    percent, as a fraction; -1 when the path cannot be measured."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100.0


def dir_capacity(path: str) -> str:
    """commitLogDirCapacity: "Total : 100.0 GiB, Free : 50.0 GiB." (free: what is free on the partition)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return "Total : 0 B, Free : 0 B."
    return f"Total : {human_bytes(st.f_blocks * st.f_frsize)}, Free : {human_bytes(st.f_bfree * st.f_frsize)}."


def runtime_text(elapsed_ms: int) -> str:
    s = max(0, elapsed_ms) // 1000
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


class DailyTotals:
    """msgPut/GetTotalTodayMorning and ...YesterdayMorning: the totals recorded at the last two local midnights
    (0 until a midnight passed, as in RocketMQ's BrokerStats)."""

    def __init__(self) -> None:
        self.put_today = self.get_today = self.put_yesterday = self.get_yesterday = 0
        self.day: int | None = None  # the local date ordinal of the last record

    def tick(self, day: int, put_total: int, get_total: int) -> None:
        if self.day is None:
            self.day = day
        elif day != self.day:
            self.day = day
            self.put_yesterday, self.get_yesterday = self.put_today, self.get_today
            self.put_today, self.get_today = put_total, get_total


# -- puts read from the consume queues -------------------------------------------------------------------------


class ConsumeQueueView(Protocol):
    """A consume queue as the put counter reads it (brokerd.store.consume_queue.ConsumeQueue)."""

    @property
    def max_offset(self) -> int: ...

    def chunks(self, offset: int, end: int) -> Iterator[tuple[int, bytes]]: ...


def entry_sizes(data: bytes) -> int:
    """The sum of the size fields of whole 20-byte consume-queue entries (int64 offset, int32 size, int64 tags,
    big-endian): the size word of every fifth 32-bit word."""
    words = array(_WORD)
    words.frombytes(data[: len(data) - len(data) % 20])
    sizes = words[2::5]
    if sys.byteorder == "little":
        sizes.byteswap()
    return sum(sizes)


class QueuePutCounter:
    """Counts puts per topic from the consume queues' growth between two scans (see the module docstring)."""

    SLICE_ENTRIES = 50_000  # entries read between two yields of ``scan``
    SLICE_QUEUES = 1_000

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], int] = {}
        self.scans = 0

    def scan(self, queues: Mapping[tuple[str, int], ConsumeQueueView], counting: bool,
             out: dict[str, list[int]]) -> Iterator[None]:
        """Adds each topic's new [messages, bytes] to ``out``; yields now and then so that a driver can let other
        work run (``queues`` may change between two steps: a key gone is skipped). The first scan only records
        where each queue is; a queue first seen later counts from offset 0 (it was created since)."""
        first = self.scans == 0
        self.scans += 1
        seen = self.seen
        work = 0
        for n, key in enumerate(list(queues)):
            cq = queues.get(key)
            if cq is None:
                continue
            cur = cq.max_offset
            last = seen.get(key, None if first else 0)
            seen[key] = cur
            if last is None or cur <= last or not counting:
                continue
            size = 0
            for _q, data in cq.chunks(last, cur):
                size += entry_sizes(data)
                work += len(data) // 20
                if work >= self.SLICE_ENTRIES:
                    work = 0
                    yield
            acc = out.setdefault(key[0], [0, 0])
            acc[0] += cur - last
            acc[1] += size
            if n % self.SLICE_QUEUES == self.SLICE_QUEUES - 1:
                yield
        if len(seen) != len(queues):
            for key in [k for k in seen if k not in queues]:
                del seen[key]


# -- the asyncio driver ----------------------------------------------------------------------------------------


class StatsSampler:
    """Samples ``manager``: the store figures once a second, the stats items every ``interval_ms`` (the puts read
    from the consume queues just before), lets other work run between slices of a long scan, and forgets the
    items of deleted topics once a minute. The callables read the broker at each tick."""

    SLICE_S = 0.002  # longest the scan runs before it lets the event loop serve others

    def __init__(self, manager: BrokerStatsManager, *, queues: Callable[[], Mapping[tuple[str, int], ConsumeQueueView]],
                 counting: Callable[[], bool], puts_total: Callable[[], int], gets_total: Callable[[], int],
                 dispatch_behind: Callable[[], int], topics: Callable[[], Mapping[str, object]]) -> None:
        self.manager = manager
        self.counter = QueuePutCounter()
        self._queues, self._counting, self._topics = queues, counting, topics
        self._puts, self._gets, self._behind = puts_total, gets_total, dispatch_behind
        self._last_store_ms = 0
        self._last_retain_ms = 0

    def baseline(self, now_ms: int | None = None) -> None:
        """Note where every consume queue is and take the first sample (the broker's start): puts are counted,
        and items' windows begin, from here."""
        if self.counter.scans == 0:
            for _ in self.counter.scan(self._queues(), False, {}):
                pass
            self.manager.sample(int(time.time() * 1000) if now_ms is None else now_ms, [MINUTE, HOUR, DAY])

    async def run(self) -> None:
        self.baseline()
        tick = min(1000, self.manager.interval_ms) / 1000.0
        while True:
            await asyncio.sleep(tick - time.time() % tick)  # sleep-ok: periodic sampling timer
            try:
                await self.step(int(time.time() * 1000))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - statistics must never stop the broker; the next tick retries
                log.warning("stats_sampling_failed", error=repr(e))

    async def _sliced(self, work: Iterator[None]) -> None:
        began = time.monotonic()
        for _ in work:
            if time.monotonic() - began >= self.SLICE_S:
                await asyncio.sleep(0)  # sleep-ok: let the loop serve others between slices
                began = time.monotonic()

    async def step(self, now_ms: int) -> None:
        m = self.manager
        if now_ms - self._last_store_ms >= 1000:
            self._last_store_ms = now_ms
            m.store.sample(now_ms, self._puts(), self._behind())
            m.day_marks.tick(time.localtime(now_ms / 1000).tm_yday, self._puts(), self._gets())
        windows = m.due(now_ms)
        if not windows:
            return
        out: dict[str, list[int]] = {}
        await self._sliced(self.counter.scan(self._queues(), self._counting(), out))
        for topic, (msgs, size) in out.items():
            m.on_puts(topic, msgs, size)
        await self._sliced(m.sample_steps(now_ms, windows))

        if now_ms - self._last_retain_ms >= 60_000:
            self._last_retain_ms = now_ms
            m.retain_topics(self._topics())


def observe_put_times(target: object, manager: BrokerStatsManager) -> bool:
    """Record each ``target.put_took(seconds, ...)`` call (the send admission's report of one store append: a put,
    or one run of the C lane) as a put time of ``manager``, then make the call; False when ``target`` has none."""
    inner = getattr(target, "put_took", None)
    if not callable(inner):
        return False

    def put_took(seconds: float, *rest: Any) -> Any:
        manager.put_took(seconds)
        return inner(seconds, *rest)

    setattr(target, "put_took", put_took)  # noqa: B010 - an instance attribute shadowing the method
    return True


def runtime_keys(m: BrokerStatsManager) -> dict[str, str]:
    """The GET_BROKER_RUNTIME_INFO keys of RocketMQ's StoreStatsService this module keeps (values as RocketMQ
    prints them)."""
    st = m.store
    return {"putMessageDistributeTime": st.distribute_text(), "putMessageEntireTimeMax": str(st.put_entire_time_max),
            "getMessageEntireTimeMax": str(st.get_entire_time_max), "dispatchMaxBuffer": str(st.dispatch_max_buffer),
            "getMissTps": m.tps_line("miss"), "getTotalTps": m.tps_line("total"),
            "putLatency99": f"{st.latency_px(0.99):.2f}", "putLatency999": f"{st.latency_px(0.999):.2f}"}
