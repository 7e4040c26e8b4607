"""mqadmin's group commands through real processes, with the real RocketMQ client (C++ core) producing and
consuming: create topic → produce → consume → consumerProgress `Consume Diff Total: 0` → resetOffsetByTime -s 0 →
the diff is back → the consumer re-reads; with the consumer online (the broker tells it) and offline."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import pytest

from tests.integration.helpers.mqadmin import MQAdmin, diff_total
from tests.support import ClientRun, Cluster, rpc, wait_for

pytestmark = pytest.mark.integration
TOPIC, GROUP, N = "T_group", "G_rt", 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("mqadmin-group"), brokers=2).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def mq(cluster: Cluster) -> MQAdmin:
    return MQAdmin(cluster.namesrv)


def routable(c: Cluster, topic: str) -> bool:
    return bool(rpc(c.namesrv, 105, {"topic": topic}).code == 0)


def test_sub_group_create_show_delete(cluster: Cluster, mq: MQAdmin) -> None:
    out = mq.ok("updateSubGroup", "-c", "DefaultCluster", "-g", "G_admin", "-r", "3", "-o", "true")
    assert out.count("create subscription group to ") == 2 and "retryMaxTimes=3" in out
    cfg = mq.ok("getConsumerConfig", "-g", "G_admin")
    assert "=============================DefaultCluster:broker-a=============================" in cfg
    assert re.search(r"^retryMaxTimes\s+=  3$", cfg, re.M) and re.search(r"^consumeMessageOrderly\s+=  true$", cfg, re.M)
    out = mq.ok("deleteSubGroup", "-b", cluster.broker_addr(0), "-g", "G_admin", "-r", "true")
    assert out == f"delete subscription group [G_admin] from broker [{cluster.broker_addr(0)}] success.\n"
    cfg = mq.ok("getConsumerConfig", "-g", "G_admin")
    assert "broker-a" not in cfg and "DefaultCluster:broker-b" in cfg
    mq.fails("deleteSubGroup", "-b", cluster.broker_addr(0), "-g", "G_admin", needle="G_admin")
    mq.fails("getConsumerConfig", "-g", "G_never", needle="G_never")
    mq.fails("updateSubGroup", "-g", "G_x", needle="-b")
    mq.fails("updateSubGroup", "-c", "DefaultCluster", "-g", "G_x", "-p", "{oops", needle="not JSON")


def test_round_trip_progress_reset_and_reread(cluster: Cluster, mq: MQAdmin, tmp_path: pathlib.Path) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "2", "-w", "2")
    wait_for(lambda: routable(cluster, TOPIC), 10, f"{TOPIC} routable")
    code, rows = ClientRun("produce", cluster.client_env(TOPIC=TOPIC, COUNT=N, GROUP=GROUP), tmp_path / "p").wait(90)
    assert code == 0, rows[-3:]

    # online: the consumer stays (COUNT above what exists); the reset reaches it through the broker
    consumer = ClientRun("push", cluster.client_env(TOPIC=TOPIC, GROUP=GROUP, COUNT=N + 1, TIMEOUT=120),
                         tmp_path / "c1")
    try:
        wait_for(lambda: len(consumer.received()) >= N, 60, "the consumer read every message")
        progress = mq.until(("consumerProgress", "-g", GROUP), rf"(^{TOPIC}\s+broker-.*\n){{4}}(.*\n)*"
                            r"Consume Diff Total: 0$", 30, "the group's offsets committed on both brokers").string
        assert progress.splitlines()[0].startswith("#Topic") and "Consume TPS: " in progress
        queues = [line.split() for line in progress.splitlines()[1:] if line.startswith(TOPIC)]
        assert len(queues) == 4 and sum(int(q[3]) for q in queues) == N  # broker offsets

        conn = mq.ok("consumerConnection", "-g", GROUP)
        assert conn.startswith("#ClientId") and "ConsumeType: CONSUME_PASSIVELY" in conn
        assert re.search(rf"^{TOPIC}\s+\*$", conn, re.M)
        assert "Same subscription in the same group of consumer" in mq.ok("consumerStatus", "-g", GROUP)
        listing = mq.ok("consumerProgress")
        assert re.search(rf"^{GROUP}\s+1\s+V\S+\s+PUSH\s+CLUSTERING\s+\d+\s+0$", listing, re.M), listing

        out = mq.ok("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "0")
        assert f"group[{GROUP}], topic[{TOPIC}], force[true], timestamp(string)[0], timestamp(long)[0]" in out
        table = [line.split() for line in out.splitlines() if line.startswith("broker-")]
        assert len(table) == 4 and all(row[2] == "0" for row in table)
        progress = mq.ok("consumerProgress", "-g", GROUP)
        assert diff_total(progress) == N, progress  # the diff is back: the online consumer took the reset
    finally:
        consumer.kill()
    # the group re-reads every message, then goes offline with its offsets committed
    again = ClientRun("push", cluster.client_env(TOPIC=TOPIC, GROUP=GROUP, COUNT=N + 1, TIMEOUT=90), tmp_path / "c2")
    try:
        wait_for(lambda: len(again.received()) >= N, 60, "the group re-reading every message")
        assert sorted(d["props"]["seq"] for d in again.received()) == sorted(str(i) for i in range(N))
        mq.until(("consumerProgress", "-g", GROUP), r"^Consume Diff Total: 0$", 30, "the re-read committed")
    finally:
        again.kill()

    # offline: refusals change nothing; a reset to a date brings the diff back
    mq.fails("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "2024-01-01 00:00", needle="yyyy-MM-dd#HH:mm:ss:SSS")
    mq.fails("resetOffsetByTime", "-g", "G_typo", "-t", TOPIC, "-s", "0", needle="G_typo")
    mq.fails("resetOffsetByTime", "-g", GROUP, "-t", "T_nope", "-s", "0", needle="T_nope")
    assert diff_total(mq.ok("consumerProgress", "-g", GROUP)) == 0
    out = mq.ok("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "2000-01-01#00:00:00:000")
    assert "#brokerName" in out
    assert diff_total(mq.ok("consumerProgress", "-g", GROUP)) == N

    clone = mq.ok("cloneGroupOffset", "-s", GROUP, "-d", "G_clone", "-t", TOPIC)
    assert clone == f"clone group offset success. srcGroup[{GROUP}], destGroup=[G_clone], topic[{TOPIC}]"
    stats = mq.ok("brokerConsumeStats", "-b", cluster.broker_addr(0))
    assert stats.rstrip().splitlines()[-1].startswith("Diff Total: ")


def test_producer_connection_of_a_live_producer(cluster: Cluster, mq: MQAdmin, tmp_path: pathlib.Path) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_pc")
    wait_for(lambda: routable(cluster, "T_pc"), 10, "T_pc routable")
    producer = ClientRun("produce", cluster.client_env(TOPIC="T_pc", COUNT=400, PACE_MS=50, PGROUP="PG_live"),
                         tmp_path / "p")
    try:
        wait_for(lambda: any("sent" in r for r in producer.rows), 30, "the producer sending")
        out = mq.until(("producerConnection", "-g", "PG_live", "-t", "T_pc"), r"^0001  \S+@\S+", 20,
                       "the producer's connection").string
        assert re.search(r"^0001  \S+\s+127\.0\.0\.1:\d+\s+CPP\s+V\S+$", out, re.M), out
    finally:
        producer.kill()
    mq.fails("producerConnection", "-g", "PG_nobody", "-t", "T_pc", needle="PG_nobody")
    mq.fails("consumerConnection", "-g", "G_nobody", needle="G_nobody")
