"""What a request touches: {resource: needed perm}, as RocketMQ's PlainAccessValidator.parse reads it, plus the
offset and lock requests it leaves unchecked. A group is the resource ``%RETRY%<group>`` (so a retry topic is
its group); send to a retry topic needs the group's SUB. Pure."""

from __future__ import annotations

from typing import Final

from brokerd.acl.perm import ANY, PUB, SUB
from brokerd.remoting.codes import RequestCode as C
from brokerd.remoting.command import HeaderError, RemotingCommand

RETRY_PREFIX: Final = "%RETRY%"

# RocketMQ's Permission.ADMIN_CODE (17, 25, 215, 200, 207, 50, 51, 52) plus the broker requests that change what
# only an operator should (topics, groups, offsets, files, the ACL itself), make a consumer act, or expose the whole
# broker's secrets or clients
BROKER_ADMIN_CODES: Final = frozenset({
    C.UPDATE_AND_CREATE_TOPIC, C.UPDATE_AND_CREATE_TOPIC_LIST, C.UPDATE_BROKER_CONFIG, C.DELETE_TOPIC_IN_BROKER,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, C.DELETE_SUBSCRIPTIONGROUP,
    C.GET_BROKER_CONFIG, C.TRIGGER_DELETE_FILES, C.ADD_BROKER, C.REMOVE_BROKER,
    C.UPDATE_AND_CREATE_ACL_CONFIG, C.DELETE_ACL_CONFIG, C.GET_BROKER_CLUSTER_ACL_INFO,
    C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, C.GET_BROKER_CLUSTER_ACL_CONFIG,
    C.INVOKE_BROKER_TO_RESET_OFFSET, C.CLONE_GROUP_OFFSET, C.CONSUME_MESSAGE_DIRECTLY, C.CLEAN_UNUSED_TOPIC,
    C.CLEAN_EXPIRED_CONSUMEQUEUE, C.DELETE_EXPIRED_COMMITLOG, C.GET_ALL_PRODUCER_INFO, C.GET_BROKER_CONSUME_STATS,
    C.SET_MESSAGE_REQUEST_MODE,
})
# the name server's write requests (a broker registering signs with an admin account)
NAMESRV_ADMIN_CODES: Final = frozenset({
    C.PUT_KV_CONFIG, C.DELETE_KV_CONFIG, C.REGISTER_BROKER, C.UNREGISTER_BROKER, C.WIPE_WRITE_PERM_OF_BROKER,
    C.ADD_WRITE_PERM_OF_BROKER, C.DELETE_TOPIC_IN_NAMESRV, C.REGISTER_TOPIC_IN_NAMESRV, C.UPDATE_NAMESRV_CONFIG,
})

# the controller's admin requests: electMaster (brokers in controller mode sign it with aclAccessKey), the
# controller config, cleanBrokerMetadata
CONTROLLER_ADMIN_CODES: Final = frozenset({
    C.CONTROLLER_ELECT_MASTER, C.UPDATE_CONTROLLER_CONFIG, C.GET_CONTROLLER_CONFIG, C.CLEAN_BROKER_DATA,
})


def group_resource(group: str) -> str:
    return RETRY_PREFIX + group


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_PREFIX)


def _send(out: dict[str, int], topic: str | None, group: str | None) -> None:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        if group:
            out[group_resource(group)] = SUB
        else:
            out[topic] = SUB
    elif topic is not None:
        out[topic] = PUB


def _add(out: dict[str, int], resource: str | None, perm: int) -> None:
    if resource:
        out[resource] = perm


def _heartbeat(cmd: RemotingCommand, out: dict[str, int]) -> None:
    if not cmd.body:
        return
    data = cmd.json_body()
    for cd in data.get("consumerDataSet") or []:
        if not isinstance(cd, dict):
            raise HeaderError("heartbeat consumerDataSet entries must be objects")
        if cd.get("groupName"):
            out[group_resource(str(cd["groupName"]))] = SUB
        for sd in cd.get("subscriptionDataSet") or []:
            if not isinstance(sd, dict):
                raise HeaderError("heartbeat subscriptionDataSet entries must be objects")
            if sd.get("topic"):
                out[str(sd["topic"])] = SUB


def _locks(cmd: RemotingCommand, out: dict[str, int]) -> None:
    data = cmd.json_body() if cmd.body else {}
    if data.get("consumerGroup"):
        out[group_resource(str(data["consumerGroup"]))] = SUB
    for mq in data.get("mqSet") or []:
        if isinstance(mq, dict) and mq.get("topic"):
            out[str(mq["topic"])] = SUB


_POP_CODES: Final = frozenset({C.POP_MESSAGE, C.ACK_MESSAGE, C.CHANGE_MESSAGE_INVISIBLETIME, C.NOTIFICATION,
                                C.POLLING_INFO})


def _batch_ack(cmd: RemotingCommand, out: dict[str, int]) -> None:
    """BatchAck entries as fastjson writes them (``c`` group, ``t`` topic) or by their long names."""
    for ack in cmd.json_body().get("acks") or []:
        if not isinstance(ack, dict):
            raise HeaderError("batch ack entries must be objects")
        topic, group = ack.get("t") or ack.get("topic"), ack.get("c") or ack.get("consumerGroup")
        _add(out, str(topic) if topic else None, SUB)
        _add(out, group_resource(str(group)) if group else None, SUB)


def needed_perms(cmd: RemotingCommand) -> dict[str, int]:
    """{topic or %RETRY%group: PUB/SUB/ANY} this request needs; HeaderError for a body that cannot be read."""
    e = cmd.ext
    out: dict[str, int] = {}
    code = cmd.code
    if code == C.SEND_MESSAGE:
        _send(out, e.get("topic"), e.get("producerGroup"))
    elif code in (C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE):
        _send(out, e.get("b"), e.get("a"))
    elif code == C.CONSUMER_SEND_MSG_BACK:
        _add(out, group_resource(e["group"]) if e.get("group") else None, SUB)
    elif code in (C.PULL_MESSAGE, C.LITE_PULL_MESSAGE):
        _add(out, e.get("topic"), SUB)
        _add(out, group_resource(e["consumerGroup"]) if e.get("consumerGroup") else None, SUB)
    elif code == C.QUERY_MESSAGE:
        _add(out, e.get("topic"), SUB)
    elif code == C.HEART_BEAT:
        _heartbeat(cmd, out)
    elif code in (C.UNREGISTER_CLIENT, C.GET_CONSUMER_LIST_BY_GROUP, C.UPDATE_CONSUMER_OFFSET,
                  C.QUERY_CONSUMER_OFFSET):
        _add(out, group_resource(e["consumerGroup"]) if e.get("consumerGroup") else None, SUB)
        if code in (C.UPDATE_CONSUMER_OFFSET, C.QUERY_CONSUMER_OFFSET):
            _add(out, e.get("topic"), SUB)
    elif code in (C.SEARCH_OFFSET_BY_TIMESTAMP, C.GET_MAX_OFFSET, C.GET_MIN_OFFSET, C.GET_EARLIEST_MSG_STORETIME):
        _add(out, e.get("topic"), ANY)
    elif code in (C.LOCK_BATCH_MQ, C.UNLOCK_BATCH_MQ):
        _locks(cmd, out)
    elif code in _POP_CODES:  # RocketMQ's @RocketMQResource topic + group of these headers, action SUB
        _add(out, e.get("topic"), SUB)
        _add(out, group_resource(e["consumerGroup"]) if e.get("consumerGroup") else None, SUB)
    elif code == C.BATCH_ACK_MESSAGE and cmd.body:
        _batch_ack(cmd, out)
    elif code == C.QUERY_ASSIGNMENT and cmd.body:
        data = cmd.json_body()
        _add(out, str(data["topic"]) if data.get("topic") else None, SUB)
        _add(out, group_resource(str(data["consumerGroup"])) if data.get("consumerGroup") else None, SUB)
    elif code == C.RECALL_MESSAGE:
        _add(out, e.get("topic"), PUB)
    elif code == C.CHECK_CLIENT_CONFIG and cmd.body:
        data = cmd.json_body()
        _add(out, group_resource(str(data["group"])) if data.get("group") else None, SUB)
    elif code in _ADMIN_READS:
        _admin_read(cmd, out)
    return out


# the read-only admin requests a non-admin account may make on the topics and groups it holds a perm of (ours:
# RocketMQ's ACL 1.0 checks none of them): {code: (topic header, group header)}
_ADMIN_READS: Final = {
    C.GET_TOPIC_STATS_INFO: ("topic", None), C.GET_TOPIC_CONFIG: ("topic", None),
    C.QUERY_TOPIC_CONSUME_BY_WHO: ("topic", None), C.GET_CONSUMER_CONNECTION_LIST: (None, "consumerGroup"),
    C.GET_CONSUME_STATS: ("topic", "consumerGroup"), C.QUERY_CONSUME_TIME_SPAN: ("topic", "group"),
    C.GET_CONSUMER_RUNNING_INFO: (None, "consumerGroup"), C.QUERY_CONSUME_QUEUE: ("topic", "consumerGroup"),
    C.QUERY_TOPICS_BY_CONSUMER: (None, "group"), C.QUERY_SUBSCRIPTION_BY_CONSUMER: ("topic", "group"),
    C.GET_SUBSCRIPTIONGROUP_CONFIG: (None, "group"), C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: ("topic", "group"),
    C.VIEW_BROKER_STATS_DATA: (None, None),
}


def _admin_read(cmd: RemotingCommand, out: dict[str, int]) -> None:
    """Reading a topic's or group's figures needs a perm (PUB or SUB) on it. VIEW_BROKER_STATS_DATA: its
    ``statsKey`` is a topic (TOPIC_*) or ``topic@group`` (GROUP_*, SNDBCK_*); broker-wide keys need none."""
    e = cmd.ext
    if cmd.code == C.VIEW_BROKER_STATS_DATA:
        name, key = e.get("statsName") or "", e.get("statsKey") or ""
        if name.startswith("TOPIC_"):
            _add(out, key, ANY)
        elif name.startswith(("GROUP_", "SNDBCK_")):
            topic, _, group = key.partition("@")
            _add(out, topic, ANY)
            _add(out, group_resource(group) if group else None, ANY)
        return
    topic_key, group_key = _ADMIN_READS[cmd.code]
    if topic_key:
        _add(out, e.get(topic_key), ANY)
    if group_key and e.get(group_key):
        _add(out, group_resource(e[group_key]), ANY)
