"""The name server over real sockets: broker registration through the broker-side client, route requests shaped
exactly like real clients' captures (C++ JSON with numbers and a trailing newline, Java binary header, ali-ons),
connection-close removal, periodic expiry, admin/KV requests, and the `mqnamesrv` process."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from brokerd.namesrv import client as nsc
from brokerd.namesrv.body import DataVersion, crc32, dumps, encode_register_body
from brokerd.namesrv.service import NamesrvConfig, NamesrvService, start_server
from brokerd.remoting import RemotingClient, RemotingServer, RequestCode, ResponseCode, request
from tests.support import free_port

TOPICS = {
    "TBW102": {"topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7,
               "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}},
    "T1": {"topicName": "T1", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}},
}
DV = {"counter": 1, "stateVersion": 0, "timestamp": 1700000000000}


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def __call__(self) -> int:
        return self.t


async def wait_for(pred: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)  # sleep-ok: polling a condition with a deadline


Namesrv = tuple[NamesrvService, RemotingServer, str]


@pytest.fixture
async def namesrv() -> AsyncIterator[Namesrv]:
    svc, server = await start_server(NamesrvConfig(bind_address="127.0.0.1", listen_port=0))
    yield svc, server, f"127.0.0.1:{server.port}"
    await svc.stop()
    await server.stop(grace=1)


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()


async def register(c: RemotingClient, addr: str, name: str = "broker-a", broker_addr: str = "127.0.0.1:10911",  # port-ok: address data, nothing binds it
                   broker_id: int = 0, topics: dict[str, dict[str, Any]] | None = None,
                   compressed: bool = False) -> nsc.RegisterBrokerResult:
    return await nsc.register_broker(
        c, addr, cluster="DefaultCluster", broker_name=name, broker_addr=broker_addr, broker_id=broker_id,
        ha_server_addr=broker_addr.rsplit(":", 1)[0] + ":10912", topic_config_table=topics or TOPICS,
        data_version=DV, compressed=compressed)


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def java_binary_route_frame(topic: str) -> bytes:
    """As captured from a Java 4.9.8 client with -Drocketmq.serialize.type=ROCKETMQ (code 105, version 409)."""
    k, v = b"topic", topic.encode()
    ext = struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    header = struct.pack(">hBhiii", 105, 0, 409, 0, 0, 0) + struct.pack(">i", len(ext)) + ext
    return struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header


def cpp_route_frame(topic: str) -> bytes:
    """As captured from rocketmq-client-cpp: numbers in extFields, "remark":"", a newline after the JSON."""
    header = ('{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"NdlR+VlmO/2AwqtO0Rt9XkDHzVw=",'
              f'"queueId":3,"k":false,"topic":"{topic}"}},"flag":0,"language":"CPP","opaque":0,"remark":"",'
              '"version":333}\n').encode()
    return json_frame(header)


def alions_route_frame(topic: str) -> bytes:
    header = ('{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,'
              f'"extFields":{{"topic":"{topic}"}}}}').encode()
    return json_frame(header)


async def raw_call(port: int, frame: bytes) -> tuple[dict[str, Any], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(frame)
        (total,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        payload = await asyncio.wait_for(reader.readexactly(total), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    (word,) = struct.unpack(">i", payload[:4])
    assert word >> 24 == 0, "answers must use JSON headers"
    hlen = word & 0xFFFFFF
    header = orjson.loads(payload[4:4 + hlen])
    assert all(isinstance(v, str) for v in header.get("extFields", {}).values())
    return header, payload[4 + hlen:]


EXPECTED_ROUTE = (b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'  # port-ok: address data, nothing binds it
                  b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},'
                  b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
                  b'"writeQueueNums":4}]}')


async def test_register_route_for_every_client_shape_then_unregister(namesrv: Namesrv, client: RemotingClient) -> None:
    _, server, addr = namesrv
    assert await register(client, addr) == nsc.RegisterBrokerResult(None, None)
    for frame, opaque in ((cpp_route_frame("T1"), 0), (java_binary_route_frame("T1"), 0),
                          (alions_route_frame("T1"), 1)):
        header, body = await raw_call(server.port, frame)
        assert (header["code"], header["flag"], header["opaque"]) == (0, 1, opaque)
        assert body == EXPECTED_ROUTE
    route = await nsc.get_route(client, addr, "TBW102")
    assert route is not None and route["queueDatas"][0]["perm"] == 7
    await nsc.unregister_broker(client, addr, cluster="DefaultCluster", broker_name="broker-a",
                                broker_addr="127.0.0.1:10911", broker_id=0)  # port-ok: address data, nothing binds it
    header, body = await raw_call(server.port, cpp_route_frame("T1"))
    assert header["code"] == ResponseCode.TOPIC_NOT_EXIST
    assert header["remark"] == "No topic route info in name server for the topic: T1"
    assert await nsc.get_route(client, addr, "T1") is None


async def test_compressed_registration_and_slave_learns_master(namesrv: Namesrv, client: RemotingClient) -> None:
    _, _, addr = namesrv
    await register(client, addr, compressed=True)
    res = await register(client, addr, broker_addr="127.0.0.2:10911", broker_id=1, compressed=True)  # port-ok: address data, nothing binds it
    assert res == nsc.RegisterBrokerResult("127.0.0.1:10911", "127.0.0.1:10912")  # port-ok: address data, nothing binds it
    route = await nsc.get_route(client, addr, "T1")
    assert route is not None and route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911",  # port-ok: address data, nothing binds it
                                                                             "1": "127.0.0.2:10911"}  # port-ok: address data, nothing binds it
    info = await nsc.get_cluster_info(client, addr)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def _register_cmd(body: bytes | None, crc: int, **ext: str) -> Any:
    fields = {"brokerAddr": "127.0.0.1:10911", "brokerId": "0", "brokerName": "broker-a",  # port-ok: address data, nothing binds it
              "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:10912", "compressed": "false",  # port-ok: data, nothing binds it
              "bodyCrc32": str(crc), **ext}
    return request(RequestCode.REGISTER_BROKER, fields, body)


async def test_bad_registrations_are_refused_and_change_nothing(namesrv: Namesrv, client: RemotingClient) -> None:
    svc, _, addr = namesrv
    body = encode_register_body(TOPICS, DataVersion(1, 0, 1))
    resp = await client.invoke(addr, _register_cmd(body, crc32(body) ^ 1))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    resp = await client.invoke(addr, _register_cmd(b'{"topicConfigSerializeWrapper":', 0))
    assert resp.code == ResponseCode.SYSTEM_ERROR and (resp.remark or "").startswith("Failed to decode RegisterBrokerBody")
    single = encode_register_body({"T1": TOPICS["T1"]}, DataVersion(1, 0, 1))
    resp = await client.invoke(addr, _register_cmd(single, crc32(single)))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "register broker failed")
    resp = await client.invoke(addr, _register_cmd(body, 0, brokerId="x"))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "brokerId" in (resp.remark or "")
    assert svc.routes.broker_addr_table == {} and svc.routes.broker_live_table == {}
    # bodyCrc32=0 means "not computed": accepted.
    resp = await client.invoke(addr, _register_cmd(body, 0))
    assert resp.code == ResponseCode.SUCCESS


async def test_connection_close_removes_exactly_its_brokers(namesrv: Namesrv, client: RemotingClient) -> None:
    svc, _, addr = namesrv
    pooled = RemotingClient()
    await register(pooled, addr, "broker-a", "127.0.0.1:10911")  # port-ok: address data, nothing binds it
    await register(pooled, addr, "broker-b", "127.0.0.1:20911")  # port-ok: data, nothing binds it
    await register(client, addr, "broker-c", "127.0.0.1:30911")  # port-ok: data, nothing binds it
    await pooled.close()
    await wait_for(lambda: "broker-a" not in svc.routes.broker_addr_table, "broker-a removal")
    await wait_for(lambda: "broker-b" not in svc.routes.broker_addr_table, "broker-b removal")
    route = await nsc.get_route(client, addr, "T1")
    assert route is not None and [b["brokerName"] for b in route["brokerDatas"]] == ["broker-c"]


async def test_periodic_scan_expires_silent_brokers() -> None:
    clock = Clock()
    cfg = NamesrvConfig(bind_address="127.0.0.1", scan_not_active_broker_interval_ms=20)
    svc, server = await start_server(cfg, now_ms=clock, port=0)
    c = RemotingClient()
    try:
        addr = f"127.0.0.1:{server.port}"
        await register(c, addr)
        await nsc.broker_heartbeat(c, addr, cluster="DefaultCluster", broker_name="broker-a",
                                   broker_addr="127.0.0.1:10911", broker_id=0)  # port-ok: address data, nothing binds it
        clock.t += 120_000
        assert await nsc.get_route(c, addr, "T1") is not None  # not older than the timeout yet
        clock.t += 1
        await wait_for(lambda: not svc.routes.broker_live_table, "expiry scan")
        assert await nsc.get_route(c, addr, "T1") is None
    finally:
        await c.close()
        await svc.stop()
        await server.stop(grace=1)


async def test_admin_topic_and_kv_requests(namesrv: Namesrv, client: RemotingClient) -> None:
    svc, _, addr = namesrv
    await register(client, addr)
    assert await nsc.get_all_topics(client, addr) == ["T1", "TBW102"]
    resp = await client.invoke(addr, request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}))
    assert orjson.loads(resp.body or b"") == {"topicList": ["T1", "TBW102"]}
    assert await nsc.set_write_perm(client, addr, "broker-a", writable=False) == 2
    route = await nsc.get_route(client, addr, "T1")
    assert route is not None and route["queueDatas"][0]["perm"] == 4
    assert await nsc.set_write_perm(client, addr, "broker-a", writable=True) == 2
    await nsc.register_topic(client, addr, "T2", [{"brokerName": "broker-a", "readQueueNums": 2,
                                                   "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0}])
    assert (await nsc.get_route(client, addr, "T2")) is not None
    with pytest.raises(nsc.NamesrvError, match="ghost"):
        await nsc.register_topic(client, addr, "T3", [{"brokerName": "ghost", "perm": 6}])
    await nsc.delete_topic(client, addr, "T2")
    assert await nsc.get_route(client, addr, "T2") is None
    resp = await client.invoke(addr, request(RequestCode.GET_BROKER_MEMBER_GROUP,
                                             {"clusterName": "DefaultCluster", "brokerName": "broker-a"}))
    assert orjson.loads(resp.body or b"")["brokerMemberGroup"]["brokerAddrs"] == {"0": "127.0.0.1:10911"}  # port-ok: address data, nothing binds it
    changed, dv = await nsc.query_data_version(client, addr, cluster="DefaultCluster", broker_name="broker-a",
                                               broker_addr="127.0.0.1:10911", broker_id=0, data_version=DV)  # port-ok: address data, nothing binds it
    assert (changed, dv) == (False, DV)
    changed, _ = await nsc.query_data_version(client, addr, cluster="DefaultCluster", broker_name="broker-a",
                                              broker_addr="127.0.0.1:10911", broker_id=0,  # port-ok: address data, nothing binds it
                                              data_version={**DV, "counter": 2})
    assert changed
    assert await nsc.get_kv_config(client, addr, "ORDER_TOPIC_CONFIG", "T1") is None
    await nsc.put_kv_config(client, addr, "ORDER_TOPIC_CONFIG", "T1", "broker-a:4")
    assert await nsc.get_kv_config(client, addr, "ORDER_TOPIC_CONFIG", "T1") == "broker-a:4"
    res = await register(client, addr)  # the broker gets the ORDER_TOPIC_CONFIG namespace back
    assert res.kv_table == {"T1": "broker-a:4"}
    await nsc.delete_kv_config(client, addr, "ORDER_TOPIC_CONFIG", "T1")
    assert await nsc.get_kv_config(client, addr, "ORDER_TOPIC_CONFIG", "T1") is None
    resp = await client.invoke(addr, request(RequestCode.PULL_MESSAGE))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_topic_list_can_be_disabled() -> None:
    svc, server = await start_server(NamesrvConfig(bind_address="127.0.0.1", enable_all_topic_list=False), port=0)
    c = RemotingClient()
    try:
        resp = await c.invoke(f"127.0.0.1:{server.port}", request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "disable")
    finally:
        await c.close()
        await svc.stop()
        await server.stop(grace=1)


def _free_port() -> int:
    return free_port()  # outside the kernel's ephemeral range (tests/support.py)


def _mqnamesrv() -> list[str]:
    script = Path(sys.executable).parent / "mqnamesrv"
    return [str(script)] if script.exists() else [sys.executable, "-m", "brokerd.namesrv.main"]


async def test_mqnamesrv_process_serves_routes_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\n")
    proc = await asyncio.create_subprocess_exec(
        *_mqnamesrv(), "-c", str(conf), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    c = RemotingClient()
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 15)
        assert b"boot success" in line and str(port).encode() in line
        addr = f"127.0.0.1:{port}"
        await register(c, addr)
        header, body = await raw_call(port, cpp_route_frame("T1"))
        assert header["code"] == 0 and body == EXPECTED_ROUTE
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert b"shutdown" in await proc.stdout.read()
    finally:
        await c.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_route_body_is_standard_json_even_for_old_clients(namesrv: Namesrv, client: RemotingClient) -> None:
    _, server, addr = namesrv
    await register(client, addr)
    _, body = await raw_call(server.port, alions_route_frame("T1"))
    assert orjson.loads(body) == orjson.loads(EXPECTED_ROUTE)
    assert dumps(orjson.loads(body)) == EXPECTED_ROUTE
