"""The dashboard's figures, computed from in-memory brokers: counters equal the `/metrics` series, per-queue
offsets, group lag (never negative), HA state, and the Prometheus lines for lag and topic offsets."""

from __future__ import annotations

import orjson

from brokerd.loopwork import run_now
from container.dashboard import figures
from container.metrics import render
from tests.unit.dashboard.fakes import Directory, FakeBroker, Slot, Topic

IDENT = "DefaultCluster:b:0"


def broker() -> FakeBroker:
    return FakeBroker("b", topics={"T": Topic(2, 3), "SYS": Topic(1, 1)},
                      queues={("T", 0): (0, 10), ("T", 1): (2, 7), ("T", 2): (0, 1)},
                      offsets={"T@G": {0: 4, 1: 9}, "T@H": {2: 1}}, online={"G": ["c1", "c2"], "N": ["c3"]},
                      subscribed={"G": ("T", "%RETRY%G"), "N": ("T",)},
                      system=frozenset({"SYS"}))


def test_counters_are_the_metrics_series() -> None:
    b = broker()
    scrape = render(Directory({IDENT: Slot(b)}))
    got = figures.counters(b)
    assert got["rocketmq_messages_in_total"] == 10 and got["rocketmq_errors_total"] == 1
    for name, value in got.items():
        assert f'{name}{{broker="{IDENT}"}} {value}' in scrape.splitlines()


def test_counters_can_be_limited_to_some_series() -> None:
    assert figures.counters(broker(), ("rocketmq_messages_in_total", "rocketmq_errors_total")) == {
        "rocketmq_messages_in_total": 10, "rocketmq_errors_total": 1}


def test_a_broken_counter_leaves_out_only_itself() -> None:
    b = broker()

    def broken() -> int:
        raise OSError("disk gone")

    b.store.logical_usage_bytes = broken  # type: ignore[method-assign]
    got = figures.counters(b)
    assert "rocketmq_disk_usage_bytes" not in got and got["rocketmq_messages_in_total"] == 10


def test_topics_list_every_queue_with_min_and_max() -> None:
    rows = {r["topic"]: r for r in figures.topic_rows(broker())}
    t = rows["T"]
    assert t["queues"] == [{"queueId": 0, "minOffset": 0, "maxOffset": 10}, {"queueId": 1, "minOffset": 2, "maxOffset": 7},
                           {"queueId": 2, "minOffset": 0, "maxOffset": 1}]
    assert t["maxOffsetSum"] == 18 and t["readQueueNums"] == 2 and t["writeQueueNums"] == 3
    assert rows["SYS"]["system"] and not t["system"]


def test_group_lag_per_queue_and_total_never_negative() -> None:
    b = broker()
    b.meta.offsets.rows["T@K"] = {0: 99}  # committed past the max (a truncated queue): lag 0, not -89
    rows = {r["group"]: r for r in figures.group_rows(b) if r["committed"]}
    assert rows["G"]["queues"] == [{"queueId": 0, "brokerOffset": 10, "consumerOffset": 4, "lag": 6},
                                   {"queueId": 1, "brokerOffset": 7, "consumerOffset": 9, "lag": 0}]
    assert rows["G"]["lag"] == 6 and rows["G"]["online"] == 2
    assert rows["H"]["lag"] == 0 and rows["H"]["online"] == 0
    assert rows["K"]["lag"] == 0


def test_groups_online_without_commits_are_listed_without_lag() -> None:
    rows = {(r["group"], r["topic"]): r for r in figures.group_rows(broker())}
    assert rows[("N", "T")] == {"group": "N", "topic": "T", "online": 1, "committed": False, "lag": 0, "queues": []}
    assert rows[("G", "%RETRY%G")]["committed"] is False and rows[("G", "T")]["committed"] is True
    lines = figures.prometheus_lines(Directory({IDENT: Slot(broker())}))
    assert not [line for line in lines if 'group="N"' in line or "%RETRY%G" in line]


def test_ha_view_of_a_master_with_a_lagging_slave() -> None:
    ha = figures.ha_view({"role": "MASTER", "masterEpoch": 3, "maxOffset": 500, "confirmOffset": 400,
                          "syncStateSet": [0, 1], "syncStateSetEpoch": 2, "controllerMode": True,
                          "controllerLeader": "127.0.0.1:9878",  # port-ok: data, nothing binds it
                          "slaves": {"2": {"ack": 120, "state": "TRANSFER"}, "1": {"ack": 500, "state": "TRANSFER"}}})
    assert ha["syncStateSet"] == [0, 1] and ha["masterEpoch"] == 3 and ha["controllerLeader"] == "127.0.0.1:9878"  # port-ok: data, nothing binds it
    assert [(s["id"], s["lagBytes"]) for s in ha["slaves"]] == [("1", 0), ("2", 380)]
    assert ha["metadataSnapshot"] is None  # no incremental metadata sync


def test_ha_view_shows_the_latest_metadata_snapshots_position() -> None:
    snap = {"metadataSnapshotLogOffset": 65536, "metadataSnapshotTime": 1_700_000_000_000,
            "metadataSnapshotsWritten": 2}
    ha = figures.ha_view({"role": "MASTER", "incrementalSync": {"role": "MASTER", "snapshot": snap}})
    assert ha["metadataSnapshot"] == {"logOffset": 65536, "time": 1_700_000_000_000}


def test_overview_names_each_controller_leader_once() -> None:
    a, b = broker(), FakeBroker("c")
    a.ha["controllerLeader"] = b.ha["controllerLeader"] = "127.0.0.1:9877"  # port-ok: data, nothing binds it
    o = figures.overview(Directory({IDENT: Slot(a), "DefaultCluster:c:0": Slot(b)}))
    assert o["brokerCount"] == 2 and o["controllerLeaders"] == ["127.0.0.1:9877"]  # port-ok: data, nothing binds it
    assert [r["identity"] for r in o["brokers"]] == [IDENT, "DefaultCluster:c:0"]


def test_a_broker_that_fails_shows_its_error_and_the_others_still_show() -> None:
    good, bad = broker(), broker()

    def boom() -> dict[str, dict[int, int]]:
        raise RuntimeError("metadata unavailable")

    bad.meta.offsets.entries = boom  # type: ignore[method-assign]
    page = run_now(figures.page_json_steps(Directory({"x:bad:0": Slot(bad), IDENT: Slot(good)}),  # type: ignore[arg-type]
                                           figures.iter_group_rows, figures.group_row_key))
    out = orjson.loads(page)["brokers"]
    assert out[1] == {"identity": "x:bad:0", "rows": [], "error": "metadata unavailable"}
    assert out[0] == {"identity": IDENT, "rows": figures.group_rows(good)} and len(out[0]["rows"]) == 4


def test_prometheus_lines_escape_names_and_carry_the_same_lag() -> None:
    b = FakeBroker("b", topics={"T": Topic(1, 1)}, queues={("T", 0): (0, 5)}, offsets={'T@g"x\\': {0: 2}})
    lines = figures.prometheus_lines(Directory({IDENT: Slot(b)}))
    assert f'rocketmq_consumer_lag_messages{{broker="{IDENT}",group="g\\"x\\\\",topic="T"}} 3' in lines
    assert f'rocketmq_topic_max_offset_sum{{broker="{IDENT}",topic="T"}} 5' in lines
    assert "# TYPE rocketmq_consumer_lag_messages gauge" in lines


def test_the_scrape_reports_the_rows_lag_and_offset_sums_without_building_the_rows() -> None:
    b = broker()
    lines = figures.prometheus_lines(Directory({IDENT: Slot(b)}))
    expected = {f'rocketmq_consumer_lag_messages{{broker="{IDENT}",group="{r["group"]}",topic="{r["topic"]}"}} '
                f'{r["lag"]}' for r in figures.group_rows(b) if r["committed"]}
    expected |= {f'rocketmq_topic_max_offset_sum{{broker="{IDENT}",topic="{r["topic"]}"}} {r["maxOffsetSum"]}'
                 for r in figures.topic_rows(b)}
    assert {line for line in lines if not line.startswith("#")} == expected
    assert len(expected) == 4  # two committed rows (lags 6 and 0), two topics
