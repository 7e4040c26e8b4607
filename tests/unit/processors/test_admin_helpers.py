"""The pure parts of the broker's admin families: RocketMQ's JSON shapes (maps keyed by MessageQueue objects as
fastjson writes and reads them), topic attribute changes, the reset-offset notice per client language, the
HARuntimeInfo of a master and of a slave, and the ACL resources of the read-only admin requests."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from brokerd.acl.perm import ANY
from brokerd.acl.resources import BROKER_ADMIN_CODES, needed_perms
from brokerd.clients import mq_map, reset_offset_notice
from brokerd.namesrv.lenient_json import loads, object_key
from brokerd.processors.admin_broker import ha_runtime_info
from brokerd.processors.admin_common import mq_json
from brokerd.processors.admin_consumer import java_time
from brokerd.processors.admin_topic import AttributeError_, alter_attributes
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import request


def test_message_queue_keyed_maps_are_written_and_read_as_fastjson_does() -> None:
    body = orjson.dumps({"offsetTable": mq_map([(mq_json("T", "broker-a", 0), {"maxOffset": 5}),
                                                (mq_json("T", "broker-a", 1), {"maxOffset": 7})])})
    # byte for byte what a RocketMQ 5.3.1 broker answers GET_TOPIC_STATS_INFO with
    assert body == (b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":5},'
                    b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"maxOffset":7}}}')
    table = loads(body)["offsetTable"]
    assert [(object_key(k)["queueId"], v["maxOffset"]) for k, v in table.items()] == [(0, 5), (1, 7)]


def test_topic_attributes_are_added_changed_and_removed_as_rocketmq_allows() -> None:
    assert alter_attributes({}, "+message.type=FIFO", create=True) == {"message.type": "FIFO"}
    assert alter_attributes({"message.type": "FIFO"}, "+message.type=NORMAL,+queue.type=BatchCQ",
                            create=False) == {"message.type": "NORMAL", "queue.type": "BatchCQ"}
    assert alter_attributes({"message.type": "FIFO"}, "-message.type", create=False) == {}
    for spec, create, word in (("+no.such=1", True, "unsupported key"), ("-message.type", True, "only add"),
                               ("+message.type=PERSISTENT", True, "value is not in set"),
                               ("-queue.type", False, "nonexistent"), ("message.type=FIFO", True, "format")):
        with pytest.raises(AttributeError_, match=word):
            alter_attributes({}, spec, create=create)


def test_reset_notice_body_follows_the_client_language() -> None:
    offsets = [(mq_json("T", "broker-a", 0), 3), (mq_json("T", "broker-a", 1), 0)]
    java = reset_offset_notice("T", "G", 0, offsets, "JAVA")
    assert java.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and java.is_oneway
    assert java.ext == {"topic": "T", "group": "G", "timestamp": "0", "isForce": "true"}
    table = loads(java.body or b"")["offsetTable"]
    assert {object_key(k)["queueId"]: v for k, v in table.items()} == {0: 3, 1: 0}
    cpp = orjson.loads(reset_offset_notice("T", "G", 0, offsets, "CPP").body or b"")
    assert cpp == {"offsetTable": [{"brokerName": "broker-a", "queueId": 0, "topic": "T", "offset": 3},
                                   {"brokerName": "broker-a", "queueId": 1, "topic": "T", "offset": 0}]}


def _slave_conn(ack: int, slave_id: int, start: int = 0) -> Any:
    return SimpleNamespace(ack=ack, slave_id=slave_id, start_offset=start)


def test_ha_runtime_info_of_a_master_and_of_a_slave() -> None:
    master = SimpleNamespace(conns={7: _slave_conn(900, 1), 8: _slave_conn(-1, 2)},
                             effective_set=lambda: frozenset({0, 1}))
    ha = SimpleNamespace(master=master, slave=None, conns={7: SimpleNamespace(peer="127.0.0.1:51000")},  # port-ok: data, nothing binds it
                         master_ha_addr=None, slave_conn=None)
    info = ha_runtime_info(ha, controller_mode=True, max_offset=1000, flushed=1000)  # type: ignore[arg-type]
    assert info["master"] is True and info["masterCommitLogMaxOffset"] == 1000 and info["inSyncSlaveNums"] == 1
    first, second = info["haConnectionInfo"]
    assert first == {"addr": "127.0.0.1:51000", "diff": 100, "inSync": True, "slaveAckOffset": 900,  # port-ok: data, nothing binds it
                     "transferFromWhere": 0, "transferredByteInSecond": 0}
    assert second["inSync"] is False and second["diff"] == 1000
    classic = ha_runtime_info(ha, controller_mode=False, max_offset=1000, flushed=0)  # type: ignore[arg-type]
    assert [c["inSync"] for c in classic["haConnectionInfo"]] == [True, False] and classic["inSyncSlaveNums"] == 1

    now = time.monotonic_ns() // 1_000_000
    slave = SimpleNamespace(last_read_ms=now - 2000, last_write_ms=now - 1000)
    ha = SimpleNamespace(master=None, slave=slave, conns={}, master_ha_addr="127.0.0.1:10912", slave_conn=object())  # port-ok: data, nothing binds it
    info = ha_runtime_info(ha, controller_mode=False, max_offset=500, flushed=400)  # type: ignore[arg-type]
    client = info["haClientRuntimeInfo"]
    assert info["master"] is False and client["masterAddr"] == "127.0.0.1:10912" and client["activated"] is True  # port-ok: data, nothing binds it
    assert client["maxOffset"] == 500 and client["masterFlushOffset"] == 400
    wall = time.time_ns() // 1_000_000
    assert abs(client["lastReadTimestamp"] - (wall - 2000)) < 1000
    assert abs(client["lastWriteTimestamp"] - (wall - 1000)) < 1000


def test_java_time_is_rocketmqs_timestamp_format() -> None:
    text = java_time(int(time.mktime((2024, 3, 5, 7, 8, 9, 0, 0, -1)) * 1000) + 12)
    assert text == "2024-03-05#07:08:09:012"


@pytest.mark.parametrize("code, ext, needed", [
    (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "T"}, {"T": ANY}),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "T"}, {"T": ANY, "%RETRY%G": ANY}),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"}, {"%RETRY%G": ANY}),
    (RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": "T@G"},
     {"T": ANY, "%RETRY%G": ANY}),
    (RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"}, {"T": ANY}),
    (RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "BROKER_PUT_NUMS", "statsKey": "DefaultCluster"}, {}),
    (RequestCode.QUERY_SUBSCRIPTION_BY_CONSUMER, {"group": "G", "topic": "T"}, {"T": ANY, "%RETRY%G": ANY}),
])
def test_read_only_admin_requests_need_a_perm_on_what_they_read(code: int, ext: dict[str, str],
                                                                needed: dict[str, int]) -> None:
    assert needed_perms(request(code, ext)) == needed


def test_changing_admin_requests_need_an_admin_account() -> None:
    for code in (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                 RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                 RequestCode.CLONE_GROUP_OFFSET, RequestCode.CLEAN_UNUSED_TOPIC, RequestCode.CONSUME_MESSAGE_DIRECTLY,
                 RequestCode.DELETE_EXPIRED_COMMITLOG, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST):
        assert code in BROKER_ADMIN_CODES


def test_reset_gate_moves_the_next_pull_and_ignores_stale_commits() -> None:
    from brokerd.processors.admin_client import ResetGate
    from brokerd.remoting.codes import ResponseCode

    store = SimpleNamespace(min_offset_in_queue=lambda t, q: 0, max_offset_in_queue=lambda t, q: 9)
    gate = ResetGate(SimpleNamespace(store=store))
    seen: list[int] = []

    def inner(conn: Any, cmd: Any) -> Any:
        seen.append(cmd.code)
        return cmd.response()

    def call(wrap: Any, code: int, ext: dict[str, str]) -> Any:
        return wrap(inner)(None, request(code, ext))

    pull, commit = gate.wrap_pull, gate.wrap_commit
    head = {"consumerGroup": "G", "topic": "T", "queueId": "1"}
    gate.assign("G", "T", {0: 0, 1: 3})
    r = call(commit, RequestCode.UPDATE_CONSUMER_OFFSET, {**head, "commitOffset": "7"})
    assert r.remark == "Offset has been previously reset" and seen == []
    r = call(pull, RequestCode.PULL_MESSAGE, {**head, "queueOffset": "7"})
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "3" and r.ext["maxOffset"] == "9"
    call(pull, RequestCode.PULL_MESSAGE, {**head, "queueOffset": "3"})  # no longer pending: served
    call(commit, RequestCode.UPDATE_CONSUMER_OFFSET, {**head, "commitOffset": "4"})
    assert seen == [RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET]
    # a pull already at the reset offset (the client applied the notice) is served and clears the reset
    call(pull, RequestCode.PULL_MESSAGE, {**head, "queueId": "0", "queueOffset": "0"})
    assert gate.pending == {} and seen[-1] == RequestCode.PULL_MESSAGE
