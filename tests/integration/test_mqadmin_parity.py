"""Our mqadmin prints what RocketMQ's own (Java) mqadmin prints: the same commands, run by both against the same
deployment, give the same output (RocketMQ 5.3.1's tools from Maven Central, tests/clients/java/remoting).

Left out: commands whose output moves between runs (sends, timestamps, TPS) and the two whose RocketMQ 5.3.3 output
we print while 5.3.1 differs (topicStatus's `Topic Put TPS:` trailer, clusterList's ack-pool columns)."""

from __future__ import annotations

import difflib
import pathlib
import re
from collections.abc import Iterator

import pytest

from brokerd.admin.cli import commands
from tests.integration.helpers.mqadmin import MQAdmin
from tests.java_support import run_java
from tests.support import ClientRun, Cluster, rpc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
# ours only, or options added where RocketMQ's command has none of that name
NOT_IN_ROCKETMQ = {"listBrokers", "getAclConfig", "getBrokerConfig", "updateBrokerConfig", "getBrokerEpoch",
                   "printMsg"}  # printMsg: -l came with RocketMQ 5.3.3


def java_mqadmin(*args: str, namesrv: str | None = None) -> str:
    return java_mqadmin_run(*args, namesrv=namesrv)[0]


def java_mqadmin_run(*args: str, namesrv: str | None = None) -> tuple[str, str]:
    """RocketMQ's mqadmin: its output without the logging lines, and the end of its stderr (where it reports
    errors)."""
    r = run_java("remoting", MAIN, [*args, *(["-n", namesrv] if namesrv else [])], timeout=120,
                 env={"ROCKETMQ_HOME": "/nonexistent"})
    out = "".join(line + "\n" for line in r.stdout.splitlines() if not line.startswith(("SLF4J", "log4j", "RocketMQLog")))
    return out, r.stderr[-1500:]


def same(ours: str, theirs: str) -> bool:
    return ours.rstrip("\n") == theirs.rstrip("\n")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("mqadmin-parity")
    c = Cluster(tmp, brokers=2).start()
    mq = MQAdmin(c.namesrv)
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_par", "-r", "2", "-w", "2")
    wait_for(lambda: rpc(c.namesrv, 105, {"topic": "T_par"}).code == 0, 10, "T_par routable")
    assert ClientRun("produce", c.client_env(TOPIC="T_par", COUNT=6, TAGS="TagA,TagB"), tmp / "p").wait(90)[0] == 0
    assert ClientRun("push", c.client_env(TOPIC="T_par", GROUP="G_par", COUNT=6, TIMEOUT=60, LINGER_S=6),
                     tmp / "c").wait(90)[0] == 0
    yield c
    c.stop()


def test_help_of_every_command_matches(tmp_path: pathlib.Path) -> None:
    mismatched = []
    for cmd in commands():
        if cmd.name in NOT_IN_ROCKETMQ:
            continue
        ours = MQAdmin("", cwd=str(tmp_path)).ok("help", cmd.name)
        if not same(ours, java_mqadmin("help", cmd.name)):
            mismatched.append(cmd.name)
    assert not mismatched


def test_read_commands_print_what_rocketmq_prints(cluster: Cluster) -> None:
    mq = MQAdmin(cluster.namesrv)
    key = mq.ok("queryMsgByKey", "-t", "T_par", "-k", "key-1")
    msg_id = key.splitlines()[1].split()[0]
    detail = mq.ok("queryMsgById", "-t", "T_par", "-i", msg_id)
    offset = re.search(r"^Queue Offset:\s+(\d+)$", detail, re.M)
    queue = re.search(r"^Queue ID:\s+(\d+)$", detail, re.M)
    host = re.search(r"^Store Host:\s+(\S+)$", detail, re.M)
    assert offset and queue and host
    name = "broker-a" if host.group(1) == cluster.broker_addr(0) else "broker-b"
    runs = [("topicList",), ("topicList", "-c"), ("topicRoute", "-t", "T_par"), ("topicRoute", "-t", "T_par", "-l"),
            ("topicClusterList", "-t", "T_par"), ("queryMsgByKey", "-t", "T_par", "-k", "key-1"),
            ("queryMsgById", "-t", "T_par", "-i", msg_id), ("queryMsgByUniqueKey", "-t", "T_par", "-i", msg_id),
            ("queryMsgByOffset", "-t", "T_par", "-b", name, "-i", queue.group(1), "-o", offset.group(1)),
            ("printMsg", "-t", "T_par"), ("printMsg", "-t", "T_par", "-s", "TagB"),
            ("printMsgByQueue", "-t", "T_par", "-a", "broker-a", "-i", "0", "-p", "true", "-f", "true"),
            ("consumeMessage", "-t", "T_par", "-b", "broker-b", "-i", "1"), ("queryCq", "-t", "T_par", "-q", "0",
                                                                             "-i", "0"),
            ("getBrokerConfig", "-b", cluster.broker_addr(0)), ("getBrokerConfig", "-c", "DefaultCluster"),
            ("getConsumerConfig", "-g", "G_par"), ("getNamesrvConfig",), ("consumerProgress",),
            ("brokerConsumeStats", "-b", cluster.broker_addr(1)), ("allocateMQ", "-t", "T_par", "-i", "a,b,c"),
            ("updateOrderConf", "-t", "T_par", "-m", "get")]
    mismatched = []
    for args in runs:
        mine = mq(*args)
        ours, (theirs, their_err) = mine.stdout, java_mqadmin_run(*args, namesrv=cluster.namesrv)
        if not same(ours, theirs):
            diff = difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "rocketmq", "ours", lineterm="", n=1)
            mismatched.append(" ".join(args) + "\n" + "\n".join(list(diff)[:12])
                              + f"\n--- our stderr\n{mine.stderr[-1500:]}\n--- rocketmq's stderr\n{their_err}")
    assert not mismatched, "\n\n".join(mismatched)
