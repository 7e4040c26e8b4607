"""The broker side of the name-server protocol (used by the broker, the container, the controller and tools).

Every call raises `NamesrvError` for a non-success answer (and the remoting layer's `ConnectionClosed` /
`RemotingTimeout` for transport failures), except `get_route`, which returns None for TOPIC_NOT_EXIST.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brokerd.namesrv.body import DataVersion, crc32, dumps, encode_register_body
from brokerd.namesrv.lenient_json import loads
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request


class NamesrvError(Exception):
    def __init__(self, code: int, remark: str | None, what: str) -> None:
        super().__init__(f"{what} failed: code {code}: {remark or ''}")
        self.code = code
        self.remark = remark


@dataclass(frozen=True)
class RegisterBrokerResult:
    master_addr: str | None
    ha_server_addr: str | None
    kv_table: dict[str, str] | None = None  # the name server's ORDER_TOPIC_CONFIG namespace, when it sent one


def _check(resp: RemotingCommand, what: str) -> RemotingCommand:
    if resp.code != ResponseCode.SUCCESS:
        raise NamesrvError(resp.code, resp.remark, what)
    return resp


def _json_body(resp: RemotingCommand, what: str) -> Any:
    if not resp.body:
        raise NamesrvError(resp.code, "empty body", what)
    return loads(resp.body)


def build_register_body(topic_config_table: dict[str, dict[str, Any]], data_version: dict[str, Any],
                        compressed: bool = False) -> bytes:
    """RegisterBrokerBody bytes: RocketMQ JSON, or the zlib binary form when `compressed`."""
    return encode_register_body(topic_config_table, DataVersion.from_json(data_version), compressed=compressed)


# a register body of more topics is encoded on a worker thread (the table is the caller's own copy); the loop gets
# the interpreter back every switch interval (5 ms) instead of waiting ~120 ms for 10,000 topics
ENCODE_OFF_LOOP = 256


def _broker_ext(cluster: str, broker_name: str, broker_addr: str, broker_id: int) -> dict[str, str]:
    return {"brokerAddr": broker_addr, "brokerId": str(broker_id), "brokerName": broker_name, "clusterName": cluster}


async def register_broker(
    client: RemotingClient,
    namesrv_addr: str,
    *,
    cluster: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    ha_server_addr: str,
    topic_config_table: dict[str, dict[str, Any]],
    data_version: dict[str, Any],
    timeout: float = 3.0,
    compressed: bool = False,
) -> RegisterBrokerResult:
    if len(topic_config_table) > ENCODE_OFF_LOOP:  # ~12 ms per 1,000 topics: not on the event loop
        body = await asyncio.to_thread(build_register_body, topic_config_table, data_version, compressed)
    else:
        body = build_register_body(topic_config_table, data_version, compressed)
    ext = _broker_ext(cluster, broker_name, broker_addr, broker_id)
    ext.update({
        "haServerAddr": ha_server_addr, "compressed": "true" if compressed else "false",
        "bodyCrc32": str(crc32(body)), "enableActingMaster": "false",
    })
    resp = _check(await client.invoke(namesrv_addr, request(RequestCode.REGISTER_BROKER, ext, body), timeout),
                  "REGISTER_BROKER")
    kv = None
    if resp.body:
        table = loads(resp.body).get("table")
        kv = {str(k): str(v) for k, v in table.items()} if isinstance(table, Mapping) else None
    return RegisterBrokerResult(resp.ext.get("masterAddr") or None, resp.ext.get("haServerAddr") or None, kv)


async def unregister_broker(client: RemotingClient, namesrv_addr: str, *, cluster: str, broker_name: str,
                            broker_addr: str, broker_id: int, timeout: float = 3.0) -> None:
    ext = _broker_ext(cluster, broker_name, broker_addr, broker_id)
    _check(await client.invoke(namesrv_addr, request(RequestCode.UNREGISTER_BROKER, ext), timeout),
           "UNREGISTER_BROKER")


async def broker_heartbeat(client: RemotingClient, namesrv_addr: str, *, cluster: str, broker_name: str,
                           broker_addr: str, broker_id: int, timeout: float = 3.0) -> None:
    ext = _broker_ext(cluster, broker_name, broker_addr, broker_id)
    _check(await client.invoke(namesrv_addr, request(RequestCode.BROKER_HEARTBEAT, ext), timeout), "BROKER_HEARTBEAT")


async def query_data_version(client: RemotingClient, namesrv_addr: str, *, cluster: str, broker_name: str,
                             broker_addr: str, broker_id: int, data_version: dict[str, Any],
                             timeout: float = 3.0) -> tuple[bool, dict[str, Any] | None]:
    """(changed, the name server's DataVersion for this broker or None)."""
    ext = _broker_ext(cluster, broker_name, broker_addr, broker_id)
    body = dumps(DataVersion.from_json(data_version).to_json())
    resp = _check(await client.invoke(namesrv_addr, request(RequestCode.QUERY_DATA_VERSION, ext, body), timeout),
                  "QUERY_DATA_VERSION")
    return resp.ext.get("changed") == "true", loads(resp.body) if resp.body else None


async def get_route(client: RemotingClient, namesrv_addr: str, topic: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """TopicRouteData as parsed JSON (brokerAddrs keys are strings), or None when the topic has no route."""
    resp = await client.invoke(namesrv_addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), timeout)
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    route: dict[str, Any] = _json_body(_check(resp, "GET_ROUTEINFO_BY_TOPIC"), "GET_ROUTEINFO_BY_TOPIC")
    return route


async def get_cluster_info(client: RemotingClient, namesrv_addr: str, timeout: float = 3.0) -> dict[str, Any]:
    """{"brokerAddrTable": {name: BrokerData}, "clusterAddrTable": {cluster: [names]}}."""
    resp = await client.invoke(namesrv_addr, request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout)
    info: dict[str, Any] = _json_body(_check(resp, "GET_BROKER_CLUSTER_INFO"), "GET_BROKER_CLUSTER_INFO")
    return info


async def get_all_topics(client: RemotingClient, namesrv_addr: str, timeout: float = 3.0) -> list[str]:
    resp = await client.invoke(namesrv_addr, request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), timeout)
    body = _json_body(_check(resp, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER"), "GET_ALL_TOPIC_LIST_FROM_NAMESERVER")
    return [str(t) for t in body.get("topicList", [])]


async def delete_topic(client: RemotingClient, namesrv_addr: str, topic: str, cluster: str | None = None,
                       timeout: float = 3.0) -> None:
    ext = {"topic": topic}
    if cluster:
        ext["clusterName"] = cluster
    _check(await client.invoke(namesrv_addr, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext), timeout),
           "DELETE_TOPIC_IN_NAMESRV")


async def set_write_perm(client: RemotingClient, namesrv_addr: str, broker_name: str, *, writable: bool,
                         timeout: float = 3.0) -> int:
    """ADD_WRITE_PERM_OF_BROKER (writable) / WIPE_WRITE_PERM_OF_BROKER; returns the number of topics changed."""
    code = RequestCode.ADD_WRITE_PERM_OF_BROKER if writable else RequestCode.WIPE_WRITE_PERM_OF_BROKER
    resp = _check(await client.invoke(namesrv_addr, request(code, {"brokerName": broker_name}), timeout),
                  "ADD_WRITE_PERM_OF_BROKER" if writable else "WIPE_WRITE_PERM_OF_BROKER")
    return int(resp.ext.get("addTopicCount" if writable else "wipeTopicCount", "0"))


async def put_kv_config(client: RemotingClient, namesrv_addr: str, namespace: str, key: str, value: str,
                        timeout: float = 3.0) -> None:
    ext = {"namespace": namespace, "key": key, "value": value}
    _check(await client.invoke(namesrv_addr, request(RequestCode.PUT_KV_CONFIG, ext), timeout), "PUT_KV_CONFIG")


async def get_kv_config(client: RemotingClient, namesrv_addr: str, namespace: str, key: str,
                        timeout: float = 3.0) -> str | None:
    ext = {"namespace": namespace, "key": key}
    resp = await client.invoke(namesrv_addr, request(RequestCode.GET_KV_CONFIG, ext), timeout)
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return _check(resp, "GET_KV_CONFIG").ext.get("value", "")


async def delete_kv_config(client: RemotingClient, namesrv_addr: str, namespace: str, key: str,
                           timeout: float = 3.0) -> None:
    ext = {"namespace": namespace, "key": key}
    _check(await client.invoke(namesrv_addr, request(RequestCode.DELETE_KV_CONFIG, ext), timeout), "DELETE_KV_CONFIG")


async def register_topic(client: RemotingClient, namesrv_addr: str, topic: str, queue_datas: list[dict[str, Any]],
                         timeout: float = 3.0) -> None:
    """REGISTER_TOPIC_IN_NAMESRV: add QueueData (`{"brokerName","readQueueNums","writeQueueNums","perm",
    "topicSysFlag"}`) of already registered brokers to `topic`."""
    body = dumps({"brokerDatas": [], "filterServerTable": {}, "queueDatas": queue_datas})
    _check(await client.invoke(namesrv_addr, request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body),
                               timeout), "REGISTER_TOPIC_IN_NAMESRV")
