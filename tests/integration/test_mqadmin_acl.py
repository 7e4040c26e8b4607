"""mqadmin with ACL on (RocketMQ's sample accounts): every command is signed with --accessKey/--secretKey (or a
tools.yml); the ACL 1.0 commands change the brokers' plain_acl.yml, and a new account works for a real client."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import pytest
import yaml

from tests.integration.helpers.mqadmin import MQAdmin
from tests.support import ACL_ADMIN, ACL_USER, ClientRun, Cluster, acl_cluster, rpc, wait_for

pytestmark = pytest.mark.integration

USER, ADMIN = ACL_USER, ACL_ADMIN


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("mqadmin-acl")
    c = acl_cluster(tmp)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def tools(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The admin account in conf/tools.yml's format (for commands whose own options are -a/--accessKey)."""
    path = tmp_path_factory.mktemp("tools") / "tools.yml"
    path.write_text(f"accessKey: {ADMIN[0]}\nsecretKey: {ADMIN[1]}\n")
    return path


def accounts(cluster: Cluster) -> dict[str, dict[str, object]]:
    doc = yaml.safe_load(cluster.acl_path.read_text())  # type: ignore[attr-defined]
    return {a["accessKey"]: a for a in doc.get("accounts") or []}


def test_every_command_is_signed(cluster: Cluster) -> None:
    anonymous, user, admin = MQAdmin(cluster.namesrv), MQAdmin(cluster.namesrv), MQAdmin(cluster.namesrv)
    user.env["ROCKETMQ_HOME"] = admin.env["ROCKETMQ_HOME"] = "/nonexistent"
    r = anonymous("updateTopic", "-b", cluster.broker_addr(), "-t", "T_signed")
    assert r.returncode == 1 and "CODE: 16" in r.stderr
    r = user("updateTopic", "-b", cluster.broker_addr(), "-t", "T_signed", "--accessKey", USER[0],
             "--secretKey", USER[1])
    assert r.returncode == 1 and "CODE: 16" in r.stderr
    out = admin.ok("updateTopic", "-b", cluster.broker_addr(), "-t", "T_signed", "--accessKey", ADMIN[0],
                   "--secretKey", ADMIN[1])
    assert f"create topic to {cluster.broker_addr()} success." in out
    assert "DefaultCluster" in admin.ok("clusterList", "--accessKey", ADMIN[0], "--secretKey", ADMIN[1])
    status = admin.ok("brokerStatus", "-b", cluster.broker_addr(), "--accessKey", ADMIN[0], "--secretKey", ADMIN[1])
    assert "brokerVersionDesc" in status


def test_acl_accounts_created_shown_versioned_and_deleted(cluster: Cluster, tools: pathlib.Path,
                                                          tmp_path: pathlib.Path) -> None:
    mq = MQAdmin(cluster.namesrv)
    signed = ("--credentialsFile", str(tools))
    addr = cluster.broker_addr()
    out = mq.ok("updateAclConfig", "-b", addr, "--accessKey", "newUser", "--secretKey", "newSecret1",
                "-t", "T_acl=PUB|SUB", "-g", "G_acl=SUB", "-i", "DENY", *signed)
    assert out.startswith(f"create or update plain access config to {addr} success.\n")
    assert out.endswith("PlainAccessConfig{accessKey='newUser', whiteRemoteAddress='null', admin=false, "
                        "defaultTopicPerm='DENY', defaultGroupPerm='null', topicPerms=[T_acl=PUB|SUB], "
                        "groupPerms=[G_acl=SUB]}")
    wait_for(lambda: "newUser" in accounts(cluster), 5, "the account in plain_acl.yml")
    assert accounts(cluster)["newUser"]["secretKey"] == "newSecret1"

    shown = mq.ok("getAclConfig", "-b", addr, *signed)
    assert re.search(r"^  accessKey\s+: newUser$", shown, re.M) and re.search(r"^  topicPerms\s+: \[T_acl=PUB\|SUB\]$",
                                                                             shown, re.M)
    versions = mq.ok("clusterAclConfigVersion", "-c", "DefaultCluster", *signed).splitlines()
    assert versions[0].split()[:4] == ["#Cluster", "Name", "#Broker", "Name"]
    assert any(r.split()[:3] == ["DefaultCluster", "broker-a", addr] for r in versions[1:-1])
    assert versions[-1] == "get cluster's plain access config version success."

    assert mq.ok("updateGlobalWhiteAddr", "-b", addr, "-g", "10.10.103.*,172.16.*.*", *signed) == \
        f"update global white remote addresses to {addr} success.\n"
    assert "172.16.*.*" in mq.ok("getAclConfig", "-b", addr, *signed)

    assert mq.ok("updateTopic", "-b", addr, "-t", "T_acl", *signed)
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": "T_acl"}, creds=ADMIN).code == 0, 10, "T_acl routable")
    code, rows = ClientRun("produce", cluster.client_env(TOPIC="T_acl", COUNT=3, ACCESS_KEY="newUser",
                                                         SECRET_KEY="newSecret1"), tmp_path / "p").wait(60)
    assert code == 0 and sum(1 for r in rows if r.get("status") == "OK") == 3  # the new account publishes

    out = mq.ok("deleteAclConfig", "-b", addr, "-a", "newUser", *signed)
    assert out == f"delete plain access config account from {addr} success.\naccount's accessKey is:newUser"
    wait_for(lambda: "newUser" not in accounts(cluster), 5, "the account gone from plain_acl.yml")
    mq.fails("updateAclConfig", "-b", addr, "-a", "x", "-s", "12345678", "-t", "T=ALL", *signed, needle="DENY|PUB")
    mq.fails("updateAclConfig", "-b", addr, "-a", "x", "-s", "12345678", needle="CODE: 16")  # unsigned
