"""brokerd/stats.py: RocketMQ's stats items (windows, rates), puts read from consume-queue entries, the store
figures of the runtime table, the sampler's slices."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest

from brokerd.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    DAY,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    HOUR,
    MINUTE,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStatsManager,
    DailyTotals,
    QueuePutCounter,
    StatsSampler,
    StoreStats,
    entry_sizes,
    human_bytes,
    observe_put_times,
    runtime_keys,
    runtime_text,
)

ENTRY = struct.Struct(">qiq")


class FakeCQ:
    """A consume queue: entries of (phys, size, tags) from offset 0."""

    def __init__(self, sizes: list[int] | None = None) -> None:
        self.entries = [(i * 100, s, 0) for i, s in enumerate(sizes or [])]

    def put(self, *sizes: int) -> None:
        self.entries += [(len(self.entries) * 100, s, 0) for s in sizes]

    @property
    def max_offset(self) -> int:
        return len(self.entries)

    def chunks(self, offset: int, end: int) -> Iterator[tuple[int, bytes]]:
        data = b"".join(ENTRY.pack(*e) for e in self.entries[offset:end])
        if data:
            yield offset, data


def test_entry_sizes_sums_the_size_fields_of_whole_entries() -> None:
    sizes = [1, 255, 256, 65_536, 2**31 - 1, 0]
    data = b"".join(ENTRY.pack(7, s, -1) for s in sizes)
    assert entry_sizes(data) == sum(sizes)
    assert entry_sizes(data + b"\x00" * 7) == sum(sizes)  # a torn tail is not an entry


def test_minute_window_rate_is_the_sum_over_the_time_between_its_first_and_last_snapshot() -> None:
    m = BrokerStatsManager("C", boot_ms=0, interval_ms=10_000)
    m.sample(0, m.due(0))
    m.inc(TOPIC_PUT_NUMS, "T", 30)
    m.sample(10_000, m.due(10_000))
    w = m.minute(TOPIC_PUT_NUMS, "T")
    assert w is not None and (w.sum, w.tps, w.times) == (30, 3.0, 1)  # the new item started at 0 at the last sample
    for t in range(20_000, 80_000, 10_000):
        m.inc(TOPIC_PUT_NUMS, "T", 60, 2)
        m.sample(t, m.due(t))
    w = m.minute(TOPIC_PUT_NUMS, "T")
    assert w is not None and w.sum == 6 * 60 and w.tps == 6.0 and w.avgpt == 30.0  # 7 snapshots: the last 60 s
    assert m.due(75_000) == [] and m.due(80_000) == [MINUTE]
    assert m.due(600_000) == [MINUTE, HOUR] and m.due(3_600_000) == [MINUTE, HOUR, DAY]


def test_a_window_with_one_snapshot_reports_zero_not_nan() -> None:
    m = BrokerStatsManager("C", boot_ms=0)
    m.inc(GROUP_GET_NUMS, "T@G", 5)  # created before any sample: no starting snapshot
    m.sample(1000, [MINUTE])
    assert m.minute_tps(GROUP_GET_NUMS, "T@G") == 0.0 and m.minute_tps(GROUP_GET_NUMS, "missing") == 0.0


def test_gets_send_backs_and_the_view_of_an_item() -> None:
    m = BrokerStatsManager("Cl", boot_ms=0, interval_ms=1000)
    m.sample(0, [MINUTE, HOUR, DAY])
    m.on_get("G", "T", 10, 1000, 0.002)
    m.on_get("G", "T", 0, 0, 0.0)
    m.on_send_back("G", "T")
    m.sample(2000, [MINUTE, HOUR, DAY])
    assert m.minute_tps(GROUP_GET_NUMS, "T@G") == 5.0 and m.minute_tps(GROUP_GET_SIZE, "T@G") == 500.0
    assert m.minute_tps(BROKER_GET_NUMS, "Cl") == 5.0
    view = m.view(SNDBCK_PUT_NUMS, "T@G")
    assert view == {"statsMinute": {"sum": 1, "tps": 0.5, "avgpt": 1.0}, "statsHour": {"sum": 1, "tps": 0.5, "avgpt": 1.0},
                    "statsDay": {"sum": 1, "tps": 0.5, "avgpt": 1.0}}
    assert m.view(TOPIC_PUT_NUMS, "nope") is None
    assert (m.store.get_found, m.store.get_miss, m.store.transferred, m.store.get_entire_time_max) == (1, 1, 10, 2)


def test_deleted_topics_and_groups_lose_their_items() -> None:
    m = BrokerStatsManager("C", boot_ms=0)
    m.on_puts("T", 1, 10)
    m.on_puts("U", 1, 10)
    m.on_get("G", "T", 1, 10, 0)
    m.on_get("H", "U", 1, 10, 0)
    m.on_topic_deleted("T")
    assert m.item(TOPIC_PUT_NUMS, "T") is None and m.item(GROUP_GET_NUMS, "T@G") is None
    m.on_group_deleted("H")
    assert m.item(GROUP_GET_NUMS, "U@H") is None and m.item(TOPIC_PUT_NUMS, "U") is not None
    assert m.retain_topics({}) == 2  # U's two put items
    assert m.item(BROKER_PUT_NUMS, "C") is not None  # not a topic's


def test_put_counter_reads_new_entries_and_their_sizes_per_topic() -> None:
    a0, a1, b0 = FakeCQ([100] * 5), FakeCQ(), FakeCQ([7])
    queues = {("A", 0): a0, ("A", 1): a1, ("B", 0): b0}
    c = QueuePutCounter()
    out: dict[str, list[int]] = {}
    list(c.scan(queues, True, out))
    assert out == {}  # the first scan only notes where each queue is
    a0.put(10, 20)
    a1.put(30)
    queues[("N", 0)] = FakeCQ([1, 2, 3])  # created since: all of it is new
    list(c.scan(queues, True, out))
    assert out == {"A": [3, 60], "N": [3, 6]}
    out.clear()
    b0.entries = b0.entries[:0]  # truncated: nothing counted, the new end noted
    b0.put(5)
    list(c.scan(queues, True, out))
    assert out == {}
    b0.put(5)
    a0.put(1)
    list(c.scan(queues, False, out))  # a slave: noted, not counted
    assert out == {}
    del queues[("A", 1)]
    list(c.scan(queues, True, out))
    assert ("A", 1) not in c.seen


def test_put_counter_yields_between_slices_of_a_long_scan() -> None:
    cq = FakeCQ()
    c = QueuePutCounter()
    list(c.scan({("T", 0): cq}, True, {}))
    cq.entries = [(i, 1, 0) for i in range(120_000)]

    class Chunked(FakeCQ):
        def chunks(self, offset: int, end: int) -> Iterator[tuple[int, bytes]]:
            for lo in range(offset, end, 10_000):
                yield from FakeCQ.chunks(self, lo, min(end, lo + 10_000))

    chunked = Chunked()
    chunked.entries = cq.entries
    out: dict[str, list[int]] = {}
    steps = list(c.scan({("T", 0): chunked}, True, out))
    assert out == {"T": [120_000, 120_000]} and len(steps) >= 2


def test_put_times_fill_rocketmqs_distribution_and_percentiles_of_the_last_minute() -> None:
    st = StoreStats(0, minute_ms=60_000)
    for ms in (0, 0, 5, 12, 60, 150, 300, 700, 1500, 2500, 3500, 4500, 7000, 20_000):
        st.put_took(ms / 1000)
    assert st.distribute_text().startswith("[<=0ms]:0 ")  # nothing before the first minute ends
    st.sample(60_000, 14, 0)
    assert st.distribute_text() == ("[<=0ms]:2 [0~10ms]:1 [10~50ms]:1 [50~100ms]:1 [100~200ms]:1 [200~500ms]:1 "
                                    "[500ms~1s]:1 [1~2s]:1 [2~3s]:1 [3~4s]:1 [4~5s]:1 [5~10s]:1 [10s~]:1 ")
    assert st.put_entire_time_max == 20_000
    fast = StoreStats(0)
    for _ in range(1000):
        fast.put_took(0.0)
    fast.sample(60_000, 0, 0)
    assert fast.latency_px(0.99) == pytest.approx(0.99)  # all in the first bucket (0..1 ms), interpolated


def test_store_rates_over_10_60_600_seconds() -> None:
    st = StoreStats(0)
    for s in range(0, 601):
        st.sample(s * 1000, s * 10, 0)
        st.on_get(1, 0.0)
        st.on_get(0, 0.0)
        st.on_get(0, 0.0)
    assert st.tps_text(1) == "10.0 10.0 10.0" and st.get_total_tps_text() == "3.0 3.0 3.0"
    young = StoreStats(0)
    young.sample(0, 0, 0)
    young.sample(2000, 8, 0)
    assert young.tps(1, 10) == 4.0  # fewer samples than the window: the time there is


def test_daily_totals_move_at_midnight() -> None:
    d = DailyTotals()
    d.tick(100, 5, 1)
    assert (d.put_today, d.put_yesterday) == (0, 0)
    d.tick(101, 50, 10)
    d.tick(101, 70, 20)
    d.tick(102, 90, 30)
    assert (d.put_today, d.get_today, d.put_yesterday, d.get_yesterday) == (90, 30, 50, 10)


def test_runtime_keys_are_rocketmqs_text() -> None:
    m = BrokerStatsManager("C", boot_ms=0)
    keys = runtime_keys(m)
    assert keys["putLatency99"] == "0.00" and keys["getMissTps"] == "0.0 0.0 0.0"
    assert keys["putMessageDistributeTime"].count(":0 ") == 13
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB" and human_bytes(3 * 2**30) == "3.0 GiB"
    assert runtime_text(90_061_000) == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"


def test_put_times_are_observed_on_the_admission() -> None:
    seen = []

    class Admission:
        def put_took(self, seconds: float, now: float) -> None:
            seen.append((seconds, now))

    m = BrokerStatsManager("C", boot_ms=0)
    adm = Admission()
    assert observe_put_times(adm, m) and not observe_put_times(object(), m)
    adm.put_took(0.012, 5.0)
    assert seen == [(0.012, 5.0)] and m.store.put_entire_time_max == 12


async def test_sampler_counts_puts_from_the_queues_and_samples_the_items() -> None:
    m = BrokerStatsManager("C", boot_ms=0, interval_ms=1000)
    cq = FakeCQ([10])
    queues = {("T", 0): cq}
    puts = [0]
    s = StatsSampler(m, queues=lambda: queues, counting=lambda: True, puts_total=lambda: puts[0],
                     gets_total=lambda: 0, dispatch_behind=lambda: 0, topics=lambda: {"T": object()})
    await s.step(1000)
    cq.put(100, 100)
    puts[0] = 2
    await s.step(2000)
    assert m.minute_tps(TOPIC_PUT_NUMS, "T") == 2.0 and m.minute_tps(TOPIC_PUT_SIZE, "T") == 200.0
    assert m.minute_tps(BROKER_PUT_NUMS, "C") == 2.0 and m.store.tps(1, 10) == 2.0
    task = asyncio.create_task(s.run())
    await asyncio.sleep(0)  # sleep-ok: let the task start; it is cancelled at once
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_puts_right_after_the_start_count_from_the_start() -> None:
    m = BrokerStatsManager("C", boot_ms=0, interval_ms=1000)
    old = FakeCQ([1] * 9)  # stored before the broker started: not counted
    queues: dict[tuple[str, int], FakeCQ] = {("Old", 0): old}
    s = StatsSampler(m, queues=lambda: queues, counting=lambda: True, puts_total=lambda: 0,
                     gets_total=lambda: 0, dispatch_behind=lambda: 0, topics=lambda: {"T": object(), "Old": object()})
    s.baseline(0)
    queues[("T", 0)] = FakeCQ([10] * 4)  # a topic created and sent to before the first tick
    old.put(1)
    await s.step(500)  # a tick before the interval: the store figures only
    await s.step(1000)
    assert m.minute(TOPIC_PUT_NUMS, "T") == (4, 4.0, 1.0, 4) and m.minute(TOPIC_PUT_NUMS, "Old") == (1, 1.0, 1.0, 1)


def test_sampling_many_items_yields_between_slices() -> None:
    m = BrokerStatsManager("C", boot_ms=0)
    for i in range(5000):
        m.on_get("G", f"T{i}", 1, 1, 0.0)
    steps = list(m.sample_steps(1000, [MINUTE], slice_items=2000))
    assert len(steps) == 5 and m.last_sample[MINUTE] == 1000  # 10,001 items
    assert all(len(it.snaps[MINUTE]) == 1 for it in m.sets[GROUP_GET_NUMS].values())
