"""container/exporter: rocketmq-exporter's families, labels and values computed from (in-memory) hosted brokers;
the scrape's work bounded per slice, measured with 1,000 topics x 10 groups."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from brokerd.stats import GROUP_GET_NUMS, MINUTE, TOPIC_PUT_NUMS
from container.exporter import Exporter
from container.exporter.clients import ClientProbe, status_table
from container.exporter.families import FAMILIES, NAMES, Samples, number
from container.exporter.runtime import capacity, runtime_samples
from tests.unit.exporter.fakes import Conn, FakeBroker, Store, Topic, directory, parse

UPSTREAM_FAMILIES = frozenset((
    "rocketmq_broker_commitlog_diff", "rocketmq_broker_qps", "rocketmq_broker_tps",
    "rocketmq_brokeruntime_commitlog_disk_ratio", "rocketmq_brokeruntime_commitlog_maxoffset",
    "rocketmq_brokeruntime_commitlog_minoffset", "rocketmq_brokeruntime_commitlogdir_capacity_free",
    "rocketmq_brokeruntime_commitlogdir_capacity_total", "rocketmq_brokeruntime_consumequeue_disk_ratio",
    "rocketmq_brokeruntime_dispatch_behind_bytes", "rocketmq_brokeruntime_dispatch_maxbuffer",
    "rocketmq_brokeruntime_earliest_message_timestamp", "rocketmq_brokeruntime_getfound_tps10",
    "rocketmq_brokeruntime_getfound_tps60", "rocketmq_brokeruntime_getfound_tps600",
    "rocketmq_brokeruntime_getmessage_entire_time_max", "rocketmq_brokeruntime_getmiss_tps10",
    "rocketmq_brokeruntime_getmiss_tps60", "rocketmq_brokeruntime_getmiss_tps600",
    "rocketmq_brokeruntime_gettotal_tps10", "rocketmq_brokeruntime_gettotal_tps60",
    "rocketmq_brokeruntime_gettotal_tps600", "rocketmq_brokeruntime_gettransfered_tps10",
    "rocketmq_brokeruntime_gettransfered_tps60", "rocketmq_brokeruntime_gettransfered_tps600",
    "rocketmq_brokeruntime_msg_gettotal_today_now", "rocketmq_brokeruntime_msg_gettotal_todaymorning",
    "rocketmq_brokeruntime_msg_gettotal_yesterdaymorning", "rocketmq_brokeruntime_msg_put_total_today_now",
    "rocketmq_brokeruntime_msg_puttotal_todaymorning", "rocketmq_brokeruntime_msg_puttotal_yesterdaymorning",
    "rocketmq_brokeruntime_pagecache_lock_time_mills", "rocketmq_brokeruntime_pmdt_0ms",
    "rocketmq_brokeruntime_pmdt_0to10ms", "rocketmq_brokeruntime_pmdt_100to200ms",
    "rocketmq_brokeruntime_pmdt_10stomore", "rocketmq_brokeruntime_pmdt_10to50ms", "rocketmq_brokeruntime_pmdt_1to2s",
    "rocketmq_brokeruntime_pmdt_200to500ms", "rocketmq_brokeruntime_pmdt_2to3s", "rocketmq_brokeruntime_pmdt_3to4s",
    "rocketmq_brokeruntime_pmdt_4to5s", "rocketmq_brokeruntime_pmdt_500to1s", "rocketmq_brokeruntime_pmdt_50to100ms",
    "rocketmq_brokeruntime_pmdt_5to10s", "rocketmq_brokeruntime_pull_threadpoolqueue_capacity",
    "rocketmq_brokeruntime_pull_threadpoolqueue_headwait_timemills",
    "rocketmq_brokeruntime_pull_threadpoolqueue_size", "rocketmq_brokeruntime_put_latency_99",
    "rocketmq_brokeruntime_put_latency_999", "rocketmq_brokeruntime_put_message_average_size",
    "rocketmq_brokeruntime_put_message_size_total", "rocketmq_brokeruntime_put_tps10",
    "rocketmq_brokeruntime_put_tps60", "rocketmq_brokeruntime_put_tps600",
    "rocketmq_brokeruntime_putmessage_entire_time_max", "rocketmq_brokeruntime_putmessage_times_total",
    "rocketmq_brokeruntime_query_threadpool_queue_capacity",
    "rocketmq_brokeruntime_query_threadpoolqueue_headwait_timemills",
    "rocketmq_brokeruntime_query_threadpoolqueue_size", "rocketmq_brokeruntime_remain_howmanydata_toflush",
    "rocketmq_brokeruntime_remain_transientstore_buffer_numbs", "rocketmq_brokeruntime_send_threadpool_queue_size",
    "rocketmq_brokeruntime_send_threadpoolqueue_capacity",
    "rocketmq_brokeruntime_send_threadpoolqueue_headwait_timemills",
    "rocketmq_brokeruntime_start_accept_sendrequest_time", "rocketmq_client_consume_fail_msg_count",
    "rocketmq_client_consume_fail_msg_tps", "rocketmq_client_consume_ok_msg_tps", "rocketmq_client_consume_rt",
    "rocketmq_client_consumer_pull_rt", "rocketmq_client_consumer_pull_tps", "rocketmq_consumer_message_size",
    "rocketmq_consumer_offset", "rocketmq_consumer_tps", "rocketmq_group_consume_total_offset",
    "rocketmq_group_consume_tps", "rocketmq_group_count", "rocketmq_group_diff", "rocketmq_group_dlqdiff",
    "rocketmq_group_get_latency_by_storetime", "rocketmq_group_retrydiff", "rocketmq_producer_count",
    "rocketmq_producer_message_size", "rocketmq_producer_offset", "rocketmq_producer_tps", "rocketmq_send_back_nums",
    "rocketmq_topic_dlq_offset", "rocketmq_topic_retry_offset",
))
G = ("group", "topic", "countOfOnlineConsumers", "msgModel")


def key(family: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return family, tuple(labels.items())


def test_every_family_of_the_exporter_is_rendered_with_its_help_and_type() -> None:
    assert NAMES == UPSTREAM_FAMILIES and len(FAMILIES) == 89
    text = Samples().text()
    for name, help_, _ in FAMILIES:
        assert f"# HELP {name} {help_}\n# TYPE {name} gauge\n" in text
    assert number(7) == "7.0" and number(float("nan")) == "NaN"


def broker_with_traffic(now_ms: int) -> tuple[FakeBroker, Conn]:
    store = Store(queues={("T", 0): 10, ("T", 1): 5, ("%RETRY%G", 0): 3, ("%DLQ%G", 0): 2, ("U", 0): 9, ("B", 0): 4},
                  times={("T", 0, 4): now_ms - 5000, ("T", 1, 0): now_ms - 2000})
    b = FakeBroker(topics={"T": Topic(2, 2), "%RETRY%G": Topic(1, 1), "%DLQ%G": Topic(1, 1), "U": Topic(1, 1),
                           "B": Topic(1, 1), "%RETRY%BC": Topic(1, 1)},
                   offsets={"T@G": {0: 4}, "U@G": {0: 1}, "B@BC": {0: 1}}, store=store)
    conn = Conn("10.0.0.1", 5555)
    b.online("G", conn, "cid-1", ["T", "%RETRY%G"])
    b.online("BC", Conn("10.0.0.2", 6666), "cid-2", ["B"], model="BROADCASTING")
    return b, conn


async def test_consume_stats_diffs_offsets_and_counts_of_one_master() -> None:
    now = int(time.time() * 1000)
    b, _ = broker_with_traffic(now)
    m = parse(await Exporter(directory(b)).text())
    assert m[key("rocketmq_group_diff", group="G", topic="T", countOfOnlineConsumers="1", msgModel="1")] == 11
    assert m[key("rocketmq_group_retrydiff", group="G", topic="%RETRY%G", countOfOnlineConsumers="1",
                 msgModel="1")] == 3
    assert m[key("rocketmq_group_dlqdiff", group="G", topic="%DLQ%G", countOfOnlineConsumers="1", msgModel="1")] == 2
    # an online group without a subscription to U has no stats for U (RocketMQ); a broadcasting group no diff
    assert not [k for k in m if k[0].startswith("rocketmq_group_") and ("topic", "U") in k[1]]
    assert not [k for k in m if "diff" in k[0] and ("group", "BC") in k[1]]
    assert m[key("rocketmq_consumer_offset", cluster="DefaultCluster", broker="broker-a", topic="B", group="BC")] == 1
    assert m[key("rocketmq_group_count", caddr="10.0.0.1:5555", localaddr="cid-1", group="G")] == 1
    lat = m[key("rocketmq_group_get_latency_by_storetime", cluster="DefaultCluster", broker="broker-a", topic="T",
                group="G")]
    assert 5000 <= lat < 65_000
    assert m[key("rocketmq_consumer_offset", cluster="DefaultCluster", broker="broker-a", topic="T", group="G")] == 4
    assert m[key("rocketmq_producer_offset", cluster="DefaultCluster", broker="broker-a", topic="T")] == 15
    assert m[key("rocketmq_topic_retry_offset", cluster="DefaultCluster", broker="broker-a", topic="%RETRY%G")] == 3
    assert m[key("rocketmq_topic_dlq_offset", cluster="DefaultCluster", broker="broker-a", group="G")] == 2


async def test_diffs_are_summed_over_the_masters_and_slaves_are_left_to_their_masters() -> None:
    a = FakeBroker("broker-a", topics={"T": Topic(1, 1)}, offsets={"T@G": {0: 1}}, store=Store({("T", 0): 10}))
    b = FakeBroker("broker-b", port=10921, topics={"T": Topic(1, 1)}, offsets={"T@G": {0: 7}},  # port-ok: data, nothing binds it
                   store=Store({("T", 0): 8}))
    s = FakeBroker("broker-b", broker_id=1, port=10931, master=False, topics={"T": Topic(1, 1)},  # port-ok: data, nothing binds it
                   offsets={"T@G": {0: 0}}, store=Store({("T", 0): 8}))
    b.slaves = {"1": {"ack": 900, "state": "TRANSFER"}}
    m = parse(await Exporter(directory(a, b, s)).text())
    assert m[key("rocketmq_group_diff", group="G", topic="T", countOfOnlineConsumers="0", msgModel="1")] == 9 + 1
    assert m[key("rocketmq_broker_commitlog_diff", cluster="DefaultCluster", brokerIP="127.0.0.1:10931",  # port-ok: data, nothing binds it
                 broker="broker-b")] == 100
    assert {dict(k[1])["broker"] for k in m if k[0] == "rocketmq_producer_offset"} == {"broker-a", "broker-b"}
    assert len([k for k in m if k[0] == "rocketmq_broker_tps"]) == 2


async def test_rates_come_from_the_stats_items_rounded_as_the_exporter_rounds_them() -> None:
    b = FakeBroker(topics={"T": Topic(1, 1), "%RETRY%G": Topic(1, 1)})
    sm = b.stats_manager
    sm.sample(0, [MINUTE])
    sm.on_puts("T", 10, 1000)
    sm.on_puts("%RETRY%G", 5, 50)
    sm.on_get("G", "T", 1, 100, 0.0)
    sm.on_send_back("G", "T")
    sm.on_puts("Gone", 1, 1)  # a topic the broker does not have (deleted): not reported
    sm.sample(3000, [MINUTE])
    m = parse(await Exporter(directory(b)).text())
    labels = {"cluster": "DefaultCluster", "broker": "broker-a", "topic": "T"}
    assert m[key("rocketmq_producer_tps", **labels)] == 3.33
    assert m[key("rocketmq_producer_message_size", **labels)] == 333.33
    assert m[key("rocketmq_consumer_tps", **labels, group="G")] == 0.33
    assert m[key("rocketmq_consumer_message_size", **labels, group="G")] == 33.33
    assert m[key("rocketmq_send_back_nums", **labels, group="G")] == 1  # the minute's sum
    assert m[key("rocketmq_broker_tps", cluster="DefaultCluster", brokerIP="127.0.0.1:10911", broker="broker-a")] == 5.33  # port-ok: data, nothing binds it
    assert not [k for k in m if k[0] == "rocketmq_producer_tps" and dict(k[1])["topic"] in ("%RETRY%G", "Gone")]
    assert sm.minute(TOPIC_PUT_NUMS, "T") is not None and sm.minute_tps(GROUP_GET_NUMS, "T@G") == pytest.approx(1 / 3)


def test_runtime_table_is_read_as_the_exporter_reads_it() -> None:
    from tests.unit.exporter.fakes import RUNTIME_TABLE

    v = dict(runtime_samples(RUNTIME_TABLE))
    assert v["rocketmq_brokeruntime_pmdt_0ms"] == 7 and v["rocketmq_brokeruntime_pmdt_10stomore"] == 1
    assert (v["rocketmq_brokeruntime_put_tps10"], v["rocketmq_brokeruntime_put_tps60"],
            v["rocketmq_brokeruntime_put_tps600"]) == (10.5, 6.25, 1.0)
    assert v["rocketmq_brokeruntime_gettransfered_tps10"] == 3.0
    assert v["rocketmq_brokeruntime_commitlogdir_capacity_total"] == 100 * 2**30
    assert v["rocketmq_brokeruntime_commitlogdir_capacity_free"] == 512
    assert v["rocketmq_brokeruntime_remain_howmanydata_toflush"] == 1.5  # the number before the unit, as reported
    assert v["rocketmq_brokeruntime_put_latency_99"] == -1  # absent: the exporter's default
    assert v["rocketmq_brokeruntime_msg_put_total_today_now"] == 120
    assert len(v) == 89 - 26  # every runtime family
    assert capacity("garbage") == (0.0, 0.0) and "rocketmq_brokeruntime_pmdt_0ms" not in dict(runtime_samples({}))


async def test_runtime_families_carry_the_exporters_labels() -> None:
    m = parse(await Exporter(directory(FakeBroker())).text())
    labels = (("cluster", "DefaultCluster"), ("brokerIP", "127.0.0.1:10911"), ("brokerHost", ""), ("des", "V5_3_3"),  # port-ok: data, nothing binds it
              ("boottime", "1700000000000"), ("broker_version", "479"))
    assert m[("rocketmq_brokeruntime_commitlog_maxoffset", labels)] == 9000
    assert m[("rocketmq_brokeruntime_commitlog_disk_ratio", labels)] == 0.42


JAVA_RUNNING_INFO = (b'{"jstack":"","mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"cachedMsgCount":0}},'
                     b'"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},"statusTable":{"T":{"consumeFailedMsgs":3,'
                     b'"consumeFailedTPS":0.5,"consumeOKTPS":12.5,"consumeRT":1.25,"pullRT":2.0,"pullTPS":13.0}},'
                     b'"subscriptionSet":[{"subString":"*","topic":"T"}]}')


async def test_client_figures_are_what_each_consumer_reports_of_itself() -> None:
    b = FakeBroker(topics={"T": Topic(1, 1)})
    conn = Conn("10.1.1.1", 4000, JAVA_RUNNING_INFO)
    b.online("G", conn, "10.1.1.1@77", ["T"])
    b.online("G", Conn("10.1.1.2", 4001, None), "10.1.1.2@78", ["T"])  # answers an error: no figures
    exporter = Exporter(directory(b), min_interval_s=0, probe=ClientProbe(interval_s=0))
    await exporter.text()  # starts the round in the background
    await exporter.probe.settle()
    assert exporter.probe.rounds == 1
    m = parse(await exporter.text())
    labels = {"clientAddr": "10.1.1.1:4000", "clientId": "10.1.1.1@77", "group": "G", "topic": "T"}
    assert m[key("rocketmq_client_consume_ok_msg_tps", **labels)] == 12.5
    assert m[key("rocketmq_client_consume_fail_msg_count", **labels)] == 3
    assert m[key("rocketmq_client_consumer_pull_tps", **labels)] == 13.0
    assert len([k for k in m if k[0] == "rocketmq_client_consume_rt"]) == 1
    assert conn.asked[0].code == 307 and conn.asked[0].ext["consumerGroup"] == "G"
    assert status_table(b"not json") == {} and status_table(b'{"mqTable":{}}') == {}
    await exporter.stop()


async def test_scrapes_arriving_together_share_one_computation_and_a_broken_broker_is_skipped() -> None:
    good = FakeBroker(topics={"T": Topic(1, 1)}, store=Store({("T", 0): 3}))

    class Broken(FakeBroker):
        def is_master(self) -> bool:
            raise RuntimeError("boom")

    d = directory(good, Broken("broker-x", port=10951))  # port-ok: data, nothing binds it
    exporter = Exporter(d, min_interval_s=60)
    calls = 0
    real = exporter.collect

    async def counting() -> str:
        nonlocal calls
        calls += 1
        return await real()

    exporter.collect = counting  # type: ignore[method-assign]
    a, b = await asyncio.gather(exporter.text(), exporter.text())
    assert a == b and calls == 1 and await exporter.text() == a and calls == 1
    assert 'rocketmq_producer_offset{cluster="DefaultCluster",broker="broker-a",topic="T"} 3.0' in a
    assert "broker-x" not in a


def big_broker(topics: int, groups: int) -> FakeBroker:
    names = [f"Topic{i:04d}" for i in range(topics)]
    store = Store({(t, q): 1000 + q for t in names for q in range(8)})
    offsets = {f"{t}@Group{g:02d}_{i % 50}": {q: 900 for q in range(8)} for i, t in enumerate(names)
               for g in range(groups)}
    b = FakeBroker(topics={t: Topic(8, 8) for t in names}, offsets=offsets, store=store)
    sm = b.stats_manager
    sm.sample(0, [MINUTE])
    for k in offsets:
        topic, _, group = k.partition("@")
        sm.on_get(group, topic, 10, 1000, 0.0)
    for t in names:
        sm.on_puts(t, 10, 1000)
    sm.sample(10_000, [MINUTE])
    for i in range(50):
        for n in range(groups):
            b.online(f"Group{n:02d}_{i}", Conn("10.0.0.9", 7000 + i * 10 + n), f"cid-{i}-{n}",
                     [t for j, t in enumerate(names) if j % 50 == i])
    return b


async def test_a_scrape_of_1000_topics_and_10_groups_each_never_holds_the_loop_long() -> None:
    b = big_broker(1000, 10)
    exporter = Exporter(directory(b), min_interval_s=0)
    ticks: list[float] = []
    stop = False

    async def heartbeat() -> None:
        while not stop:
            ticks.append(time.monotonic())
            await asyncio.sleep(0)  # sleep-ok: measures how long the loop is held between turns

    hb = asyncio.create_task(heartbeat())
    gc.disable()  # the collector's own pauses are the process's (brokerd/loopmon.py, the gc policy), not the scrape's
    try:
        t0 = time.monotonic()
        text = await exporter.text()
        took = time.monotonic() - t0
    finally:
        gc.enable()
    stop = True
    await hb
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    longest = max(gaps)
    print(f"\nexporter scrape: 1000 topics x 10 groups: {took * 1000:.0f} ms, {len(text) / 1e6:.1f} MB, "
          f"{text.count(chr(10))} lines, longest slice {exporter.last_longest_slice_s * 1000:.1f} ms "
          f"({exporter.last_longest_slice_cpu_s * 1000:.1f} ms CPU), longest loop gap {longest * 1000:.1f} ms")
    m = parse(text)
    assert len([k for k in m if k[0] == "rocketmq_group_diff"]) == 10_000
    assert m[key("rocketmq_group_diff", group="Group03_7", topic="Topic0007", countOfOnlineConsumers="1",
                 msgModel="1")] == 8 * 100 + 28
    # CPU time, as a busy shared machine stretches wall time: measured 4-10 ms (the slices aim at 2 ms)
    assert exporter.last_longest_slice_cpu_s < 0.05
