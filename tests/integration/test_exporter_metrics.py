"""rocketmq-exporter's metrics on a real container's /metrics: a real producer (the C++ client) and RocketMQ's Java
push consumer send and consume; the scrape shows the exporter's families with its labels, the put and get rates of
a known burst, the diff after known sends and consumes, retry and dead-letter diffs, the consumers' own figures,
and every family the Grafana dashboard in docs/ uses."""

from __future__ import annotations

import json
import pathlib
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from container.exporter.families import FAMILIES
from tests.java_support import JavaLines, java_command
from tests.support import ClientRun, Cluster, rpc, wait_for
from tests.unit.exporter.fakes import parse
from tests.unit.exporter.test_grafana import DASHBOARD, expressions, metric_names

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # known traffic through minute windows: ~1 min

Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]
# 1 s samples (a "minute" window of 6 s); a message's first retry (level 3) comes back after 8 s, the others after 1 s
DELAYS = "1s 1s 8s " + " ".join(["1s"] * 15)


class Scraper:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def text(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return str(r.read().decode())

    def get(self) -> Metrics:
        return parse(self.text())

    def find(self, family: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(k[1]), v) for k, v in self.get().items()
                if k[0] == family and all(dict(k[1]).get(n) == x for n, x in labels.items())]

    def value(self, family: str, **labels: str) -> float | None:
        found = self.find(family, **labels)
        return found[0][1] if len(found) == 1 else None

    def until(self, what: str, cond: Callable[[], object], timeout: float = 60) -> Any:
        return wait_for(cond, timeout, what, interval=0.25)


class JavaConsumer(JavaLines):
    """RocketMQ's Java push consumer (tests/clients/java/remoting: org.pyrmq.tests.exporter.Consumer)."""

    def __init__(self, c: Cluster, topic: str, group: str, mode: str, max_reconsume: int, logs: pathlib.Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        cmd = java_command("remoting", "org.pyrmq.tests.exporter.Consumer", [c.namesrv, topic, group, mode,
                                                                             str(max_reconsume)],
                           jvm_args=["-Xmx256m", "-XX:+UseSerialGC", f"-Drocketmq.client.logRoot={logs}"])
        super().__init__(cmd, cwd=logs)
        self.client_id = str(wait_for(lambda: next(iter(self.of("clientId")), None), 120,
                                      "the Java consumer started"))

    def deliveries(self) -> list[dict[str, Any]]:
        return self.of("recv")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Scraper, pathlib.Path]]:
    tmp = tmp_path_factory.mktemp("exporter")
    c = Cluster(tmp, brokers=1, statsSamplingInterval=1000, messageDelayLevel=DELAYS).start()
    line = wait_for(lambda: re.search(r"metrics port (\d+)", c.daemon.output() if c.daemon else ""), 30,
                    "the container's boot line")
    yield c, Scraper(int(line.group(1))), tmp
    c.stop()


def create_topic(c: Cluster, topic: str, queues: int) -> None:
    assert rpc(c.broker_addr(0), 17, {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues)}).code == 0
    wait_for(lambda: rpc(c.namesrv, 105, {"topic": topic}).code == 0, 10, f"{topic} routable")


def produce(c: Cluster, topic: str, count: int, logs: pathlib.Path) -> None:
    code, rows = ClientRun("produce", c.client_env(TOPIC=topic, COUNT=count), logs).wait(120)
    assert code == 0, rows[-3:]


def bytes_per_message(s: Scraper) -> float:
    m = s.get()
    return next(v for k, v in m.items() if k[0] == "rocketmq_bytes_in_total") / next(
        v for k, v in m.items() if k[0] == "rocketmq_messages_in_total")


def watch_pairs(s: Scraper, families: tuple[str, str], seconds: float, labels: dict[str, str],
                until: Callable[[], bool] = lambda: True) -> list[tuple[float, float]]:
    """The values two families' samples take (read from the same scrapes) while polled until ``until()`` holds
    and for ``seconds`` more."""
    seen, end = [], time.monotonic() + seconds
    key = tuple(labels.items())
    while not until() or time.monotonic() < end:
        if not until():
            end = time.monotonic() + seconds
        m = s.get()
        a, b = m.get((families[0], key)), m.get((families[1], key))
        if a is not None and b is not None:
            seen.append((a, b))
        time.sleep(0.25)  # sleep-ok: polling a rate as it moves through its window, not synchronisation
    return seen


def watch(s: Scraper, family: str, seconds: float, labels: dict[str, str]) -> list[float]:
    return [v for v, _ in watch_pairs(s, (family, family), seconds, labels)]


def test_families_labels_rates_and_diffs_after_known_traffic(cluster: tuple[Cluster, Scraper, pathlib.Path]) -> None:
    c, s, tmp = cluster
    first = s.text()
    for name, help_, _ in FAMILIES:  # every family of rocketmq-exporter, as it declares it
        assert f"# HELP {name} {help_}\n# TYPE {name} gauge\n" in first, name
    used = set().union(*(metric_names(e) for e in expressions(json.loads(DASHBOARD.read_text()))))
    assert all(f"# TYPE {n} gauge" in first for n in used)  # the Grafana dashboard's families are all served
    addr = c.broker_addr(0)
    runtime = s.find("rocketmq_brokeruntime_commitlog_maxoffset")
    assert [lab for lab, _ in runtime] == [{"cluster": "DefaultCluster", "brokerIP": addr, "brokerHost": "",
                                           "des": runtime[0][0]["des"], "boottime": runtime[0][0]["boottime"],
                                           "broker_version": runtime[0][0]["broker_version"]}]
    boottime = runtime[0][0]["boottime"]

    n, t = 200, "ExpT"
    create_topic(c, t, 4)
    topic = {"cluster": "DefaultCluster", "broker": "broker-a", "topic": t}
    producer = ClientRun("produce", c.client_env(TOPIC=t, COUNT=n), tmp / "p1")
    pairs = watch_pairs(s, ("rocketmq_producer_tps", "rocketmq_producer_message_size"), 8, topic,
                        lambda: producer.proc.poll() is not None)
    assert producer.wait(30)[0] == 0
    assert s.value("rocketmq_producer_offset", **topic) == n
    rates = [v for v, _ in pairs]
    # the burst's rate while the last minute window (6 samples here) holds it all, then 0 once it left the window
    assert any(n / 7.2 <= v <= n / 5.8 for v in rates), sorted(set(rates))
    assert max(rates) >= n / 6
    s.until("the producer rate back to 0 once the burst left the window",
            lambda: s.value("rocketmq_producer_tps", **topic) == 0.0, 30)
    per_message = bytes_per_message(s)  # the stored records' size (only this burst is stored so far)
    assert all(size / v == pytest.approx(per_message, rel=0.02) for v, size in pairs if v >= 10)
    assert s.value("rocketmq_brokeruntime_put_tps600", cluster="DefaultCluster") is not None
    assert s.find("rocketmq_brokeruntime_commitlog_maxoffset")[0][0]["boottime"] == boottime  # a stable label

    g = "ExpG"
    consumer = JavaConsumer(c, t, g, "ok", 16, tmp / "java-ok")
    try:
        wait_for(lambda: len(consumer.deliveries()) >= n, 60, "the Java consumer got the burst")
        group_t = {**topic, "group": g}
        assert max(watch(s, "rocketmq_consumer_tps", 2, group_t) or [0.0]) >= n / 7.2  # the pulls' rate
        s.until("the group's diff after it consumed everything",
                lambda: s.value("rocketmq_group_diff", group=g, topic=t, countOfOnlineConsumers="1",
                                msgModel="1") == 0)
        count = s.find("rocketmq_group_count", group=g)
        assert len(count) == 1 and count[0][1] == 1 and count[0][0]["localaddr"] == consumer.client_id
        assert re.fullmatch(r"127\.0\.0\.1:\d+", count[0][0]["caddr"])
        m = s.get()
        tps = m.get(("rocketmq_consumer_tps", tuple(group_t.items())), 0.0)
        size = m.get(("rocketmq_consumer_message_size", tuple(group_t.items())), 0.0)
        if tps >= 10:  # still in the window: bytes per message pulled = the stored records' size
            assert size / tps == pytest.approx(bytes_per_message(s), rel=0.03)
        assert s.value("rocketmq_consumer_offset", **group_t) == n
        assert s.value("rocketmq_group_get_latency_by_storetime", **group_t) == 0
        client = s.until("the Java consumer's own figures",
                         lambda: s.find("rocketmq_client_consume_ok_msg_tps", clientId=consumer.client_id, group=g,
                                        topic=t))
        assert re.fullmatch(r"127\.0\.0\.1:\d+", client[0][0]["clientAddr"])
        assert s.value("rocketmq_client_consume_fail_msg_count", clientId=consumer.client_id, group=g, topic=t) == 0
    finally:
        consumer.stop()

    extra = 50
    produce(c, t, extra, tmp / "p2")
    s.until("the diff of the messages sent since the group stopped",
            lambda: s.value("rocketmq_group_diff", group=g, topic=t, countOfOnlineConsumers="0",
                            msgModel="1") == extra)
    assert s.value("rocketmq_producer_offset", **topic) == n + extra
    pmdt = [name for name, _, _ in FAMILIES if name.startswith("rocketmq_brokeruntime_pmdt_")]
    s.until("the puts in the last full minute's put-time distribution",  # a minute = 6 samples here
            lambda: sum(v for k, v in s.get().items() if k[0] in pmdt) > 0, timeout=20)
    assert s.value("rocketmq_consumer_offset", **group_t) == n
    s.until("the time since the oldest unconsumed message was stored",
            lambda: (s.value("rocketmq_group_get_latency_by_storetime", **group_t) or 0) > 0)


def test_retry_and_dead_letter_diffs(cluster: tuple[Cluster, Scraper, pathlib.Path]) -> None:
    c, s, tmp = cluster
    k, t = 40, "ExpRetryT"
    create_topic(c, t, 2)
    produce(c, t, k, tmp / "p3")

    # a group whose consumer fails everything, retried once: every message ends in its DLQ
    g = "ExpDlqG"
    consumer = JavaConsumer(c, t, g, "fail", 1, tmp / "java-fail")
    try:
        sendbacks = []
        deadline = time.monotonic() + 90
        while s.value("rocketmq_topic_dlq_offset", cluster="DefaultCluster", broker="broker-a", group=g) != k:
            assert time.monotonic() < deadline, "the messages never reached the DLQ"
            sendbacks.append(s.value("rocketmq_send_back_nums", cluster="DefaultCluster", broker="broker-a", topic=t,
                                     group=g) or 0)
            time.sleep(0.25)  # sleep-ok: polling while the retries come back
        assert max(sendbacks) >= k  # the first round's send-backs within the last minute
    finally:
        consumer.stop()
    s.until("the DLQ's diff: nobody consumes it",
            lambda: s.value("rocketmq_group_dlqdiff", group=g, topic=f"%DLQ%{g}", countOfOnlineConsumers="0",
                            msgModel="1") == k)
    assert s.value("rocketmq_topic_retry_offset", cluster="DefaultCluster", broker="broker-a",
                   topic=f"%RETRY%{g}") == k
    s.until("the retries consumed", lambda: s.value("rocketmq_group_retrydiff", group=g, topic=f"%RETRY%{g}",
                                                    countOfOnlineConsumers="0", msgModel="1") == 0)
    assert s.value("rocketmq_group_diff", group=g, topic=t, countOfOnlineConsumers="0", msgModel="1") == 0

    # a group whose consumer fails each message once and stops before the retries come back (8 s)
    g2 = "ExpRetryG"
    consumer = JavaConsumer(c, t, g2, "failonce", 16, tmp / "java-failonce")
    try:
        s.until("every message sent back once", lambda: s.value(
            "rocketmq_send_back_nums", cluster="DefaultCluster", broker="broker-a", topic=t, group=g2) == k)
    finally:
        consumer.stop()
    assert all(d["reconsume"] == 0 for d in consumer.deliveries())  # it was gone before a retry came back
    s.until("the retry diff of the messages waiting in the group's retry topic",
            lambda: s.value("rocketmq_group_retrydiff", group=g2, topic=f"%RETRY%{g2}", countOfOnlineConsumers="0",
                            msgModel="1") == k, timeout=40)
    assert s.value("rocketmq_topic_retry_offset", cluster="DefaultCluster", broker="broker-a",
                   topic=f"%RETRY%{g2}") == k
    s.until("the group's offsets on the topic persisted by its shutdown",
            lambda: s.value("rocketmq_group_diff", group=g2, topic=t, countOfOnlineConsumers="0", msgModel="1") == 0)
