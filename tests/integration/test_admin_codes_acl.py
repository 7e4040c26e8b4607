"""The admin codes with ACL on (RocketMQ's sample accounts): changing requests need the admin account, the
read-only ones a perm on what they read; the ACL 1.0 codes (50-54) edit plain_acl.yml as RocketMQ's
PlainPermissionManager does and the broker's check follows at once."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import yaml

from brokerd.namesrv.lenient_json import loads
from brokerd.remoting.codes import RequestCode as C
from brokerd.remoting.codes import ResponseCode as R
from tests.support import ACL_ADMIN, ACL_USER, Cluster, acl_cluster, rpc

pytestmark = pytest.mark.integration

USER, ADMIN = ACL_USER, ACL_ADMIN


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("admin_acl")
    c = acl_cluster(tmp)
    for topic in ("topicA", "topicB"):
        assert rpc(c.broker_addr(), C.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": "1",
                                                                "writeQueueNums": "1"}, creds=ADMIN).code == 0
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


def test_admin_codes_need_the_admin_account_reads_need_a_perm(cluster: Cluster) -> None:
    a = cluster.broker_addr()
    for code, ext in ((C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "topicB", "group": "groupB", "timestamp": "0",
                                                         "isForce": "true"}),
                      (C.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "evilUser1", "secretKey": "12345678",
                                                        "admin": "true"}),
                      (C.GET_BROKER_CLUSTER_ACL_CONFIG, {}), (C.CLEAN_UNUSED_TOPIC, {}),
                      (C.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})):
        r = rpc(a, code, ext, creds=USER)
        assert r.code == R.NO_PERMISSION and "Need admin permission" in (r.remark or ""), (code, r.remark)
    assert rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicB"}, creds=USER).code == R.SUCCESS  # topicB=PUB|SUB
    r = rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicA"}, creds=USER)  # topicA=DENY
    assert r.code == R.NO_PERMISSION and "topic:topicA" in (r.remark or "")
    r = rpc(a, C.GET_CONSUME_STATS, {"consumerGroup": "groupA"}, creds=USER)  # groupA=DENY
    assert r.code == R.NO_PERMISSION and "group:groupA" in (r.remark or "")
    assert rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicA"}, creds=ADMIN).code == R.SUCCESS
    accounts = yaml.safe_load(cluster.acl_path.read_text())["accounts"]  # type: ignore[attr-defined]
    assert all(x["accessKey"] != "evilUser1" for x in accounts)


def test_acl_codes_edit_the_file_and_take_effect_at_once(cluster: Cluster) -> None:
    a = cluster.broker_addr()
    path: pathlib.Path = cluster.acl_path  # type: ignore[attr-defined]
    before = rpc(a, C.GET_BROKER_CLUSTER_ACL_INFO, creds=ADMIN)
    assert before.code == R.SUCCESS and before.ext["brokerName"] == "broker-a"
    counter = loads(before.ext["version"])["counter"]
    assert str(path) in loads(before.ext["allAclFileVersion"])
    new = ("newUser01", "newSecret1")
    assert rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicB"}, creds=new).code == R.NO_PERMISSION
    r = rpc(a, C.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": new[0], "secretKey": new[1], "admin": "false",
                                                 "defaultTopicPerm": "DENY", "topicPerms": "topicB=SUB"}, creds=ADMIN)
    assert r.code == R.SUCCESS, r.remark
    assert rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicB"}, creds=new).code == R.SUCCESS  # at once
    assert rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicA"}, creds=new).code == R.NO_PERMISSION
    doc = yaml.safe_load(path.read_text())
    acct = next(x for x in doc["accounts"] if x["accessKey"] == new[0])
    assert acct["topicPerms"] == ["topicB=SUB"] and doc["dataVersion"][0]["counter"] == counter + 1
    after = rpc(a, C.GET_BROKER_CLUSTER_ACL_INFO, creds=ADMIN)
    assert loads(after.ext["version"])["counter"] == counter + 1
    r = rpc(a, C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "10.9.8.*,10.9.7.1"}, creds=ADMIN)
    assert r.code == R.SUCCESS, r.remark
    view = loads(rpc(a, C.GET_BROKER_CLUSTER_ACL_CONFIG, creds=ADMIN).body or b"")
    assert view["globalWhiteAddrs"] == ["10.9.8.*", "10.9.7.1"]
    assert any(x["accessKey"] == new[0] and x["secretKey"] == new[1] for x in view["plainAccessConfigs"])
    # refusals change nothing
    for code, ext, failed, word in (
            (C.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "short", "secretKey": "12345678"}, 209, "longer than 6"),
            (C.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": new[0], "secretKey": new[1], "topicPerms": "x=ALL"}, 209,
             "permission"),
            (C.DELETE_ACL_CONFIG, {"accessKey": "nobodyUser"}, 210, "no such account"),
            (C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "1.2.3.4", "aclFileFullPath": "/etc/passwd"},
             211, "not this broker's ACL file"),
            (C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "not-an-ip"}, 211, "globalWhiteRemoteAddresses")):
        text = path.read_text()
        r = rpc(a, code, ext, creds=ADMIN)
        assert r.code == failed and word in (r.remark or ""), (ext, r.code, r.remark)
        assert path.read_text() == text
    assert rpc(a, C.DELETE_ACL_CONFIG, {"accessKey": new[0]}, creds=ADMIN).code == R.SUCCESS
    r = rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": "topicB"}, creds=new)
    assert r.code == R.NO_PERMISSION and "No acl config for newUser01" in (r.remark or "")
