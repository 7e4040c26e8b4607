"""The broker driven by the real RocketMQ client (rocketmq-python-cvs 2.1.0.3, C++ core) in a subprocess."""

from __future__ import annotations

import collections
import pathlib

import orjson
import pytest

from brokerd.message import decode_records
from tests.support import ClientRun, Cluster, received, rpc, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: pathlib.Path):
    c = Cluster(tmp_path, brokers=1, messageDelayLevel="1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s").start()
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


def consumer_count(c: Cluster, group: str) -> int:
    r = rpc(c.broker_addr(), 38, {"consumerGroup": group})
    return len(orjson.loads(r.body)["consumerIdList"]) if r.code == 0 else 0


def test_thousand_messages_two_push_consumers_exactly_once(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    topic, group = "T_exactly_once", "G_two"
    # create the topic first so consumers can subscribe before the producer runs
    assert rpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4",
                                           "perm": "6"}).code == 0
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": topic}).code == 0, 10, "topic routable")
    consumers = [ClientRun("push", cluster.client_env(TOPIC=topic, GROUP=group, COUNT=10**6, TIMEOUT=120),
                           tmp_path / f"c{i}") for i in range(2)]
    try:
        wait_for(lambda: consumer_count(cluster, group) == 2, 30, "both consumers registered")
        code, rows = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=1000, TAGS="TagA,TagB,TagC"),
                               tmp_path / "p").wait(180)
        assert code == 0, rows[-3:]
        sent = {r["sent"]: r for r in rows if "sent" in r}
        assert len(sent) == 1000 and all(r["status"] == "OK" for r in sent.values())

        def all_received() -> bool:
            return len({d["props"]["seq"] for c in consumers for d in c.received()}) >= 1000

        wait_for(all_received, 90, "1000 distinct messages across the group")
        deliveries = [d for c in consumers for d in c.received()]
        per_seq = collections.Counter(d["props"]["seq"] for d in deliveries)
        assert len(per_seq) == 1000 and max(per_seq.values()) == 1, "a message was delivered twice in one group"
        assert all(len(c.received()) > 0 for c in consumers), "both consumers of the group take part"
        for d in deliveries:
            i = int(d["props"]["seq"])
            assert d["keys"] == f"key-{i}" and d["tags"] == "TagA,TagB,TagC".split(",")[i % 3]
            assert d["body"] == f"body-{i}-é✓" and d["props"]["color"] == f"blue-{i % 3}"
            assert d["id"] == sent[i]["msg_id"]
    finally:
        for c in consumers:
            c.kill()


def test_pull_consumer_reads_from_offset_zero(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    code, _ = ClientRun("produce", cluster.client_env(TOPIC="T_pull", COUNT=120), tmp_path / "p").wait(60)
    assert code == 0
    code, rows = ClientRun("pull", cluster.client_env(TOPIC="T_pull", GROUP="G_pull", COUNT=120, TIMEOUT=60),
                           tmp_path / "c").wait(90)
    got = [r["recv"] for r in rows if "recv" in r]
    assert code == 0 and {int(d["props"]["seq"]) for d in got} == set(range(120))


def test_tag_filtering(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    code, _ = ClientRun("produce", cluster.client_env(TOPIC="T_tags", COUNT=60, TAGS="TagA,TagB,TagC"),
                        tmp_path / "p").wait(60)
    assert code == 0
    code, rows = ClientRun("pull", cluster.client_env(TOPIC="T_tags", GROUP="G_tags", COUNT=20, EXPR="TagB",
                                                      TIMEOUT=30), tmp_path / "c").wait(60)
    got = [r["recv"] for r in rows if "recv" in r]
    assert code == 0 and {d["tags"] for d in got} == {"TagB"} and len({d["props"]["seq"] for d in got}) == 20


def committed_total(c: Cluster, group: str, topic: str, queues: int = 4) -> int:
    total = 0
    for q in range(queues):
        r = rpc(c.broker_addr(), 14, {"consumerGroup": group, "topic": topic, "queueId": str(q),
                                      "setZeroIfNotFound": "false"})
        total += int(r.ext["offset"]) if r.code == 0 else 0
    return total


def test_offsets_committed_and_resumed_after_consumer_restart(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    topic, group = "T_resume", "G_resume"
    code, _ = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=100), tmp_path / "p1").wait(60)
    assert code == 0
    first = ClientRun("push", cluster.client_env(TOPIC=topic, GROUP=group, COUNT=100, TIMEOUT=60, LINGER_S=30),
                      tmp_path / "c1")
    try:
        wait_for(lambda: len({d["props"]["seq"] for d in first.received()}) >= 100, 60, "first consumer got 100")
        wait_for(lambda: committed_total(cluster, group, topic) >= 100, 30, "offsets committed to the broker")
    finally:
        first.kill()
    code, _ = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=50, START_AT=100), tmp_path / "p2").wait(60)
    assert code == 0
    second = ClientRun("push", cluster.client_env(TOPIC=topic, GROUP=group, COUNT=50, TIMEOUT=60), tmp_path / "c2")
    code, rows = second.wait(90)
    seqs = {int(r["recv"]["props"]["seq"]) for r in rows if "recv" in r}
    assert code == 0 and seqs == set(range(100, 150)), f"resumed consumer got {sorted(seqs)[:10]}..."


def test_delay_level_message_not_delivered_before_its_delay(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    topic, group = "T_delay", "G_delay"
    assert rpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4"}).code == 0
    consumer = ClientRun("push", cluster.client_env(TOPIC=topic, GROUP=group, COUNT=5, TIMEOUT=60), tmp_path / "c")
    wait_for(lambda: consumer_count(cluster, group) == 1, 30, "consumer registered")
    code, rows = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=5, DELAY_LEVEL=2), tmp_path / "p").wait(60)
    assert code == 0
    sent = {r["sent"]: r["sent_at_ms"] for r in rows if "sent" in r}
    code, rows = consumer.wait(60)
    got = [r["recv"] for r in rows if "recv" in r]
    assert code == 0 and len(got) == 5
    for d in got:  # level 2 is 2 s in this broker's messageDelayLevel
        assert d["recv_at_ms"] - sent[int(d["props"]["seq"])] >= 2000
        assert d["topic"] == topic


@pytest.mark.slow
def test_failed_message_retried_then_dead_lettered(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    topic, group = "T_retry", "G_retry"
    # the C++ client sends maxReconsumeTimes=16 with each send-back; retries use 1-2 s delay levels here
    assert rpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1"}).code == 0
    consumer = ClientRun("push", cluster.client_env(TOPIC=topic, GROUP=group, COUNT=10**6, FAIL_ALL=1, TIMEOUT=120),
                         tmp_path / "c")
    try:
        wait_for(lambda: consumer_count(cluster, group) == 1, 30, "consumer registered")
        code, _ = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=3), tmp_path / "p").wait(60)
        assert code == 0
        dlq = "%DLQ%" + group

        def dlq_count() -> int:
            r = rpc(cluster.broker_addr(), 30, {"topic": dlq, "queueId": "0"})
            return int(r.ext.get("offset", 0)) if r.code == 0 else 0

        wait_for(lambda: dlq_count() >= 3, 90, "3 messages in the dead-letter queue")
        # This client hands a whole pulled batch to one callback loop that stops at the first failure, so a
        # retry round may skip the callback for batch-mates (a message may even never reach it); every message
        # is still sent back each round (the dead-letter queue's content is checked below).
        deliveries = consumer.received()
        assert {d["props"]["seq"] for d in deliveries} <= {"0", "1", "2"}
        retried = [d for d in deliveries if d["reconsume_times"] > 0]
        assert retried and all(d["props"]["RETRY_TOPIC"] == topic and d["topic"] == topic for d in retried)
        assert max(d["reconsume_times"] for d in deliveries) == 16
    finally:
        consumer.kill()
    r = rpc(cluster.broker_addr(), 11, {"consumerGroup": "G_dlq_reader", "topic": "%DLQ%" + group, "queueId": "0",
                                        "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                                        "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
    assert r.code == 0

    msgs = decode_records(r.body)
    assert sorted(m.properties["seq"] for m in msgs) == ["0", "1", "2"]
    # one send-back per round: the first delivery plus 16 reconsumes (the client's maxReconsumeTimes)
    assert all(m.reconsume_times == 17 and m.properties["RETRY_TOPIC"] == topic for m in msgs)
    assert all(m.body.decode().startswith("body-") for m in msgs)


def test_transactional_producer_commit_rollback_and_check_back(tmp_path: pathlib.Path) -> None:
    """The C++ core's transactional producer: committed messages are consumed, rolled-back ones never are, and
    an unknown outcome is settled by the broker's check-back (CHECK_TRANSACTION_STATE → commit)."""
    c = Cluster(tmp_path, brokers=1, transactionTimeOut="500", transactionCheckInterval="200").start()
    try:
        topic = "T_txn"
        assert rpc(c.broker_addr(), 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4"}).code == 0
        wait_for(lambda: rpc(c.namesrv, 105, {"topic": topic}).code == 0, 10, "topic routable")
        producer = ClientRun("txn", c.client_env(TOPIC=topic, COUNT=9, OUTCOMES="commit,rollback,unknown",
                                                 LINGER=20), tmp_path / "p")  # fmt: skip
        wait_for(lambda: any("sent_ok" in r for r in producer.rows), 60, "all transactional sends")
        assert [r for r in producer.rows if "sent_ok" in r][0]["sent_ok"] == 9
        wait_for(lambda: len([r for r in producer.rows if "checked" in r]) >= 3, 30, "a check-back per unknown one")
        consumer = ClientRun("pull", c.client_env(TOPIC=topic, GROUP="G_txn", COUNT=6, TIMEOUT=60), tmp_path / "c")
        code, rows = consumer.wait(90)
        producer.kill()
        assert code == 0, rows[-3:]
        seqs = sorted(int(d["props"]["seq"]) for d in received(rows))
        assert seqs == [0, 2, 3, 5, 6, 8]  # commit (i % 3 == 0) and unknown-then-commit (i % 3 == 2)
        assert {r["checked"] for r in producer.rows if "checked" in r} >= {"key-2", "key-5", "key-8"}
    finally:
        assert c.stop() == 0
