"""RocketMQ's own admin tool (the Java `mqadmin`, org.apache.rocketmq.tools.command.MQAdminStartup 5.3.1 from Maven
Central) against our name server, brokers and container, as an operator runs it: what it prints is what it
prints against RocketMQ (its tables are its own; the values come from our answers) and what it changes, changes.

A real Java producer and push consumer (tests/clients/java/remoting: org.pyrmq.tests.admin.Clients) stay online
so the connection, progress, status and reset commands have someone to look at. One JVM costs ~1 s of CPU and
~6 s of its client's shutdown: independent commands run in parallel, one JVM each."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from brokerd.namesrv.lenient_json import loads
from tests.java_support import JavaLines, java_classpath
from tests.support import Cluster, broker_port, rpc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow,  # a JVM per command: ~2.5 min in all
              pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None,
                                 reason="java and mvn are required (scripts/test installs them)")]

TOPIC, GROUP, PGROUP, COUNT = "TopicJ", "GroupJ", "PGroupJ", 20
MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
TRANSIENT = ("RemotingTimeoutException", 'because "localHost" is null')  # failures of the machine, not of a command
PARALLEL_JVMS = 6  # more JVMs starting at once on 2 cores make the tools' own 3 s timeouts fire


@pytest.fixture(scope="module")
def classpath() -> str:
    return java_classpath("remoting")


def mqadmin(cp: str, args: Sequence[str], *, home: pathlib.Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One `mqadmin <args>` (a JVM); ``home``: ROCKETMQ_HOME, whose conf/tools.yml holds the ACL credentials.
    The tool's own request timeouts are 3 s: on a loaded 2-core machine (other suites, many JVMs starting) one can
    fire, and the JVM may fail to read the host's address while other suites change network interfaces; a command
    that failed that way is run again, as an operator would (twice at most)."""
    props = [f"-Drocketmq.home.dir={home}"] if home else []
    cmd = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *props, "-cp", cp, MAIN, *args]
    env = {**os.environ, "ROCKETMQ_HOME": str(home)} if home else None
    for _ in range(3):  # in a scratch directory: consumerStatus writes a file per client where it runs
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir())
        if not any(sign in r.stdout + r.stderr for sign in TRANSIENT):
            break
    return r


def run_all(cp: str, commands: Sequence[Sequence[str]], **kw: Any) -> list[subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=PARALLEL_JVMS) as pool:
        return list(pool.map(lambda args: mqadmin(cp, args, **kw), commands))


def out(r: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that worked (RocketMQ's tool exits 0 and prints a stack trace when it fails)."""
    assert r.returncode == 0 and "Exception" not in r.stderr + r.stdout, f"{r.args[-8:]}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def printed(r: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that did not fail as a whole (its report may carry a per-item exception, e.g. a
    message track of a group without a retry topic: RocketMQ prints those inline too)."""
    assert r.returncode == 0 and "command failed" not in r.stderr + r.stdout, f"{r.args[-8:]}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def table(text: str, header: str) -> list[list[str]]:
    """The rows after the line starting with ``header`` up to the first empty line, split on runs of 2+ spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


class JavaClients(JavaLines):
    """org.pyrmq.tests.admin.Clients: a producer and a push consumer online until stopped."""

    def __init__(self, cp: str, namesrv: str, logs: pathlib.Path) -> None:
        super().__init__(["java", "-Xmx192m", f"-Drocketmq.client.logRoot={logs}", "-cp", cp,
                          "org.pyrmq.tests.admin.Clients", namesrv, TOPIC, PGROUP, GROUP, str(COUNT)], cwd=logs)

    def sent(self) -> list[dict[str, Any]]:
        return self.of("sent")

    def received(self) -> list[dict[str, Any]]:
        return self.of("recv")

    @property
    def client_id(self) -> str:
        return str(next(r["clientId"] for r in list(self.rows) if "ready" in r))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, classpath: str) -> Iterator[tuple[Cluster, JavaClients]]:
    c = Cluster(tmp_path_factory.mktemp("java_mqadmin"), brokers=2).start()
    for i in range(2):
        assert rpc(c.broker_addr(i), 17, {"topic": TOPIC, "readQueueNums": "4", "writeQueueNums": "4"}).code == 0
    wait_for(lambda: rpc(c.namesrv, 105, {"topic": TOPIC}).code == 0, 15, "the topic routed")
    clients = JavaClients(classpath, c.namesrv, tmp_path_factory.mktemp("java-clients"))
    try:
        wait_for(lambda: any("ready" in r for r in clients.rows), 60, "the Java producer's sends")
        wait_for(lambda: len({m["msgId"] for m in clients.received()}) >= COUNT, 60, "the Java consumer's receipts")
        wait_for(lambda: puts_counted(c) >= COUNT, 40, "the puts in the brokers' statistics (sampled every 10 s)")
        yield c, clients
    finally:
        clients.stop()
        assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


def puts_counted(c: Cluster) -> int:
    total = 0
    for i in range(2):
        r = rpc(c.broker_addr(i), 315, {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC})
        total += int(json.loads(r.body or b"")["statsMinute"]["sum"]) if r.code == 0 else 0
    return total


def test_read_only_commands(deployment: tuple[Cluster, JavaClients], classpath: str) -> None:
    """Topic, group, message, broker and name-server views, all at once (one JVM each)."""
    c, clients = deployment
    ns = ["-n", c.namesrv]
    b0 = c.broker_addr(0)
    five = next(m for m in clients.sent() if m["key"] == "key-5")
    five_addr = c.broker_addr(0 if five["broker"] == "broker-a" else 1)
    commands = {
        "topicList": ["topicList", *ns], "topicListC": ["topicList", *ns, "-c"],
        "topicRoute": ["topicRoute", *ns, "-t", TOPIC], "topicStatus": ["topicStatus", *ns, "-t", TOPIC],
        "topicClusterList": ["topicClusterList", *ns, "-t", TOPIC],
        "allocateMQ": ["allocateMQ", *ns, "-t", TOPIC, "-i", "10.0.0.1,10.0.0.2"],
        "missingTopic": ["topicStatus", *ns, "-t", "NoSuchTopicJ"],
        "consumerProgress": ["consumerProgress", *ns, "-g", GROUP, "-s", "true"],
        "consumerConnection": ["consumerConnection", *ns, "-g", GROUP],
        "producerConnection": ["producerConnection", *ns, "-g", PGROUP, "-t", TOPIC],
        "consumerStatus": ["consumerStatus", *ns, "-g", GROUP], "getConsumerConfig": ["getConsumerConfig", *ns, "-g", GROUP],
        "brokerConsumeStats": ["brokerConsumeStats", *ns, "-b", b0],
        "queryMsgByKey": ["queryMsgByKey", *ns, "-t", TOPIC, "-k", "key-5"],
        "queryMsgById": ["queryMsgById", *ns, "-t", TOPIC, "-i", five["offsetMsgId"]],
        "queryMsgByUniqueKey": ["queryMsgByUniqueKey", *ns, "-t", TOPIC, "-i", five["msgId"]],
        "queryMsgByOffset": ["queryMsgByOffset", *ns, "-t", TOPIC, "-b", five["broker"], "-i", str(five["queueId"]),
                             "-o", str(five["queueOffset"])],
        "printMsgByQueue": ["printMsgByQueue", *ns, "-t", TOPIC, "-a", five["broker"], "-i", str(five["queueId"]),
                            "-p", "true", "-d", "true"],
        "queryCq": ["queryCq", *ns, "-t", TOPIC, "-q", str(five["queueId"]), "-i", "0", "-c", "3", "-b", five_addr],
        "consumeMessage": ["consumeMessage", *ns, "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "0", "-c", "1"],
        "clusterList": ["clusterList", *ns], "clusterListM": ["clusterList", *ns, "-m"],
        "brokerStatus": ["brokerStatus", *ns, "-b", b0], "getBrokerConfig": ["getBrokerConfig", *ns, "-b", b0],
        "statsAll": ["statsAll", *ns, "-t", TOPIC], "haStatus": ["haStatus", *ns, "-c", "DefaultCluster"],
        "getNamesrvConfig": ["getNamesrvConfig", *ns],
    }
    got = dict(zip(commands, run_all(classpath, list(commands.values())), strict=True))
    _check_topic_views(c, got)
    _check_group_views(clients, got)
    _check_message_views(five, got)
    _check_broker_views(c, got)


def _check_topic_views(c: Cluster, got: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert {TOPIC, "TBW102"} <= set(out(got["topicList"]).split())
    assert ["DefaultCluster", TOPIC, GROUP] in table(out(got["topicListC"]), "#Cluster Name")
    assert {q["brokerName"] for q in loads(out(got["topicRoute"]))["queueDatas"]} == {"broker-a", "broker-b"}
    rows = table(out(got["topicStatus"]), "#Broker Name")
    assert len(rows) == 8 and sum(int(r[3]) for r in rows) == COUNT  # max offsets add up to what was sent
    assert out(got["topicClusterList"]).split() == ["DefaultCluster"]
    assert sum(len(v) for v in json.loads(out(got["allocateMQ"]))["result"].values()) == 8
    missing = got["missingTopic"]
    assert "No topic route info in name server for the topic: NoSuchTopicJ" in missing.stderr + missing.stdout


def _check_group_views(clients: JavaClients, got: dict[str, subprocess.CompletedProcess[str]]) -> None:
    text = out(got["consumerProgress"])
    rows = [r for r in table(text, "#Topic") if r[0] == TOPIC]
    assert len(rows) == 8 and all(r[3] == r[4] for r in rows)  # broker offset == consumer offset: all consumed
    assert rows[0][5] == clients.client_id.split("@")[0]  # the client IP column (-s)
    assert "Consume Diff Total: 0" in text and re.search(r"Consume TPS: [\d.]+", text)
    conn_text = out(got["consumerConnection"])
    assert clients.client_id in conn_text and "MessageModel: CLUSTERING" in conn_text
    assert "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET" in conn_text
    assert "admin-test-producer" in out(got["producerConnection"])
    status_text = out(got["consumerStatus"])
    assert clients.client_id in status_text and "Rebalance OK" in status_text
    assert out(got["getConsumerConfig"]).count("groupName                               =  GroupJ") == 2
    assert "Diff Total: 0" in out(got["brokerConsumeStats"])


def _check_message_views(five: dict[str, Any], got: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert [[five["msgId"], str(five["queueId"]), str(five["queueOffset"])]] == table(out(got["queryMsgByKey"]),
                                                                                      "#Message ID")
    for name in ("queryMsgById", "queryMsgByUniqueKey", "queryMsgByOffset"):
        text = printed(got[name])
        assert re.search(r"Keys:\s+\[key-5\]", text) and re.search(r"Topic:\s+TopicJ", text), text
        assert "MessageTrack [consumerGroup=GroupJ, trackType=CONSUMED" in text
    by_queue = out(got["printMsgByQueue"])
    assert f"MSGID: {five['msgId']} MessageExt" in by_queue and "BODY: hello 5" in by_queue
    cq = out(got["queryCq"])
    top = int(re.search(r"Queue data: \nmax: (\d+), min: 0", cq).group(1))  # type: ignore[union-attr]
    assert cq.count("idx: ") == min(3, top)
    assert out(got["consumeMessage"]).count("Consume ok") == 1


def _check_broker_views(c: Cluster, got: dict[str, subprocess.CompletedProcess[str]]) -> None:
    b0 = c.broker_addr(0)
    rows = table(out(got["clusterList"]), "#Cluster Name")
    assert [r[:4] for r in rows] == [["DefaultCluster", "broker-a", "0", b0],
                                     ["DefaultCluster", "broker-b", "0", c.broker_addr(1)]]
    assert all(r[-1] == "true" for r in rows) and all(re.match(r"[\d.]+\(0,0ms\)", r[5]) for r in rows)
    assert "#InTotalYest" in out(got["clusterListM"]) and len(table(out(got["clusterListM"]), "#Cluster Name")) == 2
    kv = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out(got["brokerStatus"]).splitlines())}
    assert kv["brokerVersionDesc"] == "V5_3_3" and float(kv["putTps"].split()[0]) >= 0 and kv["brokerActive"] == "true"
    assert f"============{b0}============" in out(got["getBrokerConfig"])
    # the topic, the group consuming it and its accumulation (0: all consumed); the TPS and 24-hour columns come
    # from the statistics' windows (VIEW_BROKER_STATS_DATA, checked in test_admin_codes.py)
    stat_rows = [r for r in table(out(got["statsAll"]), "#Topic") if r[0] == TOPIC]
    assert stat_rows and stat_rows[0][1] == GROUP and stat_rows[0][2] == "0" and len(stat_rows[0]) == 7
    assert out(got["haStatus"]).count("#MasterAddr") == 2 and "#InSyncSlaveNum\t0" in out(got["haStatus"])
    assert "scanNotActiveBrokerInterval" in out(got["getNamesrvConfig"])


def test_changing_commands(deployment: tuple[Cluster, JavaClients], classpath: str, tmp_path: pathlib.Path) -> None:
    """What the operator changes with the tool is changed in the brokers and the name server."""
    c, clients = deployment
    ns = ["-n", c.namesrv]
    b0 = c.broker_addr(0)
    five = next(m for m in clients.sent() if m["key"] == "key-5")
    first = run_all(classpath, [
        ["updateTopic", *ns, "-c", "DefaultCluster", "-t", "TopicJ2", "-r", "8", "-w", "8", "-a",
         "+message.type=NORMAL"],
        ["updateSubGroup", *ns, "-c", "DefaultCluster", "-g", "GroupJ2", "-r", "5"],
        ["cloneGroupOffset", *ns, "-s", GROUP, "-d", "GroupJ3", "-t", TOPIC],
        ["updateBrokerConfig", *ns, "-b", b0, "-k", "fileReservedTime", "-v", "60"],
        ["updateNamesrvConfig", *ns, "-k", "scanNotActiveBrokerInterval", "-v", "6000"],
        ["updateKvConfig", *ns, "-s", "NSJ", "-k", "kj", "-v", "vj"],
        ["wipeWritePerm", *ns, "-b", "broker-b"], ["wipeWritePerm", *ns, "-b", "broker-zz"],
        ["cleanExpiredCQ", *ns, "-c", "DefaultCluster"], ["cleanUnusedTopic", *ns, "-c", "DefaultCluster"],
        ["deleteExpiredCommitLog", *ns, "-c", "DefaultCluster"],
        ["queryMsgById", *ns, "-t", TOPIC, "-i", five["offsetMsgId"], "-g", GROUP, "-d", clients.client_id],
        ["exportMetadata", *ns, "-c", "DefaultCluster", "-f", str(tmp_path)],
        ["exportConfigs", *ns, "-c", "DefaultCluster", "-f", str(tmp_path)],
        ["exportMetrics", *ns, "-c", "DefaultCluster", "-f", str(tmp_path)]])
    (topic, group, clone, broker_cfg, ns_cfg, kv, wiped, unknown, clean_cq, clean_topic, delete_log, directly,
     metadata, configs, metrics) = first
    assert out(topic).count("create topic to") == 2 and "writeQueueNums=8" in out(topic)
    assert out(group).count("create subscription group to") == 2
    assert "clone group offset success" in out(clone)
    offsets = json.loads(rpc(b0, 43).body or b"")["offsetTable"]
    assert offsets[f"{TOPIC}@GroupJ3"] == offsets[f"{TOPIC}@{GROUP}"]
    assert f"update broker config success, {b0}" in out(broker_cfg)
    assert "fileReservedTime=60" in (rpc(b0, 26).body or b"").decode()
    assert "update name server config success" in out(ns_cfg)
    assert b"scanNotActiveBrokerInterval=6000" in (rpc(c.namesrv, 319).body or b"")
    assert "create or update kv config to namespace success" in out(kv)
    assert rpc(c.namesrv, 101, {"namespace": "NSJ", "key": "kj"}).ext["value"] == "vj"
    assert re.search(rf"wipe write perm of broker\[broker-b\] in name server\[{c.namesrv}\] OK, \d+", out(wiped))
    route = json.loads(rpc(c.namesrv, 105, {"topic": TOPIC}).body or b"")
    assert {q["brokerName"]: q["perm"] for q in route["queueDatas"]} == {"broker-a": 6, "broker-b": 4}
    assert "wipe write perm of broker[broker-zz] in name server" in unknown.stdout and "Failed" in unknown.stdout
    assert "CODE: 211  DESC: broker[broker-zz] is not registered with this name server" in unknown.stderr
    for r in (clean_cq, clean_topic, delete_log):
        assert out(r).strip().endswith("success")
    assert "ConsumeMessageDirectlyResult" in printed(directly) and "CR_SUCCESS" in printed(directly)
    for r, name in ((metadata, "metadata.json"), (configs, "configs.json"), (metrics, "metrics.json")):
        assert f"export {tmp_path}/{name} success" in out(r)
    assert TOPIC in json.loads((tmp_path / "metadata.json").read_text())["topicConfigTable"]
    report = json.loads((tmp_path / "metrics.json").read_text())["evaluateReport"]
    assert set(report) == {"broker-a", "broker-b"} and "normalInTps" in report["broker-a"]["runtimeQuota"]["tps"]

    perm, order, added, kv_deleted, group_deleted = run_all(classpath, [
        ["updateTopicPerm", *ns, "-c", "DefaultCluster", "-t", "TopicJ2", "-p", "4"],
        ["updateOrderConf", *ns, "-t", "TopicJ2", "-m", "put", "-v", "broker-a:4;broker-b:4"],
        ["addWritePerm", *ns, "-b", "broker-b"], ["deleteKvConfig", *ns, "-s", "NSJ", "-k", "kj"],
        ["deleteSubGroup", *ns, "-c", "DefaultCluster", "-g", "GroupJ2"]])
    assert out(perm).count("update topic perm from 6 to 4") == 2
    cfg = json.loads(rpc(b0, 351, {"topic": "TopicJ2"}).body or b"")
    assert cfg["perm"] == 4 and cfg["attributes"] == {"message.type": "NORMAL"}
    assert "update orderConf success" in out(order)
    assert re.search(rf"add write perm of broker\[broker-b\] in name server\[{c.namesrv}\] OK, \d+", out(added))
    route = json.loads(rpc(c.namesrv, 105, {"topic": TOPIC}).body or b"")
    assert {q["perm"] for q in route["queueDatas"]} == {6}
    assert "delete kv config from namespace success" in out(kv_deleted)
    assert out(group_deleted).count("delete subscription group [GroupJ2] from broker") == 2
    assert rpc(c.broker_addr(1), 352, {"group": "GroupJ2"}).code == 26
    deleted, send, rt, send_status = run_all(classpath, [
        ["deleteTopic", *ns, "-c", "DefaultCluster", "-t", "TopicJ2"],
        ["sendMessage", *ns, "-t", TOPIC, "-p", "from-mqadmin", "-k", "kj", "-c", "TagJ"],
        ["checkMsgSendRT", *ns, "-t", TOPIC, "-a", "3", "-s", "64"], ["sendMsgStatus", *ns, "-b", "broker-b", "-c", "2"]])
    assert "delete topic [TopicJ2] from cluster [DefaultCluster] success" in out(deleted)
    assert table(out(send), "#Broker Name")[0][2] == "SEND_OK"
    results = [r[2] for r in table(out(rt), "#Broker Name") if len(r) == 4]
    assert len(results) == 3 and "true" in results and "Avg RT:" in out(rt)  # a send may time out on a busy machine
    assert out(send_status).count("SendResult [sendStatus=SEND_OK") == 2
    assert rpc(b0, 351, {"topic": "TopicJ2"}).code == 17
    rt_proc = subprocess.Popen(["java", "-Xmx128m", "-cp", classpath, MAIN, "clusterRT", *ns, "-a", "2", "-s", "64",
                                "-c", "DefaultCluster", "-i", "1"], stdout=subprocess.PIPE, text=True)
    try:  # clusterRT samples forever: read its first table, then stop it
        assert rt_proc.stdout is not None
        lines = [rt_proc.stdout.readline() for _ in range(3)]
        assert "#Cluster Name" in lines[0] and "DefaultCluster" in lines[1] + lines[2]
    finally:
        rt_proc.kill()
        rt_proc.wait()


def test_reset_offset_by_time_and_the_consumer_rereads(deployment: tuple[Cluster, JavaClients], classpath: str) -> None:
    c, clients = deployment
    before = len(clients.received())
    text = out(mqadmin(classpath, ["resetOffsetByTime", "-n", c.namesrv, "-g", GROUP, "-t", TOPIC, "-s", "0"]))
    assert "start reset consumer offset by specified, group[GroupJ], topic[TopicJ], force[true]" in text
    rows = table(text, "#brokerName")
    assert len(rows) == 8 and {r[2] for r in rows} == {"0"}
    stored = sum(off for off, _ in offsets(c))
    assert diff_total(c) == stored  # the diff is back at once (the consumer's old position is not taken back)
    # the consumer is told (RESET_CONSUMER_CLIENT_OFFSET) and reads everything again
    wait_for(lambda: len(clients.received()) - before >= stored, 90, "the consumer to re-read every message")
    wait_for(lambda: diff_total(c) == 0, 30, "the re-read committed")
    assert "Consume Diff Total: 0" in out(mqadmin(classpath, ["consumerProgress", "-n", c.namesrv, "-g", GROUP]))
    bad = mqadmin(classpath, ["resetOffsetByTime", "-n", c.namesrv, "-g", "NoSuchGroupJ", "-t", TOPIC, "-s", "0"])
    assert "Group NoSuchGroupJ does not exist" in bad.stderr + bad.stdout


def offsets(c: Cluster) -> list[tuple[int, int]]:
    """(broker offset, consumer offset) of every queue of the topic for the group (GET_CONSUME_STATS, both brokers)."""
    out_: list[tuple[int, int]] = []
    for i in range(2):
        r = rpc(c.broker_addr(i), 208, {"consumerGroup": GROUP, "topic": TOPIC})
        out_ += [(v["brokerOffset"], v["consumerOffset"]) for v in loads(r.body or b"")["offsetTable"].values()]
    return out_


def diff_total(c: Cluster) -> int:
    return sum(b - con for b, con in offsets(c))


def test_container_commands(deployment: tuple[Cluster, JavaClients], classpath: str, tmp_path: pathlib.Path) -> None:
    c, _ = deployment
    port = broker_port()
    conf = tmp_path / "broker-c.conf"
    conf.write_text(f"brokerClusterName=DefaultCluster\nbrokerName=broker-c\nbrokerId=0\nbrokerRole=ASYNC_MASTER\n"
                    f"brokerIP1=127.0.0.1\nlistenPort={port}\nstorePathRootDir={tmp_path / 'store'}\n"
                    f"flushDiskType=ASYNC_FLUSH\nmappedFileSizeCommitLog=33554432\nnamesrvAddr={c.namesrv}\n")
    admin = f"127.0.0.1:{c.admin_port}"
    assert f"add broker to {admin} success" in out(mqadmin(classpath, ["addBroker", "-c", admin, "-b", str(conf)]))
    wait_for(lambda: b"broker-c" in (rpc(c.namesrv, 106).body or b""), 30, "broker-c registered")
    removed = out(mqadmin(classpath, ["removeBroker", "-c", admin, "-b", "DefaultCluster:broker-c:0"]))
    assert f"remove broker from {admin} success" in removed
    wait_for(lambda: b"broker-c" not in (rpc(c.namesrv, 106).body or b""), 30, "broker-c gone")
    unknown = mqadmin(classpath, ["removeBroker", "-c", admin, "-b", "DefaultCluster:broker-zz:0"])
    assert "CODE: 211  DESC: broker DefaultCluster:broker-zz:0 does not exist in this container" in unknown.stderr


def test_acl_commands(tmp_path_factory: pytest.TempPathFactory, classpath: str) -> None:
    tmp = tmp_path_factory.mktemp("java_acl")
    sample = pathlib.Path(__file__).resolve().parents[2] / "conf" / "acl" / "plain_acl.yml"
    acl = tmp / "plain_acl.yml"
    shutil.copy(sample, acl)
    admin, user = tmp / "admin-home", tmp / "user-home"
    for home, (ak, sk) in ((admin, ("rocketmq2", "12345678")), (user, ("RocketMQ", "12345678"))):
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "tools.yml").write_text(f"accessKey: {ak}\nsecretKey: {sk}\n")
    c = Cluster(tmp, brokers=1, admin_creds=("rocketmq2", "12345678"),
                container_extra={"aclEnable": "true", "aclFilePath": acl}, aclEnable="true", aclFilePath=acl,
                aclAccessKey="rocketmq2", aclSecretKey="12345678").start()
    try:
        b, ns = c.broker_addr(), ["-n", c.namesrv]
        created, version, white, refused = run_all(classpath, [
            ["updateAclConfig", *ns, "-b", b, "-a", "javaUser01", "-s", "javaSecret1", "-i", "DENY",
             "-t", "topicB=SUB"],
            ["clusterAclConfigVersion", *ns, "-b", b],
            ["updateGlobalWhiteAddr", *ns, "-b", b, "-g", "10.8.8.*"]], home=admin) + [
            mqadmin(classpath, ["updateAclConfig", *ns, "-b", b, "-a", "evilUser01", "-s", "12345678", "-m", "true"],
                    home=user)]
        assert f"create or update plain access config to {b} success." in out(created)
        assert re.search(rf"DefaultCluster\s+broker-a\s+{b}\s+\S*plain_acl.yml\s+\d+", out(version))
        assert f"update global white remote addresses to {b} success." in out(white)
        assert "Need admin permission" in refused.stderr + refused.stdout
        text = acl.read_text()
        assert "javaUser01" in text and "10.8.8.*" in text and "evilUser01" not in text
        deleted = out(mqadmin(classpath, ["deleteAclConfig", *ns, "-b", b, "-a", "javaUser01"], home=admin))
        assert f"delete plain access config account from {b} success." in deleted
        wait_for(lambda: "javaUser01" not in acl.read_text(), 5, "the account removed from the file")
    finally:
        assert c.stop() == 0



def test_ha_and_controller_commands(tmp_path: pathlib.Path, classpath: str) -> None:
    """RocketMQ 5's HA view and controller commands against our controllers and a 2-replica set in controller
    mode: the sync state set, the controller's metadata and config, haStatus of the master and the slave, a
    re-election moving the master, and clusterList showing both brokers."""
    from tests.ha_cluster import HACluster

    cl = HACluster(tmp_path, containers=2, replicas=2, sets=1).start()
    try:
        cl.wait_in_sync("broker-a", 2)
        ctl = ";".join(cl.ctl.addrs)
        ns = ["-n", cl.namesrv]
        master = cl.master_of("broker-a")
        sss, meta, config, ha, clusters, epochs = run_all(classpath, [
            ["getSyncStateSet", "-a", ctl, "-b", "broker-a"], ["getControllerMetaData", "-a", cl.ctl.addrs[0]],
            ["getControllerConfig", "-a", ctl], ["haStatus", *ns, "-c", "DefaultCluster"], ["clusterList", *ns],
            ["getBrokerEpoch", *ns, "-b", "broker-a"]])
        text = out(sss)
        assert re.search(r"#brokerName\tbroker-a\n#MasterBrokerId\t\d+\n#MasterAddr\t" + re.escape(master or "?"), text)
        assert "#SyncStateSetNums\t2" in text and text.count("InSyncReplica:") == 2
        assert "#ControllerLeaderAddress" in out(meta) and out(meta).count("#Peer:") == 3
        assert "controllerType" in out(config) or "=" in out(config)
        ha_text = out(ha)
        assert f"#MasterAddr\t{master}" in ha_text and "#InSyncSlaveNum\t1" in ha_text and " OK " in ha_text
        assert len([r for r in table(out(clusters), "#Cluster Name") if r[1] == "broker-a"]) == 2
        assert out(epochs).count("#brokerName\tbroker-a") == 2 and "#Epoch: EpochEntry{epoch=" in out(epochs)
        slave = next(a for a in (cl.broker_addr("broker-a", 0), cl.broker_addr("broker-a", 1)) if a != master)
        slave_status = out(mqadmin(classpath, ["haStatus", *ns, "-b", slave]))
        assert "#CommitLogMaxOffset" in slave_status and "#MasterFlushOffset" in slave_status
        slave_id = next(m.group(1) for m in re.finditer(r"InSyncReplica:\tReplicaIdentity\{brokerName='broker-a', "
                                                         r"brokerId=(\d+), brokerAddress='([^']+)'", text)
                        if m.group(2) == slave)
        elected = out(mqadmin(classpath, ["electMaster", "-a", cl.ctl.addrs[0], "-b", slave_id, "-bn", "broker-a",
                                          "-c", "DefaultCluster"]))
        assert f"#BrokerMasterAddr\t{slave}" in elected
        assert cl.wait_master("broker-a", not_addr=master) == slave
    finally:
        cl.stop()
