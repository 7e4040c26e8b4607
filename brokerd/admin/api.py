"""The requests mqadmin sends, one function per MQClientAPIImpl call: RocketMQ's request codes, header fields and
bodies (the contract with the broker and the name server). Each raises AdminError/ServerError on failure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from brokerd.admin.client import AdminClient
from brokerd.admin.javafmt import java_set_order
from brokerd.admin.model import (
    Connection,
    ConsumerConnection,
    ConsumeStats,
    MessageQueue,
    TopicOffset,
    body_json,
    connections,
    kv_table,
    offset_table,
    string_list,
    topic_stats,
)
from brokerd.config_file import parse_properties, to_properties


class Code:
    """RocketMQ's RequestCode values mqadmin sends."""

    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_CONSUME_QUEUE = 321
    ADD_WRITE_PERM_OF_BROKER = 327
    DELETE_EXPIRED_COMMITLOG = 329
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    GET_BROKER_HA_STATUS = 907


NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
CONSUMER_NOT_ONLINE = 206
BROADCAST_CONSUMPTION = 213


def _b(v: bool) -> str:
    return "true" if v else "false"


# -- name server ---------------------------------------------------------------------------------------------------

async def all_topics(c: AdminClient) -> list[str]:
    """TopicList.topicList: a Set<String> in Java, listed in its HashSet iteration order."""
    names = string_list(body_json((await c.namesrv_call(Code.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body), "topicList")
    return java_set_order(names)


async def kv_get(c: AdminClient, namespace: str, key: str) -> str | None:
    _, resp = await c.namesrv_invoke(Code.GET_KV_CONFIG, {"namespace": namespace, "key": key})
    return resp.ext.get("value") if resp.code == 0 else None


async def kv_put(c: AdminClient, namespace: str, key: str, value: str) -> None:
    """PUT_KV_CONFIG goes to every name server (MQClientAPIImpl.putKVConfigValue)."""
    for addr in c.require_namesrv():
        await c.call(addr, Code.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})


async def kv_delete(c: AdminClient, namespace: str, key: str) -> None:
    for addr in c.require_namesrv():
        await c.call(addr, Code.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})


async def wipe_write_perm(c: AdminClient, namesrv: str, broker_name: str) -> int:
    resp = await c.call(namesrv, Code.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
    return int(resp.ext.get("wipeTopicCount") or 0)


async def add_write_perm(c: AdminClient, namesrv: str, broker_name: str) -> int:
    resp = await c.call(namesrv, Code.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
    return int(resp.ext.get("addTopicCount") or 0)


async def delete_topic_in_namesrv(c: AdminClient, namesrv: str, topic: str, cluster: str | None) -> None:
    ext = {"topic": topic} | ({"clusterName": cluster} if cluster else {})
    await c.call(namesrv, Code.DELETE_TOPIC_IN_NAMESRV, ext)


async def namesrv_config(c: AdminClient, addr: str) -> dict[str, str]:
    resp = await c.call(addr, Code.GET_NAMESRV_CONFIG)
    return parse_properties((resp.body or b"").decode("utf-8", "replace"))


async def update_namesrv_config(c: AdminClient, addr: str, props: Mapping[str, str]) -> None:
    await c.call(addr, Code.UPDATE_NAMESRV_CONFIG, body=to_properties(dict(props)).encode())


# -- topics --------------------------------------------------------------------------------------------------------

async def create_topic(c: AdminClient, addr: str, tc: Mapping[str, Any]) -> None:
    ext = {"topic": tc["topicName"], "defaultTopic": "TBW102", "readQueueNums": str(tc["readQueueNums"]),
           "writeQueueNums": str(tc["writeQueueNums"]), "perm": str(tc["perm"]),
           "topicFilterType": tc.get("topicFilterType", "SINGLE_TAG"), "topicSysFlag": str(tc.get("topicSysFlag", 0)),
           "order": _b(bool(tc.get("order"))), "attributes": attributes_string(tc.get("attributes") or {})}
    await c.call(addr, Code.UPDATE_AND_CREATE_TOPIC, ext, what=f"create topic {tc['topicName']} on {addr}")


def attributes_string(attrs: Mapping[str, str]) -> str:
    """AttributeParser.parseToString: `+a=b,+c=d,-e` (the keys carry their sign)."""
    return ",".join(f"{k}={v}" if v else k for k, v in attrs.items())


async def delete_topic_in_broker(c: AdminClient, addr: str, topic: str) -> None:
    await c.call(addr, Code.DELETE_TOPIC_IN_BROKER, {"topic": topic}, what=f"delete topic {topic} on {addr}")


async def topic_stats_of(c: AdminClient, addr: str, topic: str) -> dict[MessageQueue, TopicOffset]:
    return topic_stats(await c.call_json(addr, Code.GET_TOPIC_STATS_INFO, {"topic": topic}))


async def topic_stats_tps(c: AdminClient, addr: str, topic: str) -> tuple[dict[MessageQueue, TopicOffset], float]:
    """TopicStatsTable: the per-queue offsets and the broker's topicPutTps."""
    d = await c.call_json(addr, Code.GET_TOPIC_STATS_INFO, {"topic": topic})
    return topic_stats(d), float(d.get("topicPutTps") or 0.0)


async def topic_config(c: AdminClient, addr: str, topic: str) -> dict[str, Any] | None:
    resp = await c.invoke(addr, Code.GET_TOPIC_CONFIG, {"topic": topic})
    if resp.code != 0:
        return None
    d = body_json(resp.body)
    tc = d.get("topicConfig", d)
    return dict(tc) if isinstance(tc, Mapping) else None


async def all_topic_config(c: AdminClient, addr: str) -> dict[str, dict[str, Any]]:
    d = await c.call_json(addr, Code.GET_ALL_TOPIC_CONFIG, timeout=10.0)
    return {str(k): dict(v) for k, v in (d.get("topicConfigTable") or {}).items()}


async def system_topics(c: AdminClient, addr: str) -> set[str]:
    return set(string_list(await c.call_json(addr, Code.GET_SYSTEM_TOPIC_LIST_FROM_BROKER), "topicList"))


async def topics_by_cluster(c: AdminClient, cluster: str) -> list[str]:
    return string_list(body_json((await c.namesrv_call(Code.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})).body),
                       "topicList")


async def consumed_by(c: AdminClient, addr: str, topic: str) -> list[str]:
    return string_list(await c.call_json(addr, Code.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}), "groupList")


# -- groups and offsets --------------------------------------------------------------------------------------------

async def consume_stats(c: AdminClient, addr: str, group: str, topic: str | None) -> ConsumeStats:
    ext = {"consumerGroup": group} | ({"topic": topic} if topic else {})
    return ConsumeStats.from_json(await c.call_json(addr, Code.GET_CONSUME_STATS, ext, timeout=c.timeout * 3))


async def consumer_connection(c: AdminClient, addr: str, group: str) -> ConsumerConnection:
    return ConsumerConnection.from_json(await c.call_json(addr, Code.GET_CONSUMER_CONNECTION_LIST,
                                                          {"consumerGroup": group}))


async def producer_connection(c: AdminClient, addr: str, group: str) -> list[Connection]:
    return connections(await c.call_json(addr, Code.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}))


async def consumer_running_info(c: AdminClient, addr: str, group: str, client_id: str,
                                jstack: bool = False) -> dict[Any, Any]:
    ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": _b(jstack)}
    return await c.call_json(addr, Code.GET_CONSUMER_RUNNING_INFO, ext, timeout=c.timeout * 2)


async def consume_message_directly(c: AdminClient, addr: str, group: str, client_id: str, topic: str,
                                   msg_id: str) -> dict[Any, Any]:
    ext = {"consumerGroup": group, "clientId": client_id, "topic": topic, "msgId": msg_id}
    return await c.call_json(addr, Code.CONSUME_MESSAGE_DIRECTLY, ext, timeout=c.timeout * 2)


async def create_group(c: AdminClient, addr: str, config: Mapping[str, Any]) -> None:
    await c.call(addr, Code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(config),
                 what=f"create subscription group {config['groupName']} on {addr}")


async def delete_group(c: AdminClient, addr: str, group: str, clean_offset: bool) -> None:
    await c.call(addr, Code.DELETE_SUBSCRIPTIONGROUP, {"groupName": group, "cleanOffset": _b(clean_offset)},
                 what=f"delete subscription group {group} on {addr}")


async def group_config(c: AdminClient, addr: str, group: str) -> dict[str, Any] | None:
    resp = await c.invoke(addr, Code.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
    if resp.code == 3:  # not answered by this broker: the full table has it too
        table = await all_groups(c, addr)
        return table.get(group)
    return body_json(resp.body) or None if resp.code == 0 else None


async def all_groups(c: AdminClient, addr: str) -> dict[str, dict[str, Any]]:
    d = await c.call_json(addr, Code.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, timeout=10.0)
    return {str(k): dict(v) for k, v in (d.get("subscriptionGroupTable") or {}).items()}


async def update_consumer_offset(c: AdminClient, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "commitOffset": str(offset)}
    await c.call(addr, Code.UPDATE_CONSUMER_OFFSET, ext, what=f"update offset of {group} on {mq}")


async def reset_offset(c: AdminClient, addr: str, topic: str, group: str, timestamp: int, force: bool,
                       cpp: bool = False) -> tuple[int, str | None, dict[MessageQueue, int]]:
    """INVOKE_BROKER_TO_RESET_OFFSET: (answer code, remark, the offsets set)."""
    ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": _b(force), "offset": "-1"}
    resp = await c.invoke(addr, Code.INVOKE_BROKER_TO_RESET_OFFSET, ext, language="CPP" if cpp else None)
    return resp.code, resp.remark, offset_table(body_json(resp.body)) if resp.code == 0 else {}


async def reset_queue_offset(c: AdminClient, addr: str, topic: str, group: str, queue_id: int, offset: int) -> None:
    ext = {"topic": topic, "group": group, "timestamp": "0", "queueId": str(queue_id), "offset": str(offset),
           "isForce": "true"}
    await c.call(addr, Code.INVOKE_BROKER_TO_RESET_OFFSET, ext, what=f"reset offset of {group}")


async def search_offset(c: AdminClient, addr: str, mq: MessageQueue, timestamp: int) -> int:
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id), "timestamp": str(timestamp), "boundaryType": "LOWER"}
    return int((await c.call(addr, Code.SEARCH_OFFSET_BY_TIMESTAMP, ext)).ext.get("offset") or 0)


async def max_offset(c: AdminClient, addr: str, mq: MessageQueue) -> int:
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id), "committed": "true"}
    return int((await c.call(addr, Code.GET_MAX_OFFSET, ext)).ext.get("offset") or 0)


async def min_offset(c: AdminClient, addr: str, mq: MessageQueue) -> int:
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
    return int((await c.call(addr, Code.GET_MIN_OFFSET, ext)).ext.get("offset") or 0)


async def broker_consume_stats(c: AdminClient, addr: str, is_order: bool, timeout: float) -> dict[Any, Any]:
    return await c.call_json(addr, Code.GET_BROKER_CONSUME_STATS, {"isOrder": _b(is_order)}, timeout=timeout)


async def query_consume_queue(c: AdminClient, addr: str, topic: str, queue_id: int, index: int, count: int,
                              group: str | None) -> dict[Any, Any]:
    ext = {"topic": topic, "queueId": str(queue_id), "index": str(index), "count": str(count)}
    if group:
        ext["consumerGroup"] = group
    return await c.call_json(addr, Code.QUERY_CONSUME_QUEUE, ext)


# -- brokers -------------------------------------------------------------------------------------------------------

async def runtime_info(c: AdminClient, addr: str) -> dict[str, str]:
    return kv_table(await c.call_json(addr, Code.GET_BROKER_RUNTIME_INFO))


async def broker_config(c: AdminClient, addr: str, ext: dict[str, str] | None = None) -> str:
    return ((await c.call(addr, Code.GET_BROKER_CONFIG, ext)).body or b"").decode("utf-8", "replace")


async def update_broker_config(c: AdminClient, addr: str, props: Mapping[str, str],
                               ext: dict[str, str] | None = None) -> None:
    await c.call(addr, Code.UPDATE_BROKER_CONFIG, ext, to_properties(dict(props)).encode(),
                 what=f"update config of {addr}")


async def broker_action(c: AdminClient, addr: str, code: int) -> bool:
    """CLEAN_EXPIRED_CONSUMEQUEUE / DELETE_EXPIRED_COMMITLOG / CLEAN_UNUSED_TOPIC: true when the broker did it."""
    await c.call(addr, code)
    return True


async def stats_data(c: AdminClient, addr: str, name: str, key: str) -> dict[Any, Any]:
    return await c.call_json(addr, Code.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})


async def ha_status(c: AdminClient, addr: str) -> dict[Any, Any]:
    return await c.call_json(addr, Code.GET_BROKER_HA_STATUS)


# -- ACL 1.0 -------------------------------------------------------------------------------------------------------

async def update_acl(c: AdminClient, addr: str, account: Mapping[str, Any]) -> None:
    ext = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in account.items() if v is not None}
    await c.call(addr, Code.UPDATE_AND_CREATE_ACL_CONFIG, ext, what=f"update acl config on {addr}")


async def delete_acl(c: AdminClient, addr: str, access_key: str) -> None:
    await c.call(addr, Code.DELETE_ACL_CONFIG, {"accessKey": access_key}, what=f"delete acl config on {addr}")


async def update_global_white_addrs(c: AdminClient, addr: str, addrs: str, path: str | None) -> None:
    ext = {"globalWhiteAddrs": addrs} | ({"aclFileFullPath": path} if path else {})
    await c.call(addr, Code.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, ext, what=f"update global white addrs on {addr}")


async def acl_version_info(c: AdminClient, addr: str) -> dict[str, str]:
    return dict((await c.call(addr, Code.GET_BROKER_CLUSTER_ACL_INFO)).ext)


async def acl_config(c: AdminClient, addr: str) -> dict[Any, Any]:
    return await c.call_json(addr, Code.GET_BROKER_CLUSTER_ACL_CONFIG)
