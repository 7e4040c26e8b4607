"""Broker protocol behaviour seen by clients other than the C++ one: Java-style binary headers, SEND_MESSAGE (10)
with long field names, batches (320), pull statuses, message lookup, heartbeat version, and bad input."""

from __future__ import annotations

import asyncio
import pathlib
import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerd.message import decode_offset_msg_id, decode_records, encode_batch_body, encode_properties
from brokerd.remoting import RemotingClient, RemotingCommand, encode, encode_binary, request
from brokerd.remoting.codec import FrameDecoder
from tests.support import Cluster, arpc, rpc

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = Cluster(tmp_path_factory.mktemp("proto"), brokers=1).start()
    yield c
    assert c.stop() == 0


def send_v2(topic: str, i: int, qid: int = 0, tags: str = "TagA", keys: str | None = None) -> RemotingCommand:
    props = {"TAGS": tags, "KEYS": keys or f"k{i}", "WAIT": "true", "UNIQ_KEY": f"UNIQ{i:028d}"}
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0", "g": "1700000000000", "h": "0",
           "i": encode_properties(props).decode(), "j": "0", "k": "false", "m": "false", "n": "broker-a"}
    return request(310, ext, f"payload-{i}".encode())


def pull(topic: str, qid: int, offset: int, group: str = "g_proto", expr: str = "*", n: int = 32) -> RemotingCommand:
    return request(11, {"consumerGroup": group, "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
                        "maxMsgNums": str(n), "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": expr, "subVersion": "0", "expressionType": "TAG"})


async def raw(port: int, frame: bytes, expect: int = 1) -> list[RemotingCommand]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(frame)
    dec, out = FrameDecoder(), []
    while len(out) < expect:
        chunk = await asyncio.wait_for(r.read(65536), 10)
        if not chunk:
            break
        out += dec.feed(chunk)
    w.close()
    return out


async def test_binary_header_send_and_json_answer(cluster: Cluster) -> None:
    cmd = send_v2("T_bin", 1)
    cmd.opaque = 99
    [resp] = await raw(cluster.ports[0], encode_binary(cmd))
    assert resp.opaque == 99 and resp.code == 0 and resp.is_response
    assert set(resp.ext) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
    host, port, _ = decode_offset_msg_id(resp.ext["msgId"])
    assert (host, port) == ("127.0.0.1", cluster.ports[0])


async def test_send_v1_long_names_and_fast_port(cluster: Cluster) -> None:
    ext = {"producerGroup": "pg", "topic": "T_v1", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "queueId": 1, "sysFlag": 0, "bornTimestamp": 1, "flag": 7, "properties": "TAGS\x01X\x02", "batch": "0"}
    header = orjson.dumps({"code": 10, "extFields": ext, "flag": 0, "language": "CPP", "opaque": 5,
                           "remark": "", "version": 63}) + b"\n"
    frame = struct.pack(">ii", 4 + len(header) + 3, len(header)) + header + b"abc"
    [resp] = await raw(cluster.ports[0] - 2, frame)  # the fast (VIP) port takes sends too
    assert resp.code == 0 and resp.ext["queueId"] == "1"
    r = await arpc(cluster.broker_addr(), 11, pull("T_v1", 1, 0).ext)
    [m] = decode_records(r.body)
    assert m.body == b"abc" and m.flag == 7 and m.properties["TAGS"] == "X" and "UNIQ_KEY" in m.properties


async def test_pull_is_refused_on_the_fast_port(cluster: Cluster) -> None:
    [resp] = await raw(cluster.ports[0] - 2, encode(pull("TBW102", 0, 0)))
    assert resp.code == 3


async def test_batch_send_gets_consecutive_offsets(cluster: Cluster) -> None:
    body = encode_batch_body([(0, f"b{i}".encode(), {"UNIQ_KEY": f"U{i}", "KEYS": f"bk{i}"}) for i in range(5)])
    cmd = send_v2("T_batch", 0)
    cmd.code, cmd.body = 320, body
    cmd.ext["m"] = "true"
    r = await arpc(cluster.broker_addr(), 320, cmd.ext, body)
    assert r.code == 0 and len(r.ext["msgId"].split(",")) == 5
    first = int(r.ext["queueOffset"])
    msgs = decode_records((await arpc(cluster.broker_addr(), 11, pull("T_batch", 0, first).ext)).body)
    assert [m.body for m in msgs] == [f"b{i}".encode() for i in range(5)]
    assert [m.queue_offset for m in msgs] == list(range(first, first + 5))


def test_pull_status_table(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    for i in range(3):
        assert rpc(addr, 310, send_v2("T_pst", i).ext, b"x").code == 0
    ok = rpc(addr, 11, pull("T_pst", 0, 0).ext)
    assert ok.code == 0 and ok.ext["nextBeginOffset"] == "3" and ok.remark == "FOUND"
    caught_up = rpc(addr, 11, pull("T_pst", 0, 3).ext)
    assert caught_up.code == 19 and caught_up.ext["nextBeginOffset"] == "3"
    beyond = rpc(addr, 11, pull("T_pst", 0, 50).ext)
    assert beyond.code == 21 and beyond.ext["nextBeginOffset"] == "3"
    empty_q = rpc(addr, 11, pull("T_pst", 1, 0).ext)
    assert empty_q.code == 19
    filtered = rpc(addr, 11, pull("T_pst", 0, 0, expr="Nope").ext)
    assert filtered.code == 20 and filtered.ext["nextBeginOffset"] == "3"
    bad_q = rpc(addr, 11, pull("T_pst", 99, 0).ext)
    assert bad_q.code == 29
    assert rpc(addr, 11, pull("No_Such_Topic", 0, 0).ext).code == 17
    for k in ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"):
        assert k in caught_up.ext


async def test_long_poll_is_woken_by_an_arrival(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    assert (await arpc(addr, 310, send_v2("T_lp", 0).ext, b"first")).code == 0
    client = RemotingClient()
    try:
        req = pull("T_lp", 0, 1)
        req.ext["sysFlag"] = "6"
        req.ext["suspendTimeoutMillis"] = "20000"
        waiter = asyncio.ensure_future(client.invoke(addr, req, timeout=30))
        await asyncio.sleep(0.3)  # sleep-ok: make sure the pull is parked before the arrival
        assert not waiter.done()
        assert (await client.invoke(addr, send_v2("T_lp", 1), timeout=5)).code == 0
        resp = await asyncio.wait_for(waiter, 5)
        assert resp.code == 0 and decode_records(resp.body)[0].queue_offset == 1
    finally:
        await client.close()


def test_view_by_id_and_query_by_key(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    r = rpc(addr, 310, send_v2("T_find", 7, keys="order-42 order-43").ext, b"findme")
    _, _, phys = decode_offset_msg_id(r.ext["msgId"])
    view = rpc(addr, 33, {"offset": str(phys)})
    assert view.code == 0 and decode_records(view.body)[0].body == b"findme"
    assert rpc(addr, 33, {"offset": str(10**12)}).code == 1
    q = rpc(addr, 12, {"topic": "T_find", "key": "order-43", "maxNum": "32", "beginTimestamp": "0",
                       "endTimestamp": str(2**62)})
    assert q.code == 0 and [m.body for m in decode_records(q.body)] == [b"findme"]


def test_heartbeat_answers_modern_version_and_offsets(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    hb = {"clientID": "127.0.0.1@t", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": [
        {"groupName": "g_hb", "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0,
         "subscriptionDataSet": [{"topic": "T_pst", "subString": "*", "subVersion": "1"}]}]}
    r = rpc(addr, 34, {}, orjson.dumps(hb))
    assert r.code == 0 and r.version >= 401
    assert rpc(addr, 14, {"consumerGroup": "g_hb", "topic": "T_pst", "queueId": "0"}).ext["offset"] == "0"
    assert rpc(addr, 15, {"consumerGroup": "g_hb", "topic": "T_pst", "queueId": "0", "commitOffset": "2"}).code == 0
    assert rpc(addr, 14, {"consumerGroup": "g_hb", "topic": "T_pst", "queueId": "0"}).ext["offset"] == "2"
    assert rpc(addr, 30, {"topic": "T_pst", "queueId": "0"}).ext["offset"] == "3"
    assert rpc(addr, 31, {"topic": "T_pst", "queueId": "0"}).ext["offset"] == "0"
    assert int(rpc(addr, 32, {"topic": "T_pst", "queueId": "0"}).ext["timestamp"]) > 0


def test_bad_requests_answer_error_codes(cluster: Cluster) -> None:
    addr = cluster.broker_addr()
    assert rpc(addr, 4242).code == 3
    bad_topic = send_v2("bad topic!", 0)
    assert rpc(addr, 310, bad_topic.ext, b"x").code == 29
    no_topic = send_v2("T_x", 0)
    del no_topic.ext["b"]
    r = rpc(addr, 310, no_topic.ext, b"x")
    assert r.code != 0 and "topic" in (r.remark or "")
    assert rpc(addr, 310, send_v2("SCHEDULE_TOPIC_XXXX", 0).ext, b"x").code == 16
    assert rpc(addr, 11, {**pull("T_pst", 0, 0).ext, "queueOffset": "abc"}).code == 29
    assert rpc(addr, 34, {}, b"{not json").code == 1
    assert rpc(addr, 310, send_v2("T_big", 0).ext, b"x" * (4 * 1024 * 1024 + 1)).code == 13


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.sampled_from([10, 11, 14, 15, 17, 29, 30, 33, 34, 36, 38, 41, 310, 320]),
       ext=st.dictionaries(st.sampled_from(["a", "b", "e", "topic", "queueId", "queueOffset", "consumerGroup",
                                            "offset", "commitOffset", "maxMsgNums", "sysFlag", "m", "group"]),
                           st.one_of(st.text(max_size=12), st.integers(-2**40, 2**40).map(str)), max_size=8),
       body=st.binary(max_size=64))
def test_fuzzed_headers_get_answers_and_broker_keeps_serving(cluster: Cluster, code: int, ext: dict, body: bytes) -> None:
    r = rpc(cluster.broker_addr(), code, ext, body, timeout=10)
    assert r.is_response
    assert rpc(cluster.broker_addr(), 30, {"topic": "TBW102", "queueId": "0"}).code == 0


def test_oversized_frame_closes_only_that_connection(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    async def go() -> None:
        r, w = await asyncio.open_connection("127.0.0.1", cluster.ports[0])
        w.write(struct.pack(">i", 64 * 1024 * 1024))
        assert await asyncio.wait_for(r.read(), 10) == b""
        w.close()
    asyncio.run(go())
    assert rpc(cluster.broker_addr(), 30, {"topic": "TBW102", "queueId": "0"}).code == 0


async def test_membership_change_notifies_and_queue_locks_are_exclusive(cluster: Cluster) -> None:
    from brokerd.remoting import Dispatcher

    addr = cluster.broker_addr()
    notified: list[str] = []
    got_notice = asyncio.Event()

    def on_notify(conn: object, cmd: RemotingCommand) -> None:
        notified.append(cmd.ext.get("consumerGroup", ""))
        got_notice.set()

    d = Dispatcher("client-a")
    d.register(40, on_notify)  # type: ignore[arg-type]
    a, b = RemotingClient(dispatcher=d), RemotingClient()

    def hb(cid: str) -> RemotingCommand:
        body = {"clientID": cid, "producerDataSet": [], "consumerDataSet": [
            {"groupName": "g_lock", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
             "subscriptionDataSet": [{"topic": "TBW102", "subString": "*", "subVersion": 1}]}]}
        return request(34, {}, orjson.dumps(body))

    try:
        assert (await a.invoke(addr, hb("10.0.0.1@a"))).code == 0
        got_notice.clear()
        assert (await b.invoke(addr, hb("10.0.0.2@b"))).code == 0
        await asyncio.wait_for(got_notice.wait(), 5)  # a learns that b joined
        assert notified[-1] == "g_lock"
        ids = orjson.loads((await a.invoke(addr, request(38, {"consumerGroup": "g_lock"}))).body)["consumerIdList"]
        assert ids == ["10.0.0.1@a", "10.0.0.2@b"]
        mq = {"topic": "TBW102", "brokerName": "broker-a", "queueId": 0}

        def lock(cid: str, code: int = 41) -> RemotingCommand:
            return request(code, {}, orjson.dumps({"consumerGroup": "g_lock", "clientId": cid, "mqSet": [mq]}))

        assert orjson.loads((await a.invoke(addr, lock("10.0.0.1@a"))).body)["lockOKMQSet"] == [mq]
        assert orjson.loads((await b.invoke(addr, lock("10.0.0.2@b"))).body)["lockOKMQSet"] == []
        assert (await a.invoke(addr, lock("10.0.0.1@a", 42))).code == 0
        assert orjson.loads((await b.invoke(addr, lock("10.0.0.2@b"))).body)["lockOKMQSet"] == [mq]
        got_notice.clear()
        await b.close()  # b's connection closes: a is told again
        await asyncio.wait_for(got_notice.wait(), 5)
        ids = orjson.loads((await a.invoke(addr, request(38, {"consumerGroup": "g_lock"}))).body)["consumerIdList"]
        assert ids == ["10.0.0.1@a"]
    finally:
        await a.close()
        await b.close()
