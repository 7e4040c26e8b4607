"""Proto messages to stored messages and back (SendMessageActivity / GrpcConverter), with RocketMQ's checks, and
the settings the endpoint answers a client."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from brokerd import message as m
from brokerd.proxy import pb
from brokerd.proxy.codes import Code, ProxyError
from brokerd.proxy.config import GrpcProxyConfig
from brokerd.proxy.convert import (
    BATCH_PROPERTY,
    SYSTEM_KEYS,
    Limits,
    to_outgoing,
    to_proto,
    validate_group,
    validate_topic,
)
from brokerd.proxy.settings import GroupConfig, merged, parse_group_config

NOW = 1_700_000_000_000


def proto(**sp: Any) -> Any:
    body = sp.pop("body", b"hello")
    user = sp.pop("user", {})
    sp.setdefault("message_id", "01ABCDEF")
    return pb.Message(topic=pb.Resource(name="T"), body=body, user_properties=user,
                      system_properties=pb.SystemProperties(**sp))


def test_a_normal_message_carries_rocketmqs_properties() -> None:
    out = to_outgoing(proto(tag="TagA", keys=["k1", "k2"], born_timestamp=pb.timestamp(NOW), user={"a": "1"}),
                      "T", "10.0.0.9:5000", Limits(), NOW)
    assert out.properties == {"a": "1", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABCDEF", "RECONSUME_TIME": "0",
                              "PGROUP": "T", "__BORNHOST": "10.0.0.9:5000", "BORN_TIMESTAMP": str(NOW)}
    assert out.sys_flag == 0 and out.body == b"hello" and out.deliver_ms is None


def test_fifo_delay_and_transactional_messages() -> None:
    fifo = to_outgoing(proto(message_group="order-1"), "T", "h:1", Limits(), NOW)
    assert fifo.properties["__SHARDINGKEY"] == "order-1"
    delay = to_outgoing(proto(delivery_timestamp=pb.timestamp(NOW + 5000)), "T", "h:1", Limits(), NOW)
    assert delay.properties["TIMER_DELIVER_MS"] == str(NOW + 5000) and delay.deliver_ms == NOW + 5000
    txn = to_outgoing(proto(message_type=4, orphaned_transaction_recovery_duration=pb.duration(30_000)), "T", "h:1",
                      Limits(), NOW)
    assert txn.sys_flag & m.TRANSACTION_PREPARED_TYPE and txn.properties["TRAN_MSG"] == "true"
    assert txn.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "30"


@pytest.mark.parametrize("kwargs,code", [
    ({"body": b""}, Code.MESSAGE_BODY_EMPTY),
    ({"body": b"x" * 101}, Code.MESSAGE_BODY_TOO_LARGE),
    ({"user": {"KEYS": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"user": {"a\x01": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"tag": "a|b"}, Code.ILLEGAL_MESSAGE_TAG),
    ({"tag": "  "}, Code.ILLEGAL_MESSAGE_TAG),
    ({"keys": [" "]}, Code.ILLEGAL_MESSAGE_KEY),
    ({"message_group": "g" * 64}, Code.ILLEGAL_MESSAGE_GROUP),
    ({"message_id": ""}, Code.ILLEGAL_MESSAGE_ID),
    ({"delivery_timestamp": pb.timestamp(NOW + 25 * 3600 * 1000)}, Code.ILLEGAL_DELIVERY_TIME),
    ({"message_type": 4, "orphaned_transaction_recovery_duration": pb.duration(7200_000)}, Code.BAD_REQUEST),
    ({"user": {f"k{i}": "v" for i in range(129)}}, Code.MESSAGE_PROPERTIES_TOO_LARGE),
])
def test_bad_messages_are_refused_with_the_protos_code(kwargs: dict[str, Any], code: Code) -> None:
    with pytest.raises(ProxyError) as e:
        to_outgoing(proto(**kwargs), "T", "h:1", Limits(max_message_size=100), NOW)
    assert e.value.code == code and e.value.message


@pytest.mark.parametrize("name,ok", [("Topic_A-1", True), ("", False), ("a b", False), ("x" * 128, False),
                                     ("TBW102", False), ("rmq_sys_X", False)])
def test_topic_names_are_checked_as_rocketmq_does(name: str, ok: bool) -> None:
    if ok:
        validate_topic(name)
    else:
        with pytest.raises(ProxyError) as e:
            validate_topic(name)
        assert e.value.code == Code.ILLEGAL_TOPIC
    with pytest.raises(ProxyError):
        validate_group("CID_RMQ_SYS_x")


def stored(**props: str) -> m.MessageExt:
    return m.MessageExt(store_size=0, magic=m.MAGIC_V1, body_crc=0, queue_id=3, flag=0, queue_offset=41,
                        commit_log_offset=9000, sys_flag=0, born_timestamp=NOW - 10, born_host=("10.0.0.9", 5000),
                        store_timestamp=NOW, store_host=("10.0.0.1", 10911), reconsume_times=2,
                        prepared_transaction_offset=0, body=b"payload", topic="%RETRY%G+T", properties=dict(props))


def test_a_stored_message_becomes_the_protos_message() -> None:
    msg = to_proto(stored(UNIQ_KEY="U1", TAGS="t", KEYS="a b", __SHARDINGKEY="g1", POP_CK="1 2 3 4 0 b 3 41 9000",
                          user="v", PGROUP="T", CLUSTER="C"), "T", NOW)
    sp = msg.system_properties
    assert msg.topic.name == "T" and msg.body == b"payload" and dict(msg.user_properties) == {"user": "v"}
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == ("U1", "t", ["a", "b"], "g1")
    assert sp.message_type == 2 and sp.delivery_attempt == 3 and (sp.queue_id, sp.queue_offset) == (3, 41)
    assert sp.receipt_handle == "1 2 3 4 0 b 3 41 9000" and sp.store_host == "10.0.0.1:10911"
    assert sp.body_digest.type == 2 and sp.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert pb.timestamp_ms(sp.born_timestamp) == NOW - 10 and pb.timestamp_ms(sp.store_timestamp) == NOW
    assert to_proto(stored(TIMER_DELIVER_MS=str(NOW + 1)), "T", NOW).system_properties.message_type == 3


def test_settings_answered_to_producers_and_consumers() -> None:
    cfg = GrpcProxyConfig()
    prod = merged(pb.Settings(client_type=1, publishing={"topics": [pb.Resource(name="T")]}), None, cfg)
    assert prod.backoff_policy.max_attempts == 3 and prod.publishing.max_body_size == 4 * 1024 * 1024
    assert prod.publishing.validate_message_type
    sub = pb.Settings(client_type=3, subscription={"group": pb.Resource(name="G")})
    group = parse_group_config({"consumeMessageOrderly": True, "retryMaxTimes": 3})
    cons = merged(sub, group, cfg)
    assert cons.subscription.fifo and cons.backoff_policy.max_attempts == 4
    assert cons.subscription.receive_batch_size == 32 and pb.duration_ms(cons.subscription.long_polling_timeout) == 20000
    assert len(cons.backoff_policy.customized_backoff.next) == 18
    exp = merged(sub, GroupConfig(exponential=(1000, 60000, 2.0)), cfg)
    assert pb.duration_ms(exp.backoff_policy.exponential_backoff.initial) == 1000 and not exp.subscription.fifo


# RocketMQ's MessageConst.STRING_HASH_SET, as in common/src/main/java/org/apache/rocketmq/common/message
ROCKETMQ_STRING_HASH_SET = {
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#"}


def test_internal_properties_are_never_user_properties() -> None:
    """GrpcConverter.buildUserAttributes drops STRING_HASH_SET; the endpoint also drops what the proto carries as
    system properties and the brokers' own bookkeeping (a timer / POP delivery's bracket id, transient keys)."""
    assert SYSTEM_KEYS == ROCKETMQ_STRING_HASH_SET
    assert BATCH_PROPERTY == "__BATCH"
    internal = {k: "x" for k in ROCKETMQ_STRING_HASH_SET - {"TIMER_DELAY_SEC"}}
    internal.update({"__BATCH": "7", "__SHARDINGKEY": "g", "__transactionId__": "t", "TRACE_CONTEXT": "tc",
                     "INNER_NUM": "2", "__RMQ.TRANSIENT.TOPIC_SYS_FLAG": "1", "UNIQ_KEY": "U1",
                     "TIMER_DELIVER_MS": str(NOW + 5), "POP_CK": "1 2 3 4 0 b 3 41 9000"})
    msg = to_proto(stored(**internal, order="42", __STARTDELIVERTIME=str(NOW)), "T", NOW)
    # a user's own keys stay, including one RocketMQ does not reserve even though it starts with "__"
    assert dict(msg.user_properties) == {"order": "42", "__STARTDELIVERTIME": str(NOW)}
    assert msg.system_properties.message_id == "U1" and msg.system_properties.message_group == "g"
    assert pb.timestamp_ms(msg.system_properties.delivery_timestamp) == NOW + 5
    with pytest.raises(ProxyError) as e:  # and a sender may not set the reserved ones
        to_outgoing(proto(user={"MQ2_FLAG": "1"}), "T", "h:1", Limits(), NOW)
    assert e.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
