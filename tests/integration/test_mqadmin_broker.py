"""mqadmin's broker, cluster, name server and export commands through real processes: what they print and what
changed (broker configs, name server configs and KV, write permissions a real producer follows, exported files)."""

from __future__ import annotations

import json
import pathlib
import re
import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.integration.helpers.mqadmin import MQADMIN, MQAdmin
from tests.support import ClientRun, Cluster, rpc, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("mqadmin-broker"), brokers=2).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def mq(cluster: Cluster) -> MQAdmin:
    return MQAdmin(cluster.namesrv)


def max_offsets(c: Cluster, i: int, topic: str, queues: int = 4) -> int:
    return sum(int(rpc(c.broker_addr(i), 30, {"topic": topic, "queueId": str(q)}).ext.get("offset", 0))
               for q in range(queues))


def test_cluster_list_and_broker_status(cluster: Cluster, mq: MQAdmin) -> None:
    rows = mq.ok("clusterList").splitlines()
    assert rows[0].split()[:5] == ["#Cluster", "Name", "#Broker", "Name", "#BID"] and rows[0].endswith("#ACTIVATED")
    assert [r.split()[:4] for r in rows[1:]] == [["DefaultCluster", "broker-a", "0", cluster.broker_addr(0)],
                                                 ["DefaultCluster", "broker-b", "0", cluster.broker_addr(1)]]
    assert all("V5_3_3" in r for r in rows[1:])
    more = mq.ok("clusterList", "-m").splitlines()
    assert more[0].split() == ["#Cluster", "Name", "#Broker", "Name", "#InTotalYest", "#OutTotalYest",
                               "#InTotalToday", "#OutTotalToday"] and len(more) == 3
    mq.fails("clusterList", "-c", "NoCluster", needle="NoCluster")

    status = mq.ok("brokerStatus", "-b", cluster.broker_addr(0))
    assert re.search(r"^brokerVersionDesc\s+: V5_3_3$", status, re.M)
    keys = [ln.split(":")[0].strip() for ln in status.splitlines()]
    assert keys == sorted(keys)
    both = mq.ok("brokerStatus", "-c", "DefaultCluster")
    assert re.search(rf"^{re.escape(cluster.broker_addr(1))}\s+brokerVersionDesc\s+: V5_3_3$", both, re.M)
    mq.fails("brokerStatus", "-b", "127.0.0.1:1", needle="127.0.0.1:1")


def test_broker_config_get_and_update(cluster: Cluster, mq: MQAdmin) -> None:
    addr = cluster.broker_addr(1)
    assert mq.ok("updateBrokerConfig", "-b", addr, "-k", "fileReservedTime", "-v", "36") == \
        f"update broker config success, {addr}\n"
    cfg = mq.ok("getBrokerConfig", "-b", addr)
    assert cfg.startswith(f"============{addr}============\n")
    assert f"{'fileReservedTime':<50}=  36\n" in cfg
    whole = mq.ok("getBrokerConfig", "-c", "DefaultCluster")
    assert f"============Master: {cluster.broker_addr(0)}============" in whole
    out = mq.ok("updateBrokerConfig", "-c", "DefaultCluster", "-k", "fileReservedTime", "-v", "24")
    assert out.count("update broker config success, ") == 2
    assert f"{'fileReservedTime':<50}=  24\n" in mq.ok("getBrokerConfig", "-b", cluster.broker_addr(0))
    mq.fails("updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "9", needle="brokerPermission")
    mq.fails("updateBrokerConfig", "-b", addr, "-k", "storePathRootDir", "-v", "/elsewhere", needle="black list")
    assert f"{'fileReservedTime':<50}=  24\n" in mq.ok("getBrokerConfig", "-b", addr)
    admin = f"127.0.0.1:{cluster.admin_port}"
    via = mq.ok("getBrokerConfig", "--brokerContainerAddr", admin, "--brokerIdentity", "DefaultCluster:broker-b:0")
    assert via.startswith("============DefaultCluster:broker-b:0============") and "fileReservedTime" in via


def test_wipe_write_perm_moves_a_real_producer_to_the_other_broker(cluster: Cluster, mq: MQAdmin,
                                                                  tmp_path: pathlib.Path) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_wipe", "-r", "4", "-w", "4")
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": "T_wipe"}).code == 0, 10, "T_wipe routable")
    assert ClientRun("produce", cluster.client_env(TOPIC="T_wipe", COUNT=20), tmp_path / "p1").wait(90)[0] == 0
    before = [max_offsets(cluster, i, "T_wipe") for i in range(2)]
    assert all(n > 0 for n in before)  # both brokers took sends

    out = mq.ok("wipeWritePerm", "-b", "broker-a")
    wiped = re.fullmatch(rf"wipe write perm of broker\[broker-a\] in name server\[{cluster.namesrv}\] OK, (\d+)\n", out)
    assert wiped and int(wiped.group(1)) > 0, out
    perms = {r.split()[1]: r.split()[-1] for r in mq.ok("topicRoute", "-t", "T_wipe", "-l").splitlines()
             if r.startswith("DefaultCluster")}
    assert perms == {"broker-a": "4", "broker-b": "6"}  # broker-a read-only in the name server's route
    assert ClientRun("produce", cluster.client_env(TOPIC="T_wipe", COUNT=20), tmp_path / "p2").wait(90)[0] == 0
    after = [max_offsets(cluster, i, "T_wipe") for i in range(2)]
    assert after[0] == before[0] and after[1] == before[1] + 20  # every send went to broker-b
    sent = mq.ok("sendMessage", "-t", "T_wipe", "-p", "x")
    assert sent.splitlines()[1].startswith("broker-b")

    out = mq.ok("addWritePerm", "-b", "broker-a")
    assert out.startswith(f"add write perm of broker[broker-a] in name server[{cluster.namesrv}] OK, ")
    assert ClientRun("produce", cluster.client_env(TOPIC="T_wipe", COUNT=20), tmp_path / "p3").wait(90)[0] == 0
    assert max_offsets(cluster, 0, "T_wipe") > after[0]
    mq.fails("wipeWritePerm", "-b", "broker-zz", needle="broker-zz")


def test_name_server_config_and_kv(cluster: Cluster, mq: MQAdmin) -> None:
    cfg = mq.ok("getNamesrvConfig")
    assert cfg.startswith(f"============{cluster.namesrv}============\n") and re.search(r"^\w+\s+=  ", cfg, re.M)
    out = mq.ok("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert out == f"update name server config success![{cluster.namesrv}]\norderMessageEnable : true\n"
    assert re.search(r"^orderMessageEnable\s+=  true$", mq.ok("getNamesrvConfig"), re.M)
    assert mq.ok("updateKvConfig", "-s", "NS1", "-k", "k1", "-v", "v1") == \
        "create or update kv config to namespace success.\n"
    assert rpc(cluster.namesrv, 101, {"namespace": "NS1", "key": "k1"}).ext.get("value") == "v1"
    assert mq.ok("deleteKvConfig", "-s", "NS1", "-k", "k1") == "delete kv config from namespace success.\n"
    assert rpc(cluster.namesrv, 101, {"namespace": "NS1", "key": "k1"}).code != 0
    mq.fails("updateKvConfig", "-s", "NS1", "-k", "k1", needle="Missing required option: v")


def test_maintenance_and_stats(cluster: Cluster, mq: MQAdmin) -> None:
    for cmd in ("cleanExpiredCQ", "cleanUnusedTopic", "deleteExpiredCommitLog"):
        assert mq.ok(cmd, "-b", cluster.broker_addr(0)) == "success"
        assert mq.ok(cmd, "-c", "DefaultCluster") == "success"
    stats = mq.ok("statsAll").splitlines()
    assert stats[0].split() == ["#Topic", "#Consumer", "Group", "#Accumulation", "#InTPS", "#OutTPS",
                                "#InMsg24Hour", "#OutMsg24Hour"]
    assert any(r.startswith("TBW102") for r in stats[1:])
    only = mq.ok("statsAll", "-t", "TBW102").splitlines()
    assert len(only) == 2 and only[1].startswith("TBW102") and only[1].rstrip().endswith("NO_CONSUMER")


def test_cluster_rt_prints_a_row_per_broker_each_interval(cluster: Cluster, mq: MQAdmin) -> None:
    # clusterRT runs until stopped, as RocketMQ's does: read its first rows, then interrupt it
    proc = subprocess.Popen([MQADMIN, "clusterRT", "-a", "3", "-s", "16", "-i", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=mq.env)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 130  # Ctrl-C ends it at once
    assert lines[0].split() == ["#Cluster", "Name", "#Broker", "Name", "#RT", "#successCount", "#failCount"]
    assert [ln.split()[:2] for ln in lines[1:]] == [["DefaultCluster", "broker-a"], ["DefaultCluster", "broker-b"]]
    assert all(ln.split()[3:] == ["3", "0"] for ln in lines[1:])


def test_exports(cluster: Cluster, mq: MQAdmin, tmp_path: pathlib.Path) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_export", "-r", "2", "-w", "2")
    mq.ok("updateSubGroup", "-c", "DefaultCluster", "-g", "G_export")
    out = mq.ok("exportMetadata", "-c", "DefaultCluster", "-f", str(tmp_path))
    assert out == f"export {tmp_path}/metadata.json success\n"
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["topicConfigTable"]["T_export"]["writeQueueNums"] == 4  # summed over the two brokers
    assert "G_export" in meta["subscriptionGroupTable"] and "TBW102" not in meta["topicConfigTable"]
    assert not any(t.startswith("%RETRY%") for t in meta["topicConfigTable"])
    assert mq.ok("exportMetadata", "-b", cluster.broker_addr(0), "-t", "-f", str(tmp_path)) == \
        f"export {tmp_path}/topic.json success"
    assert json.loads((tmp_path / "topic.json").read_text())["topicConfigTable"]["T_export"]["writeQueueNums"] == 2
    assert mq.ok("exportConfigs", "-c", "DefaultCluster", "-f", str(tmp_path)) == \
        f"export {tmp_path}/configs.json success"
    configs = json.loads((tmp_path / "configs.json").read_text())
    assert configs["clusterScale"] == {"masterBrokerSize": 2, "namesrvSize": 1, "slaveBrokerSize": 0}
    assert configs["brokerConfigs"]["broker-a"]["brokerName"] == "broker-a"
    assert mq.ok("exportMetrics", "-c", "DefaultCluster", "-f", str(tmp_path)) == \
        f"export {tmp_path}/metrics.json success"
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["evaluateReport"]) == {"broker-a", "broker-b"} and "totalTps" in metrics["totalData"]
    assert metrics["evaluateReport"]["broker-a"]["runtimeQuota"]["topicSize"] >= 1
    mq.fails("exportConfigs", "-c", "NoCluster", "-f", str(tmp_path), needle="NoCluster")


@pytest.mark.slow
def test_wipe_write_perm_moves_a_running_producer(cluster: Cluster, mq: MQAdmin, tmp_path: pathlib.Path) -> None:
    """A producer already sending follows the wiped permission at its next route refresh (30 s in the client)."""
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_move", "-r", "4", "-w", "4")
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": "T_move"}).code == 0, 10, "T_move routable")
    producer = ClientRun("produce", cluster.client_env(TOPIC="T_move", COUNT=400, PACE_MS=200), tmp_path / "p")
    try:
        wait_for(lambda: sum(1 for r in producer.rows if "sent" in r) >= 10, 30, "the producer sending")
        mq.ok("wipeWritePerm", "-b", "broker-a")
        seen: list[tuple[int, int]] = []

        def moved() -> bool:
            seen.append((max_offsets(cluster, 0, "T_move"), max_offsets(cluster, 1, "T_move")))
            return len(seen) > 3 and seen[-4][0] == seen[-1][0] and seen[-1][1] > seen[-4][1] + 5
        wait_for(moved, 60, "the running producer sending to broker-b only", interval=2.0)
    finally:
        producer.kill()
        mq.ok("addWritePerm", "-b", "broker-a")
