"""ACL on (aclEnable=true, RocketMQ's sample accounts): the real C++-core client with credentials produces and
consumes; wrong secrets, denied topics and missing credentials are refused and store nothing; admin codes on
the broker, the container admin port and the name server need the admin account; the file is reloaded."""

from __future__ import annotations

import pathlib
import shutil

import orjson
import pytest

from tests.support import ACL_ADMIN, ACL_SAMPLE, ACL_USER, ClientRun, Cluster, acl_cluster, ons_command, rpc, wait_for

pytestmark = pytest.mark.integration

USER, ADMIN = ACL_USER, ACL_ADMIN


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("acl")
    c = acl_cluster(tmp)
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


def routable(c: Cluster, topic: str) -> bool:
    return rpc(c.namesrv, 105, {"topic": topic}, creds=ADMIN).code == 0


def produce(c: Cluster, tmp: pathlib.Path, topic: str, count: int, **creds: str) -> list[dict[str, object]]:
    _, rows = ClientRun("produce", c.client_env(TOPIC=topic, COUNT=count, SEND_TIMEOUT_MS=3000, **creds),
                        tmp).wait(120)
    return [r for r in rows if "sent" in r]


def max_offsets(c: Cluster, topic: str) -> int:
    total = 0
    for q in range(8):
        r = rpc(c.broker_addr(), 30, {"topic": topic, "queueId": str(q)}, creds=ADMIN)
        total += int(r.ext.get("offset", 0)) if r.code == 0 else 0
    return total


def test_permitted_account_produces_and_consumes(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    rows = produce(cluster, tmp_path / "p", "topicB", 30, ACCESS_KEY=USER[0], SECRET_KEY=USER[1])
    assert len(rows) == 30 and all(r.get("status") == "OK" for r in rows), rows[:3]
    consumer = ClientRun("push", cluster.client_env(TOPIC="topicB", GROUP="groupB", COUNT=30, TIMEOUT=60, LINGER_S=30,
                                                    ACCESS_KEY=USER[0], SECRET_KEY=USER[1]), tmp_path / "c")

    def committed() -> int:
        rs = [rpc(cluster.broker_addr(), 14, {"consumerGroup": "groupB", "topic": "topicB", "queueId": str(q)},
                  creds=ADMIN) for q in range(8)]
        return sum(int(r.ext.get("offset", 0)) for r in rs if r.code == 0)

    try:
        wait_for(lambda: len({d["props"]["seq"] for d in consumer.received()}) >= 30, 60, "30 messages consumed")
        wait_for(lambda: committed() >= 30, 30, "the permitted group's offsets committed")
    finally:
        consumer.kill()


@pytest.mark.parametrize("topic, creds", [
    ("topicB", {"ACCESS_KEY": USER[0], "SECRET_KEY": "wrong-secret"}),  # wrong secret
    ("topicA_none", {}),  # no credentials: the C++ client sends empty AccessKey/Signature
    ("topicA", {"ACCESS_KEY": USER[0], "SECRET_KEY": USER[1]}),  # topicA=DENY
    ("topicC", {"ACCESS_KEY": USER[0], "SECRET_KEY": USER[1]}),  # topicC=SUB: no PUB
    ("topicZ", {"ACCESS_KEY": USER[0], "SECRET_KEY": USER[1]}),  # defaultTopicPerm=DENY
])
def test_refused_sends_store_nothing(cluster: Cluster, tmp_path: pathlib.Path, topic: str,
                                     creds: dict[str, str]) -> None:
    before = max_offsets(cluster, topic)
    rows = produce(cluster, tmp_path / "p", topic, 3, **creds)
    assert rows and not any(r.get("status") == "OK" for r in rows), rows
    assert max_offsets(cluster, topic) == before
    if topic != "topicB":
        assert not routable(cluster, topic), "a refused send must not create its topic"


def test_admin_codes_need_the_admin_account(cluster: Cluster) -> None:
    create = {"topic": "T_admin_made", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
    r = rpc(cluster.broker_addr(), 17, create, creds=USER)
    assert r.code == 16 and "admin" in (r.remark or "")
    assert rpc(cluster.broker_addr(), 17, create).code == 16
    assert rpc(cluster.broker_addr(), 17, create, creds=ADMIN).code == 0
    # the container admin port: admin accounts only
    admin = f"127.0.0.1:{cluster.admin_port}"
    assert rpc(admin, 910).code == 16 and rpc(admin, 910, creds=USER).code == 16
    r = rpc(admin, 910, creds=ADMIN)
    assert r.code == 0 and orjson.loads(r.body)["brokers"]
    # the name server: reads need an account, writes the admin account
    assert rpc(cluster.namesrv, 105, {"topic": "TBW102"}).code == 16
    assert rpc(cluster.namesrv, 105, {"topic": "TBW102"}, creds=USER).code == 0
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "topicB", "value": "broker-a:4"}
    assert rpc(cluster.namesrv, 100, kv, creds=USER).code == 16
    assert rpc(cluster.namesrv, 100, kv, creds=ADMIN).code == 0
    # a pull of a denied topic / group
    pull = {"consumerGroup": "groupC", "topic": "topicA", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
    r = rpc(cluster.broker_addr(), 11, pull, creds=USER)
    assert r.code == 16 and "topic:topicA" in (r.remark or "")
    r = rpc(cluster.broker_addr(), 11, {**pull, "consumerGroup": "groupA", "topic": "topicB"}, creds=USER)
    assert r.code == 16 and "group:groupA" in (r.remark or "")


def test_file_reload(cluster: Cluster) -> None:
    create = {"topic": "T_after_reload", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
    assert rpc(cluster.broker_addr(), 17, create, creds=USER).code == 16
    path: pathlib.Path = cluster.acl_path  # type: ignore[attr-defined]
    original = path.read_text()
    path.write_text(original.replace("    admin: false", "    admin: true"))
    try:
        wait_for(lambda: rpc(cluster.broker_addr(), 17, create, creds=USER).code == 0, 15, "the file reloaded")
    finally:
        path.write_text(original)
    wait_for(lambda: rpc(cluster.broker_addr(), 17, create, creds=USER).code == 16, 15, "reloaded back")


def test_controller_admin_requests_need_the_admin_account(tmp_path: pathlib.Path) -> None:
    from tests.integration.controller.cluster import ControllerProcs

    acl = tmp_path / "plain_acl.yml"
    shutil.copy(ACL_SAMPLE, acl)
    procs = ControllerProcs(tmp_path, n=1, extra={"aclEnable": "true", "aclFilePath": str(acl)})
    procs.start_all()
    try:
        addr = procs.addrs[0]
        wait_for(lambda: rpc(addr, 1010, creds=ADMIN, timeout=1.0).code == 0, 30, "the controller answers")
        r = rpc(addr, 1010, creds=ADMIN)
        assert b"aclEnable=true" in r.body
        for creds in (None, USER, (ADMIN[0], "wrong-secret")):
            for code in (1009, 1010, 1011):
                assert rpc(addr, code, {"brokerName": "b", "isCleanLivingBroker": "false"}, b"x=1",
                           creds=creds).code == 16, (code, creds)
        # the brokers' own requests are served as before (a metadata query: not refused)
        assert rpc(addr, 1005).code != 16
    finally:
        procs.stop_all()


def test_mqadmin_signs_with_its_credentials(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    def mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "brokerd.admin.cli", *args], capture_output=True, text=True,
                              timeout=60, cwd=str(tmp_path))

    container = f"127.0.0.1:{cluster.admin_port}"
    r = mqadmin("listBrokers", "-c", container)
    assert r.returncode == 1 and "CODE: 16" in r.stderr
    r = mqadmin("listBrokers", "-c", container, "--accessKey", USER[0], "--secretKey", USER[1])
    assert r.returncode == 1 and "admin" in r.stderr
    r = mqadmin("listBrokers", "-c", container, "--accessKey", ADMIN[0], "--secretKey", ADMIN[1])
    assert r.returncode == 0 and "broker-a" in r.stdout, r.stderr
    tools = tmp_path / "tools.yml"
    tools.write_text(f"accessKey: {ADMIN[0]}\nsecretKey: {ADMIN[1]}\n")
    r = mqadmin("--credentialsFile", str(tools), "updateTopic", "-b", cluster.broker_addr(), "-t", "T_by_mqadmin")
    assert r.returncode == 0, r.stderr
    assert mqadmin("updateTopic", "-b", cluster.broker_addr(), "-t", "T_by_mqadmin2").returncode == 1
    r = mqadmin("getControllerConfig", "-a", "127.0.0.1:1", "--accessKey", ADMIN[0])
    assert r.returncode == 1 and "together" in r.stderr


def test_config_blacklist_secret_masking_and_name_validation(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    for key, value in (("storePathRootDir", "/tmp/elsewhere"), ("haMasterAddress", "10.0.0.9:10912"),  # noqa: S108  # port-ok: values refused, nothing binds
                       ("aclEnable", "false"), ("aclFilePath", "/tmp/open.yml"), ("namesrvAddr", "10.0.0.9:9876")):  # noqa: S108  # port-ok: values refused, nothing binds
        r = rpc(addr, 25, body=f"{key}={value}\n".encode(), creds=ADMIN)
        assert r.code == 16 and key in (r.remark or ""), (key, r.code, r.remark)
    r = rpc(addr, 26, creds=ADMIN)
    text = (r.body or b"").decode()
    assert r.code == 0 and "aclSecretKey=***" in text and ADMIN[1] not in text
    # names that could reach outside the store directory are refused, nothing is created for them
    for topic in ("../escape", "a/b", "..", "x" * 200):
        r = rpc(addr, 17, {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, creds=ADMIN)
        assert r.code != 0, topic
    body = orjson.dumps({"groupName": "../g", "consumeEnable": True})
    assert rpc(addr, 200, body=body, creds=ADMIN).code != 0
    assert not list(cluster.tmp.parent.rglob("*escape*")), "a refused topic name reached the file system"


def denied(c: Cluster) -> int:
    return int(orjson.loads(rpc(c.broker_addr(), 28, creds=ADMIN).body)["table"]["aclDenied"])


@pytest.mark.parametrize("topic, group", [("topicB", "groupA"), ("topicA", "groupB")])
def test_refused_consumer_gets_nothing_and_registers_nothing(cluster: Cluster, tmp_path: pathlib.Path, topic: str,
                                                             group: str) -> None:
    rows = produce(cluster, tmp_path / "p", "topicB", 3, ACCESS_KEY=ADMIN[0], SECRET_KEY=ADMIN[1])
    assert all(r.get("status") == "OK" for r in rows)
    rpc(cluster.broker_addr(), 17, {"topic": "topicA", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"},
        creds=ADMIN)
    before = denied(cluster)
    consumer = ClientRun("push", cluster.client_env(TOPIC=topic, GROUP=group, COUNT=1, TIMEOUT=60,
                                                    ACCESS_KEY=USER[0], SECRET_KEY=USER[1]), tmp_path / "c")
    try:
        wait_for(lambda: denied(cluster) > before, 30, "the consumer's heartbeat refused")
        r = rpc(cluster.broker_addr(), 38, {"consumerGroup": group}, creds=ADMIN)
        assert r.code != 0 or not orjson.loads(r.body)["consumerIdList"], "a refused consumer was registered"
        assert consumer.received() == []
    finally:
        consumer.kill()


def test_ali_ons_node_client_with_credentials(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """ali-ons (Node; accessKeyId/accessKeySecret options) signs as RocketMQ does: a permitted account produces and
    consumes, a wrong secret or no credentials is refused and stores nothing."""
    ons = ons_command()
    if ons is None:
        pytest.skip("node / ali-ons not installed (scripts/test installs them)")
    env = cluster.client_env(TOPIC="topicB", GROUP="groupB", COUNT=5, TIMEOUT=60)
    assert rpc(cluster.broker_addr(), 17, {"topic": "topicB", "readQueueNums": "4", "writeQueueNums": "4",
                                           "perm": "6"}, creds=ADMIN).code == 0  # ali-ons does not auto-create
    wait_for(lambda: routable(cluster, "topicB"), 10, "topicB routable")
    before = max_offsets(cluster, "topicB")
    code, rows = ClientRun("produce", {**env, "ACCESS_KEY": USER[0], "SECRET_KEY": USER[1]}, tmp_path / "p",
                           command=ons).wait(120)
    sent = [r for r in rows if "sent" in r]
    assert code == 0 and len(sent) == 5 and all(r.get("status") == "SEND_OK" for r in sent), rows[-3:]
    assert max_offsets(cluster, "topicB") == before + 5
    for name, creds in (("wrong", {"ACCESS_KEY": USER[0], "SECRET_KEY": "wrong-secret"}), ("none", {})):
        code, rows = ClientRun("produce", {**env, **creds, "COUNT": 2}, tmp_path / name, command=ons).wait(120)
        assert code != 0 and not any(r.get("status") == "SEND_OK" for r in rows), rows[-3:]
    assert max_offsets(cluster, "topicB") == before + 5
    consumer = ClientRun("consume", {**env, "GROUP": "groupC", "COUNT": 10**6, "ACCESS_KEY": USER[0],
                                     "SECRET_KEY": USER[1]}, tmp_path / "c", command=ons)
    try:
        wait_for(lambda: sum(1 for d in consumer.received() if d["body"].startswith("ons-body-")) >= 5, 60,
                 "the Node consumer received the Node producer's messages")
    finally:
        consumer.kill()


def test_white_addresses_global_and_per_account(cluster: Cluster) -> None:
    """The clients here come from 127.0.0.1: a global white address lets unsigned requests through, an account's
    white address lets that account's requests through whatever their signature (as RocketMQ does)."""
    path: pathlib.Path = cluster.acl_path  # type: ignore[attr-defined]
    original = path.read_text()
    route = {"topic": "TBW102"}
    wrong = (USER[0], "wrong-secret")
    assert rpc(cluster.namesrv, 105, route).code == 16 and rpc(cluster.namesrv, 105, route, creds=wrong).code == 16
    try:
        path.write_text(original.replace("  - 192.168.0.*", "  - 192.168.0.*\n  - 127.0.0.*"))
        wait_for(lambda: rpc(cluster.namesrv, 105, route).code == 0, 15, "the global white address reloaded")
        assert rpc(f"127.0.0.1:{cluster.admin_port}", 910).code == 0  # global: even the admin port
        path.write_text(original.replace("    whiteRemoteAddress:\n    admin: false",
                                         "    whiteRemoteAddress: 127.0.0.1\n    admin: false"))
        wait_for(lambda: rpc(cluster.namesrv, 105, route).code == 16  # unsigned: the global white address is gone
                 and rpc(cluster.namesrv, 105, route, creds=wrong).code == 0, 15, "the account's white address")
        # the admin port reloads the file on its own: it may still have the global white address a moment longer
        wait_for(lambda: rpc(f"127.0.0.1:{cluster.admin_port}", 910, creds=wrong).code == 16, 15,
                 "the admin port: white, but not an admin")
    finally:
        path.write_text(original)
    wait_for(lambda: rpc(cluster.namesrv, 105, route, creds=wrong).code == 16, 15, "reloaded back")


async def test_standalone_name_server_checks_requests(tmp_path: pathlib.Path) -> None:
    """mqnamesrv with aclEnable: reads need a signed account, writes (REGISTER_BROKER, PUT_KV_CONFIG) an admin."""
    from brokerd.namesrv.config import NamesrvConfig
    from brokerd.namesrv.service import start_server
    from tests.support import arpc

    acl = tmp_path / "plain_acl.yml"
    shutil.copy(ACL_SAMPLE, acl)
    svc, server = await start_server(NamesrvConfig(bind_address="127.0.0.1", acl_enable=True, acl_file_path=str(acl)),
                                     port=0)
    addr = f"127.0.0.1:{server.port}"
    try:
        assert (await arpc(addr, 106)).code == 16
        assert (await arpc(addr, 106, creds=USER)).code == 0
        kv = {"namespace": "ns", "key": "k", "value": "v"}
        assert (await arpc(addr, 100, kv, creds=USER)).code == 16
        assert (await arpc(addr, 100, kv, creds=ADMIN)).code == 0
        reg = {"brokerAddr": "127.0.0.1:1", "brokerId": "0", "brokerName": "evil", "clusterName": "c",
               "haServerAddr": "127.0.0.1:2", "compressed": "false"}
        assert (await arpc(addr, 103, reg, b"{}", creds=USER)).code == 16
        r = await arpc(addr, 106, creds=USER)
        assert b"evil" not in (r.body or b""), "a refused registration reached the route table"
    finally:
        await svc.stop()
        await server.stop()


def test_dashboard_admin_login_takes_the_acl_admin_accounts(cluster: Cluster) -> None:
    """With aclEnable the container's dashboard logs in the ACL file's admin accounts only."""
    import json
    import re
    import urllib.error
    import urllib.request

    assert cluster.daemon is not None
    m = wait_for(lambda: re.search(r"metrics port (\d+)", cluster.daemon.output()), 30, "the boot line")  # type: ignore[union-attr]
    login = f"http://127.0.0.1:{m.group(1)}/api/login"

    def status(access: str, secret: str) -> int:
        req = urllib.request.Request(login, json.dumps({"accessKey": access, "secretKey": secret}).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    assert status(*ADMIN) == 200
    assert status(*USER) == 401  # a valid account, but not an admin
    assert status(ADMIN[0], "wrong") == 401
