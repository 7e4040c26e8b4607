"""SQL92 subscriptions against a running container (real process, real sockets): the broker delivers exactly the
messages whose properties satisfy the expression, for expressions carried by the pull itself and for those a
consumer registered in its heartbeat; consumer start (CHECK_CLIENT_CONFIG) and pulls get RocketMQ's answers when
the expression is bad or enablePropertyFilter is off."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from brokerd.message import decode_records, encode_properties
from brokerd.remoting import RemotingCommand, request
from brokerd.remoting.codes import ResponseCode
from tests.support import Cluster, arpc, rpc

pytestmark = pytest.mark.integration

TOPIC = "T_sql92"
N = 60


def props_of(i: int) -> dict[str, str]:
    p = {"TAGS": "TagA" if i % 2 else "TagB", "UNIQ_KEY": f"SQL{i:029d}", "WAIT": "true", "region": f"r{i % 3}"}
    if i % 5:
        p["price"] = str(i)  # every fifth message has no price
    return p


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("sql92"), brokers=1, enablePropertyFilter="true").start()
    for i in range(N):
        ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
               "i": encode_properties(props_of(i)).decode(), "j": "0", "k": "false", "m": "false"}
        assert rpc(c.broker_addr(), 310, ext, f"m{i}".encode()).code == 0
    yield c
    assert c.stop() == 0


def pull_ext(expr: str, offset: int, *, carried: bool = True, group: str = "g_sql", sub_version: int = 0,
             expression_type: str = "SQL92") -> dict[str, str]:  # fmt: skip
    ext = {"consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "8",
           "sysFlag": "4" if carried else "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
           "subVersion": str(sub_version), "expressionType": expression_type}
    if carried:
        ext["subscription"] = expr
    return ext


async def pull_all(addr: str, expr: str, **kw: object) -> tuple[list[int], set[int]]:
    """Pull from offset 0 to the end; (indexes of the messages received, codes seen)."""
    got: list[int] = []
    codes: set[int] = set()
    offset = 0
    while offset < N:
        r: RemotingCommand = await arpc(addr, 11, pull_ext(expr, offset, **kw))  # type: ignore[arg-type]
        codes.add(r.code)
        if r.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY):
            return got, codes
        if r.code == ResponseCode.SUCCESS:
            for m in decode_records(r.body or b""):
                i = int(m.body[1:])
                assert m.properties["UNIQ_KEY"] == props_of(i)["UNIQ_KEY"] and m.queue_offset == i
                got.append(i)
        offset = int(r.ext["nextBeginOffset"])
    return got, codes


def want(pred: object) -> list[int]:
    return [i for i in range(N) if pred(props_of(i))]  # type: ignore[operator]


async def test_pull_carrying_an_sql92_subscription_gets_exactly_the_matching_messages(cluster: Cluster) -> None:
    got, codes = await pull_all(cluster.broker_addr(), "TAGS = 'TagA' AND price BETWEEN 10 AND 40")
    assert got == want(lambda p: p["TAGS"] == "TagA" and "price" in p and 10 <= int(p["price"]) <= 40)
    assert codes == {ResponseCode.SUCCESS}
    got, _ = await pull_all(cluster.broker_addr(), "price IS NULL OR region IN ('r0')")
    assert got == want(lambda p: "price" not in p or p["region"] == "r0")
    got, codes = await pull_all(cluster.broker_addr(), "price > 1000")  # nothing matches: the offset still moves on
    assert got == [] and codes == {ResponseCode.PULL_RETRY_IMMEDIATELY}


async def test_subscription_registered_by_heartbeat_filters_pulls_without_one(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    hb = {"clientID": "127.0.0.1@sql", "consumerDataSet": [{
        "groupName": "g_hb_sql", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [
            {"topic": TOPIC, "subString": "price > 50", "expressionType": "SQL92", "subVersion": 7,
             "tagsSet": [], "codeSet": [], "classFilterMode": False}]}]}
    from brokerd.remoting import RemotingClient

    client = RemotingClient()  # one connection: the registration lives as long as it does
    try:
        assert (await client.invoke(addr, request(34, {}, orjson.dumps(hb)), 5)).code == 0
        got: list[int] = []
        offset = 0
        while offset < N:
            r = await client.invoke(addr, request(11, pull_ext("", offset, carried=False, group="g_hb_sql",
                                                              sub_version=7)), 5)  # fmt: skip
            assert r.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), r.remark
            got += [int(m.body[1:]) for m in decode_records(r.body or b"")]
            offset = int(r.ext["nextBeginOffset"])
        assert got == want(lambda p: "price" in p and int(p["price"]) > 50)
        newer = await client.invoke(addr, request(11, pull_ext("", 0, carried=False, group="g_hb_sql",
                                                               sub_version=8)), 5)  # fmt: skip
        assert newer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
        hb["consumerDataSet"][0]["subscriptionDataSet"][0].update(subString="price >", subVersion=9)  # type: ignore[index]
        assert (await client.invoke(addr, request(34, {}, orjson.dumps(hb)), 5)).code == 0
        bad = await client.invoke(addr, request(11, pull_ext("", 0, carried=False, group="g_hb_sql",
                                                             sub_version=9)), 5)  # fmt: skip
        assert bad.code == ResponseCode.FILTER_DATA_NOT_EXIST and "expression may be wrong" in (bad.remark or "")
    finally:
        await client.close()


async def test_bad_expression_carried_by_a_pull_is_refused(cluster: Cluster) -> None:
    r = await arpc(cluster.broker_addr(), 11, pull_ext("price > 'x'", 0))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "cannot be compared" in r.remark


def check_body(expr: str, expression_type: str = "SQL92") -> bytes:
    return orjson.dumps({"clientId": "127.0.0.1@sql", "group": "g_check", "subscriptionData": {
        "topic": TOPIC, "subString": expr, "expressionType": expression_type, "subVersion": 1, "tagsSet": [],
        "codeSet": [], "classFilterMode": False}})


async def test_check_client_config_and_enable_property_filter(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    assert (await arpc(addr, 46, {}, check_body("price > 5 AND TAGS = 'TagA'"))).code == ResponseCode.SUCCESS
    assert (await arpc(addr, 46, {}, check_body("TagA || TagB", "TAG"))).code == ResponseCode.SUCCESS
    bad = await arpc(addr, 46, {}, check_body("price >"))
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column" in bad.remark
    off = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0"}
    assert (await arpc(f"127.0.0.1:{cluster.admin_port}", 25, off,
                       b"enablePropertyFilter=false\n")).code == ResponseCode.SUCCESS  # fmt: skip
    try:
        refused = await arpc(addr, 46, {}, check_body("price > 5"))
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark == "The broker does not support consumer to filter message by SQL92"
        pulled = await arpc(addr, 11, pull_ext("price > 5", 0))
        assert pulled.code == ResponseCode.SYSTEM_ERROR and "SQL92" in pulled.remark
        assert (await arpc(addr, 46, {}, check_body("*", "TAG"))).code == ResponseCode.SUCCESS
    finally:
        assert (await arpc(f"127.0.0.1:{cluster.admin_port}", 25, off,
                           b"enablePropertyFilter=true\n")).code == ResponseCode.SUCCESS  # fmt: skip
