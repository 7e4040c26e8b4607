"""mqadmin's topic commands through real processes (a container with two brokers and its name server): what they
print, and what changed in the brokers and the name server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.integration.helpers.mqadmin import MQAdmin
from tests.support import Cluster, rpc, topics, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("mqadmin-topic"), brokers=2).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def mq(cluster: Cluster) -> MQAdmin:
    return MQAdmin(cluster.namesrv)


def route(c: Cluster, topic: str) -> dict[str, Any] | None:
    r = rpc(c.namesrv, 105, {"topic": topic})
    return dict(orjson.loads(r.body)) if r.code == 0 else None


def routed_on(c: Cluster, topic: str, brokers: int) -> bool:
    rt = route(c, topic)
    return rt is not None and len(rt["queueDatas"]) == brokers


def test_update_topic_on_a_cluster_reaches_every_master(cluster: Cluster, mq: MQAdmin) -> None:
    out = mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_topic", "-r", "4", "-w", "4")
    for addr in (cluster.broker_addr(0), cluster.broker_addr(1)):
        assert f"create topic to {addr} success." in out
        assert "T_topic" in topics(addr)
    assert out.rstrip().endswith("TopicConfig [topicName=T_topic, readQueueNums=4, writeQueueNums=4, perm=RW-, "
                                 "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={}]")
    wait_for(lambda: routed_on(cluster, "T_topic", 2), 10, "T_topic routed on both brokers")

    assert "T_topic" in mq.ok("topicList").splitlines()
    rows = [line.split() for line in mq.ok("topicList", "-c").splitlines()[1:]]
    assert ["DefaultCluster", "T_topic"] in rows
    assert mq.ok("topicClusterList", "-t", "T_topic") == "DefaultCluster\n"

    js = mq.ok("topicRoute", "-t", "T_topic")
    assert js.startswith("{\n\t\"brokerDatas\":[") and f'0:"{cluster.broker_addr(0)}"' in js
    listed = mq.ok("topicRoute", "-t", "T_topic", "-l").splitlines()
    assert listed[0].split() == ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"]
    assert listed[-1].split() == ["Total:", "2", "8", "8"]

    status = mq.ok("topicStatus", "-t", "T_topic").splitlines()
    assert status[0].split()[:2] == ["#Broker", "Name"] and len(status) == 1 + 8 + 2
    assert [r.split()[:2] for r in status[1:3]] == [["broker-a", "0"], ["broker-a", "1"]]
    assert status[-2:] == ["", "Topic Put TPS: 0.0"]


def test_update_topic_on_one_broker_and_order_conf(cluster: Cluster, mq: MQAdmin) -> None:
    out = mq.ok("updateTopic", "-b", cluster.broker_addr(1), "-t", "T_order", "-w", "2", "-r", "2", "-o", "true")
    assert "set broker orderConf. isOrder=true, orderConf=[broker-b:2]" in out
    assert "T_order" in topics(cluster.broker_addr(1)) and "T_order" not in topics(cluster.broker_addr(0))
    assert mq.ok("updateOrderConf", "-t", "T_order", "-m", "get") == \
        "get orderConf success. topic=[T_order], orderConf=[broker-b:2] "
    assert mq.ok("updateOrderConf", "-t", "T_order", "-m", "put", "-v", "broker-b:2;broker-a:2") == \
        "update orderConf success. topic=[T_order], orderConf=[broker-b:2;broker-a:2]"
    assert rpc(cluster.namesrv, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T_order"}).ext["value"] == \
        "broker-b:2;broker-a:2"
    assert mq.ok("updateOrderConf", "-t", "T_order", "-m", "delete") == "delete orderConf success. topic=[T_order]"
    assert rpc(cluster.namesrv, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T_order"}).code != 0


def test_update_topic_perm_and_allocate(cluster: Cluster, mq: MQAdmin) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_perm", "-r", "2", "-w", "2")
    wait_for(lambda: routed_on(cluster, "T_perm", 2), 10, "T_perm routed")
    out = mq.ok("updateTopicPerm", "-t", "T_perm", "-b", cluster.broker_addr(0), "-p", "4")
    assert f"update topic perm from 6 to 4 in {cluster.broker_addr(0)} success." in out

    def perms() -> dict[str, int]:
        rt = route(cluster, "T_perm") or {"queueDatas": []}
        return {q["brokerName"]: q["perm"] for q in rt["queueDatas"]}

    wait_for(lambda: perms() == {"broker-a": 4, "broker-b": 6}, 10, "broker-a's T_perm read-only in the route")
    assert mq.ok("updateTopicPerm", "-t", "T_perm", "-b", cluster.broker_addr(0), "-p", "4") == \
        "new perm equals to the old one!\n"
    mq.ok("updateTopicPerm", "-t", "T_perm", "-c", "DefaultCluster", "-p", "6")
    wait_for(lambda: perms() == {"broker-a": 6, "broker-b": 6}, 10, "T_perm writable again")

    alloc = orjson.loads(mq.ok("allocateMQ", "-t", "T_perm", "-i", "10.0.0.1,10.0.0.2"))["result"]
    assert sorted(alloc) == ["10.0.0.1", "10.0.0.2"] and sum(len(v) for v in alloc.values()) == 4
    assert {(q["brokerName"], q["queueId"]) for v in alloc.values() for q in v} == \
        {(b, i) for b in ("broker-a", "broker-b") for i in range(2)}


def test_delete_topic_from_brokers_and_name_server(cluster: Cluster, mq: MQAdmin) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_gone")
    wait_for(lambda: route(cluster, "T_gone") is not None, 10, "T_gone routed")
    out = mq.ok("deleteTopic", "-t", "T_gone", "-c", "DefaultCluster")
    assert out == "delete topic [T_gone] from cluster [DefaultCluster] success.\n" \
                  "delete topic [T_gone] from NameServer success.\n"
    assert all("T_gone" not in topics(cluster.broker_addr(i)) for i in range(2))
    assert route(cluster, "T_gone") is None


def test_bad_input_changes_nothing(cluster: Cluster, mq: MQAdmin) -> None:
    before = [topics(cluster.broker_addr(i)) for i in range(2)]
    # (malformed options and unknown commands: tests/unit/admin/test_cli.py)
    mq.fails("updateTopic", "-c", "NoSuchCluster", "-t", "T_x", needle="NoSuchCluster")
    mq.fails("updateTopic", "-b", "127.0.0.1:1", "-t", "T_x", needle="127.0.0.1:1")  # not a registered broker
    mq.fails("deleteTopic", "-c", "DefaultCluster", "-t", "T_never", needle="T_never")
    mq.fails("topicStatus", "-t", "T_never", needle="T_never")
    mq.fails("updateTopicPerm", "-t", "T_topic", "-b", "127.0.0.1:1", "-p", "2", needle="not exit")
    assert [topics(cluster.broker_addr(i)) for i in range(2)] == before
    no_ns = MQAdmin("")
    assert re.search("no name server address", no_ns("topicList").stderr)
