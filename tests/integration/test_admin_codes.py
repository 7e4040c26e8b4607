"""The admin request codes of the broker and the name server, through a real container (2 brokers, the embedded
name server) and our own remoting client: RocketMQ's headers and bodies (maps keyed by MessageQueue objects as
fastjson writes them), what each changes, the requests forwarded to a consumer and the reset-offset notice it gets,
and a clear error code naming an unknown topic, group or broker (nothing changed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from brokerd.message import decode_records, encode_properties, offset_msg_id
from brokerd.namesrv.lenient_json import loads, object_key
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode as C
from brokerd.remoting.codes import ResponseCode as R
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection, Dispatcher
from tests.support import Cluster, arpc, rpc, until

pytestmark = pytest.mark.integration

TOPIC, GROUP, PGROUP = "TopicAdm", "GroupAdm", "PGroupAdm"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = Cluster(tmp_path_factory.mktemp("admin_codes"), brokers=2, statsSamplingInterval=1000).start()
    for i in range(2):
        assert rpc(c.broker_addr(i), C.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": "2",
                                                                 "writeQueueNums": "2", "perm": "6"}).code == 0
        for n in range(10):  # 5 messages per queue, keys k0..k9
            assert rpc(c.broker_addr(i), C.SEND_MESSAGE_V2, send_ext(TOPIC, n % 2, f"k{n}"), b"body").code == 0
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


def send_ext(topic: str, qid: int, key: str) -> dict[str, str]:
    props = encode_properties({"TAGS": "TagA", "KEYS": key, "WAIT": "true"}).decode()
    return {"a": PGROUP, "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0", "g": "1700000000000",
            "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}


def body(r: RemotingCommand) -> Any:
    assert r.code == R.SUCCESS, (r.code, r.remark)
    return loads(r.body or b"null")


def by_queue(table: dict[str, Any]) -> dict[tuple[str, int], Any]:
    return {(object_key(k)["brokerName"], object_key(k)["queueId"]): v for k, v in table.items()}


class FakeConsumer:
    """A consumer (our own client) in GROUP on TOPIC, heart-beating to both brokers, answering what brokers ask
    consumers: running info (307), consume directly (309), status (221); it records reset notices (220)."""

    def __init__(self, client_id: str, language: str = "JAVA") -> None:
        self.client_id, self.language = client_id, language
        d = Dispatcher("fake-consumer")
        d.register_all({C.GET_CONSUMER_RUNNING_INFO: self.running_info, C.CONSUME_MESSAGE_DIRECTLY: self.consume,
                        C.RESET_CONSUMER_CLIENT_OFFSET: self.reset, C.GET_CONSUMER_STATUS_FROM_CLIENT: self.status})
        self.client = RemotingClient(d)
        self.notices: list[RemotingCommand] = []
        self.consumed: list[tuple[dict[str, str], bytes]] = []

    async def join(self, addrs: list[str]) -> None:
        hb = {"clientID": self.client_id, "producerDataSet": [{"groupName": PGROUP}], "consumerDataSet": [
            {"groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [
                 {"topic": TOPIC, "subString": "*", "expressionType": "TAG"}]}]}
        for addr in addrs:
            cmd = request(C.HEART_BEAT, {}, orjson.dumps(hb))
            cmd.language, cmd.version = self.language, 475
            assert (await self.client.invoke(addr, cmd)).code == R.SUCCESS

    def running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=orjson.dumps({"properties": {"clientId": self.client_id}, "jstack": "none"}))

    def consume(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.consumed.append((dict(cmd.ext), cmd.body or b""))
        return cmd.response(body=b'{"order":false,"autoCommit":true,"consumeResult":"CR_SUCCESS","spentTimeMills":1}')

    def reset(self, conn: Connection, cmd: RemotingCommand) -> None:
        self.notices.append(cmd)

    def status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        key = orjson.dumps({"brokerName": "broker-a", "queueId": 0, "topic": TOPIC})
        return cmd.response(body=b'{"messageQueueTable":{' + key + b":4}}")


@pytest.fixture
async def consumer(cluster: Cluster) -> AsyncIterator[FakeConsumer]:
    fake = FakeConsumer("10.0.0.9@fake-java")
    await fake.join([cluster.broker_addr(0), cluster.broker_addr(1)])
    yield fake
    await fake.client.close()


# -- topics -------------------------------------------------------------------------------------------------------


def test_topic_admin_bodies_and_refusals(cluster: Cluster) -> None:
    a = cluster.broker_addr(0)
    cfg = body(rpc(a, C.GET_TOPIC_CONFIG, {"topic": TOPIC}))  # TopicConfigAndQueueMapping: the fields at the top
    assert cfg["topicName"] == TOPIC and cfg["readQueueNums"] == 2 and cfg["perm"] == 6
    stats = by_queue(body(rpc(a, C.GET_TOPIC_STATS_INFO, {"topic": TOPIC}))["offsetTable"])
    assert stats[("broker-a", 0)]["maxOffset"] == 5 and stats[("broker-a", 1)]["minOffset"] == 0
    assert stats[("broker-a", 0)]["lastUpdateTimestamp"] > 0
    wrapper = body(rpc(a, C.GET_ALL_TOPIC_CONFIG))
    assert TOPIC in wrapper["topicConfigTable"] and wrapper["topicQueueMappingDetailMap"] == {}
    assert TOPIC in body(rpc(a, C.GET_TOPIC_NAME_LIST))["topicList"]
    assert "TBW102" in body(rpc(a, C.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))["topicList"]
    for ext, word in (({"topic": "bad topic!"}, "illegal characters"), ({"topic": "TBW102"}, "system topic"),
                      ({"topic": "rmq_sys_X"}, "system topic"), ({"topic": "TAttr", "attributes": "+x.y=1"},
                                                                  "unsupported key"),
                      ({"topic": "TQ", "readQueueNums": "0"}, "readQueueNums")):
        r = rpc(a, C.UPDATE_AND_CREATE_TOPIC, {"readQueueNums": "1", "writeQueueNums": "1", **ext})
        assert r.code == R.SYSTEM_ERROR and word in (r.remark or ""), (ext, r.remark)
    assert "bad topic!" not in body(rpc(a, C.GET_TOPIC_NAME_LIST))["topicList"]
    for code in (C.GET_TOPIC_CONFIG, C.GET_TOPIC_STATS_INFO, C.QUERY_TOPIC_CONSUME_BY_WHO):
        r = rpc(a, code, {"topic": "NoSuchTopic"})
        assert r.code == R.TOPIC_NOT_EXIST and "NoSuchTopic" in (r.remark or ""), (code, r.remark)


def test_topic_with_attributes_created_listed_and_deleted(cluster: Cluster) -> None:
    a = cluster.broker_addr(0)
    ext = {"topic": "TFifo", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6", "order": "true",
           "attributes": "+message.type=FIFO"}
    assert rpc(a, C.UPDATE_AND_CREATE_TOPIC, ext).code == 0
    cfg = body(rpc(a, C.GET_TOPIC_CONFIG, {"topic": "TFifo"}))
    assert cfg["attributes"] == {"message.type": "FIFO"} and cfg["order"] is True
    until_sync(lambda: rpc(cluster.namesrv, C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TFifo"}).code == 0, "TFifo routed")
    list_body = orjson.dumps({"topicConfigList": [{"topicName": "TL1", "readQueueNums": 1, "writeQueueNums": 1},
                                                  {"topicName": "TL2", "readQueueNums": 1, "writeQueueNums": 1}]})
    assert rpc(a, C.UPDATE_AND_CREATE_TOPIC_LIST, {}, list_body).code == 0
    assert {"TL1", "TL2"} <= set(body(rpc(a, C.GET_TOPIC_NAME_LIST))["topicList"])
    for t in ("TFifo", "TL1", "TL2"):
        assert rpc(a, C.DELETE_TOPIC_IN_BROKER, {"topic": t}).code == 0
    assert rpc(a, C.GET_TOPIC_CONFIG, {"topic": "TFifo"}).code == R.TOPIC_NOT_EXIST
    r = rpc(a, C.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
    assert r.code == R.SYSTEM_ERROR and "system topic" in (r.remark or "")
    assert rpc(a, C.CLEAN_UNUSED_TOPIC).code == 0 and rpc(a, C.CLEAN_EXPIRED_CONSUMEQUEUE).code == 0
    assert rpc(a, C.DELETE_EXPIRED_COMMITLOG).code == 0


def until_sync(cond: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # sleep-ok: polling a condition with a deadline


# -- groups and consumers -----------------------------------------------------------------------------------------


def test_subscription_group_admin(cluster: Cluster) -> None:
    a = cluster.broker_addr(0)
    cfg = {"groupName": "GAdm1", "retryMaxTimes": 3, "consumeBroadcastEnable": False, "groupRetryPolicy": {}}
    assert rpc(a, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, orjson.dumps(cfg)).code == 0
    got = body(rpc(a, C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "GAdm1"}))
    assert got["groupName"] == "GAdm1" and got["retryMaxTimes"] == 3 and got["consumeBroadcastEnable"] is False
    table = body(rpc(a, C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert "GAdm1" in table["subscriptionGroupTable"] and "dataVersion" in table
    listed = orjson.dumps({"groupConfigList": [{"groupName": "GAdm2"}, {"groupName": "GAdm3"}]})
    assert rpc(a, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, {}, listed).code == 0
    r = rpc(a, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, orjson.dumps({"groupName": "bad group"}))
    assert r.code == R.SYSTEM_ERROR and "illegal characters" in (r.remark or "")
    assert rpc(a, C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GAdm1", "cleanOffset": "true"}).code == 0
    r = rpc(a, C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "GAdm1"})
    assert r.code == R.SUBSCRIPTION_GROUP_NOT_EXIST and "GAdm1" in (r.remark or "")
    r = rpc(a, C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GAdm1"})  # again: nothing to delete, said so
    assert r.code == 0 and "does not exist" in (r.remark or "")
    for code, ext in ((C.GET_CONSUME_STATS, {"consumerGroup": "NoSuchGroup"}),
                      (C.QUERY_TOPICS_BY_CONSUMER, {"group": "NoSuchGroup"}),
                      (C.CLONE_GROUP_OFFSET, {"srcGroup": "NoSuchGroup", "destGroup": "X"})):
        r = rpc(a, code, ext)
        assert r.code == R.SUBSCRIPTION_GROUP_NOT_EXIST and "NoSuchGroup" in (r.remark or ""), (code, r.remark)


async def test_consumer_views_with_a_consumer_online(cluster: Cluster, consumer: FakeConsumer) -> None:
    a = cluster.broker_addr(0)
    conn = body(await arpc(a, C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": GROUP}))
    assert [c["clientId"] for c in conn["connectionSet"]] == [consumer.client_id]
    assert conn["connectionSet"][0]["language"] == "JAVA" and conn["connectionSet"][0]["version"] == 475
    assert conn["messageModel"] == "CLUSTERING" and conn["subscriptionTable"][TOPIC]["subString"] == "*"
    prod = body(await arpc(a, C.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": PGROUP}))
    assert consumer.client_id in [c["clientId"] for c in prod["connectionSet"]]
    assert PGROUP in body(await arpc(a, C.GET_ALL_PRODUCER_INFO))["data"]
    # 3 of 5 consumed on queue 0 of broker-a: diff 2 there, 5 on queue 1
    assert (await arpc(a, C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0",
                                                     "commitOffset": "3"})).code == 0
    stats = body(await arpc(a, C.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}))
    q = by_queue(stats["offsetTable"])
    assert q[("broker-a", 0)]["brokerOffset"] == 5 and q[("broker-a", 0)]["consumerOffset"] == 3
    assert q[("broker-a", 0)]["lastTimestamp"] > 0 and q[("broker-a", 1)]["consumerOffset"] == 0
    assert "consumeTps" in stats
    all_stats = body(await arpc(a, C.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))
    assert all_stats["brokerAddr"] == a and all_stats["totalDiff"] >= 7
    mine = [s for entry in all_stats["consumeStatsList"] for g, lst in entry.items() if g == GROUP for s in lst]
    assert sum(v["brokerOffset"] - v["consumerOffset"] for s in mine for v in s["offsetTable"].values()) == 7
    assert GROUP in body(await arpc(a, C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}))["groupList"]
    assert body(await arpc(a, C.QUERY_TOPICS_BY_CONSUMER, {"group": GROUP}))["topicList"] == [TOPIC]
    sub = body(await arpc(a, C.QUERY_SUBSCRIPTION_BY_CONSUMER, {"group": GROUP, "topic": TOPIC}))
    assert sub["subscriptionData"]["topic"] == TOPIC
    spans = body(await arpc(a, C.QUERY_CONSUME_TIME_SPAN, {"topic": TOPIC, "group": GROUP}))["consumeTimeSpanSet"]
    assert len(spans) == 2 and spans[0]["minTimeStamp"] <= spans[0]["consumeTimeStamp"] <= spans[0]["maxTimeStamp"]
    assert "#" in spans[0]["minTimeStampStr"]
    cq = body(await arpc(a, C.QUERY_CONSUME_QUEUE, {"topic": TOPIC, "queueId": "0", "index": "1", "count": "3",
                                                    "consumerGroup": GROUP}))
    assert cq["maxQueueIndex"] == 5 and len(cq["queueData"]) == 3 and cq["subscriptionData"]["topic"] == TOPIC
    assert cq["queueData"][1]["physicOffset"] > cq["queueData"][0]["physicOffset"]
    r = await arpc(a, C.QUERY_CONSUME_QUEUE, {"topic": "NoSuchTopic", "queueId": "0", "index": "0"})
    assert r.code == R.SYSTEM_ERROR and "NoSuchTopic" in (r.remark or "")
    r = await arpc(a, C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "OfflineGroup"})
    assert r.code == R.CONSUMER_NOT_ONLINE and "OfflineGroup" in (r.remark or "")


async def test_requests_forwarded_to_the_consumer(cluster: Cluster, consumer: FakeConsumer) -> None:
    a = cluster.broker_addr(0)
    info = body(await arpc(a, C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": GROUP, "clientId": consumer.client_id,
                                                             "jstackEnable": "false"}))
    assert info["properties"]["clientId"] == consumer.client_id
    status = body(await arpc(a, C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": GROUP}))
    assert by_queue(status["consumerTable"][consumer.client_id]) == {("broker-a", 0): 4}
    first = await arpc(a, C.QUERY_MESSAGE, {"topic": TOPIC, "key": "k0", "maxNum": "1", "beginTimestamp": "0",
                                           "endTimestamp": str(2**62)})
    msg = decode_records(first.body or b"")[0]
    msg_id = offset_msg_id(("127.0.0.1", cluster.ports[0]), msg.commit_log_offset)
    result = body(await arpc(a, C.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": GROUP, "clientId": consumer.client_id,
                                                              "msgId": msg_id, "topic": TOPIC}))
    assert result["consumeResult"] == "CR_SUCCESS"
    ext, raw = consumer.consumed[-1]
    assert ext["brokerName"] == "broker-a" and ext["topicSysFlag"] == "0" and "k0" in decode_records(raw)[0].keys
    r = await arpc(a, C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": GROUP, "clientId": "10.0.0.9@gone"})
    assert r.code == R.SYSTEM_ERROR and "not online" in (r.remark or "")
    r = await arpc(a, C.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": GROUP, "clientId": consumer.client_id,
                                                   "msgId": "not-an-id"})
    assert r.code == R.SYSTEM_ERROR and "not-an-id" in (r.remark or "")


async def test_reset_offset_commits_and_tells_every_consumer(cluster: Cluster, consumer: FakeConsumer) -> None:
    a = cluster.broker_addr(0)
    cpp = FakeConsumer("10.0.0.9@fake-cpp", language="CPP")
    await cpp.join([a])
    try:
        for q in (0, 1):
            await arpc(a, C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q),
                                                     "commitOffset": "5"})
        r = await arpc(a, C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": GROUP, "timestamp": "0",
                                                            "isForce": "true"})
        assert by_queue(body(r)["offsetTable"]) == {("broker-a", 0): 0, ("broker-a", 1): 0}
        for q in (0, 1):  # committed on the broker at once: the diff is back
            off = await arpc(a, C.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q)})
            assert off.ext["offset"] == "0"
        await until(lambda: consumer.notices, "the Java consumer told")
        java = loads(consumer.notices[-1].body or b"")["offsetTable"]
        assert by_queue(java) == {("broker-a", 0): 0, ("broker-a", 1): 0}
        assert consumer.notices[-1].ext["group"] == GROUP and consumer.notices[-1].ext["timestamp"] == "0"
        assert cpp.notices == []  # a C++ client learns it from its next pull (it drops queues on the notice)
        # until the group pulls a queue again, its commits of the queue (the old position) are ignored ...
        r = await arpc(a, C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1",
                                                     "commitOffset": "5"})
        assert r.code == R.SUCCESS and r.remark == "Offset has been previously reset"
        # ... and that pull is answered PULL_OFFSET_MOVED with the reset offset, once
        pull = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1", "queueOffset": "5", "maxMsgNums": "32",
                "sysFlag": "0", "commitOffset": "-1", "suspendTimeoutMillis": "0", "subscription": "*",
                "subVersion": "0"}
        r = await arpc(a, C.PULL_MESSAGE, pull)
        assert r.code == R.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "0" and r.ext["maxOffset"] == "5"
        r = await arpc(a, C.PULL_MESSAGE, {**pull, "queueOffset": "0"})
        assert r.code == R.SUCCESS and len(decode_records(r.body or b"")) == 5
        # one queue to a given offset; out of range and unknown topic/group are refused, nothing changed
        r = await arpc(a, C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": GROUP, "timestamp": "0",
                                                            "isForce": "true", "queueId": "1", "offset": "4"})
        assert by_queue(body(r)["offsetTable"]) == {("broker-a", 1): 4}
        for ext, code, word in (({"queueId": "1", "offset": "99"}, R.SYSTEM_ERROR, "not in consume queue range"),
                                ({"topic": "NoSuchTopic"}, R.TOPIC_NOT_EXIST, "NoSuchTopic"),
                                ({"group": "NoSuchGroup"}, R.SUBSCRIPTION_GROUP_NOT_EXIST, "NoSuchGroup")):
            r = await arpc(a, C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": GROUP, "timestamp": "0",
                                                                "isForce": "true", **ext})
            assert r.code == code and word in (r.remark or ""), (ext, r.code, r.remark)
        off = await arpc(a, C.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1"})
        assert off.ext["offset"] == "4"
        # CLONE_GROUP_OFFSET copies the committed offsets to another group
        assert (await arpc(a, C.CLONE_GROUP_OFFSET, {"srcGroup": GROUP, "destGroup": "GClone", "topic": TOPIC,
                                                     "offline": "true"})).code == 0
        off = await arpc(a, C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "GClone", "topic": TOPIC, "queueId": "1"})
        assert off.ext["offset"] == "4"
    finally:
        await cpp.client.close()


# -- the broker as a whole ------------------------------------------------------------------------------------------


def test_runtime_info_stats_config_and_ha_status(cluster: Cluster) -> None:
    a = cluster.broker_addr(1)
    table = body(rpc(a, C.GET_BROKER_RUNTIME_INFO))["table"]
    for key in ("putTps", "getTransferredTps", "msgPutTotalTodayMorning", "commitLogDiskRatio", "earliestMessageTimeStamp",
                "brokerActive", "runtime", "sendThreadPoolQueueSize", "brokerVersionDesc", "bootTimestamp"):
        assert key in table, key
    assert float(table["putTps"].split(" ")[0]) >= 0 and table["brokerActive"] == "true"
    assert 0 < int(table["earliestMessageTimeStamp"]) <= time.time() * 1000
    # puts show in TOPIC_PUT_NUMS once a sample (every second here) took them
    assert rpc(a, C.UPDATE_AND_CREATE_TOPIC, {"topic": "TStats", "readQueueNums": "1", "writeQueueNums": "1"}).code == 0
    for n in range(3):
        assert rpc(a, C.SEND_MESSAGE_V2, send_ext("TStats", 0, f"s{n}"), b"body").code == 0

    def minute_sum() -> int:
        r = rpc(a, C.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "TStats"})
        return int(body(r)["statsMinute"]["sum"]) if r.code == R.SUCCESS else -1

    until_sync(lambda: minute_sum() == 3, "3 puts in TStats' minute window")
    r = rpc(a, C.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "NoSuchTopic"})
    assert r.code == R.SYSTEM_ERROR and "NoSuchTopic" in (r.remark or "")
    ha = body(rpc(a, C.GET_BROKER_HA_STATUS))
    assert ha["master"] is True and ha["masterCommitLogMaxOffset"] > 0 and ha["haConnectionInfo"] == []
    r = rpc(a, C.UPDATE_BROKER_CONFIG, {}, b"storePathRootDir=/tmp/elsewhere\n")
    assert r.code == R.NO_PERMISSION and "storePathRootDir" in (r.remark or "")
    assert rpc(a, C.UPDATE_BROKER_CONFIG, {}, b"fileReservedTime=48\n").code == 0
    assert b"fileReservedTime=48" in (rpc(a, C.GET_BROKER_CONFIG).body or b"")


def test_acl_codes_on_a_broker_without_acl_say_so(cluster: Cluster) -> None:
    for code in (C.UPDATE_AND_CREATE_ACL_CONFIG, C.DELETE_ACL_CONFIG, C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                 C.GET_BROKER_CLUSTER_ACL_INFO, C.GET_BROKER_CLUSTER_ACL_CONFIG):
        r = rpc(cluster.broker_addr(0), code, {"accessKey": "someUser1", "secretKey": "12345678"})
        assert r.code != R.SUCCESS and "aclEnable=false" in (r.remark or ""), (code, r.remark)


# -- the name server ------------------------------------------------------------------------------------------------


def test_name_server_admin(cluster: Cluster) -> None:
    ns = cluster.namesrv
    assert rpc(ns, C.UPDATE_NAMESRV_CONFIG, {}, b"scanNotActiveBrokerInterval=7000\n").code == 0
    assert b"scanNotActiveBrokerInterval=7000" in (rpc(ns, C.GET_NAMESRV_CONFIG).body or b"")
    r = rpc(ns, C.UPDATE_NAMESRV_CONFIG, {}, b"kvConfigPath=/tmp/x\n")
    assert r.code == R.NO_PERMISSION and "kvConfigPath" in (r.remark or "")
    system = body(rpc(ns, C.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    assert {"DefaultCluster", "broker-a", "broker-b"} <= set(system["topicList"]) and system["brokerAddr"]
    assert TOPIC in body(rpc(ns, C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"]
    assert TOPIC in body(rpc(ns, C.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}))["topicList"]
    r = rpc(ns, C.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-zz"})
    assert r.code == R.BROKER_NOT_EXIST and "broker-zz" in (r.remark or "")
    assert rpc(ns, C.PUT_KV_CONFIG, {"namespace": "NSAdm", "key": "k", "value": "v"}).code == 0
    assert rpc(ns, C.GET_KV_CONFIG, {"namespace": "NSAdm", "key": "k"}).ext["value"] == "v"
    assert rpc(ns, C.DELETE_KV_CONFIG, {"namespace": "NSAdm", "key": "k"}).code == 0
    assert rpc(ns, C.GET_KV_CONFIG, {"namespace": "NSAdm", "key": "k"}).code == R.QUERY_NOT_FOUND


def test_bad_input_keeps_the_connection_serving(cluster: Cluster) -> None:
    async def go() -> None:
        client = RemotingClient()
        try:
            a = cluster.broker_addr(0)
            for code, ext, body_ in ((C.GET_CONSUME_STATS, {}, None), (C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b"{"),
                                     (C.QUERY_CONSUME_QUEUE, {"topic": TOPIC, "queueId": "x", "index": "0"}, None),
                                     (C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC}, None)):
                r = await client.invoke(a, request(code, ext, body_))
                assert r.code in (R.INVALID_PARAMETER, R.SYSTEM_ERROR) and r.remark, (code, r.code)
            assert (await client.invoke(a, request(C.GET_TOPIC_CONFIG, {"topic": TOPIC}))).code == 0
        finally:
            await client.close()

    asyncio.run(go())

