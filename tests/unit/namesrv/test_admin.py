"""Name-server admin requests without sockets: UPDATE_NAMESRV_CONFIG (318) validates, applies and writes back;
GET_SYSTEM_TOPIC_LIST_FROM_NS (304) and the unit topic lists (311-313); the write-perm switches (205/327) refuse a
broker the name server does not know."""

from __future__ import annotations

import pathlib
from typing import Any

import orjson

from brokerd.namesrv.body import DataVersion, TopicConfig
from brokerd.namesrv.client import build_register_body
from brokerd.namesrv.config import NamesrvConfig
from brokerd.namesrv.routeinfo import BrokerRegistration
from brokerd.namesrv.service import NamesrvService
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request


def call(svc: NamesrvService, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> Any:
    handler = svc.handlers()[code]
    return handler(None, request(code, ext or {}, body))  # type: ignore[arg-type]


class _Peer:
    remote_addr = ("127.0.0.1", 50000)  # port-ok: a fake peer address, nothing binds it


def call_with_peer(svc: NamesrvService, code: int, ext: dict[str, str] | None = None,
                   body: bytes | None = None) -> RemotingCommand:
    result = svc.handlers()[code](_Peer(), request(code, ext or {}, body))  # type: ignore[arg-type]
    assert isinstance(result, RemotingCommand)
    return result


def registered(svc: NamesrvService, name: str = "broker-a", sys_flag: int = 0) -> None:
    tcs = {"T1": TopicConfig("T1", 4, 4, 6, topic_sys_flag=sys_flag), "TU": TopicConfig("TU", 4, 4, 6, topic_sys_flag=1),
           "TS": TopicConfig("TS", 4, 4, 6, topic_sys_flag=2)}
    svc.routes.register_broker(BrokerRegistration("DefaultCluster", "10.0.0.1:10911", name, 0,  # port-ok: data
                                                  topic_config_table=tcs, data_version=DataVersion(1, 0, 1)))


def test_update_config_applies_validates_and_writes_back(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("# the name server\nlistenPort=9876\nscanNotActiveBrokerInterval=5000\n")  # port-ok: file text
    svc = NamesrvService(NamesrvConfig(), config_path=str(conf))
    r = call_with_peer(svc, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"brokerChannelExpiredMs=30000\nenableTopicList=false\n")
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert svc.cfg.broker_channel_expired_ms == 30000 and not svc.cfg.enable_topic_list
    assert svc.routes.default_timeout_ms == 30000
    text = conf.read_text()
    assert text.startswith("# the name server\n") and "brokerChannelExpiredMs=30000" in text
    got = call(svc, RequestCode.GET_NAMESRV_CONFIG)
    assert b"brokerChannelExpiredMs=30000" in got.body
    # topic lists now answer "disable", as RocketMQ's do
    assert call(svc, RequestCode.GET_UNIT_TOPIC_LIST).remark == "disable"


def test_update_config_refuses_black_listed_unknown_and_bad_keys() -> None:
    svc = NamesrvService(NamesrvConfig())
    for body, code, word in ((b"kvConfigPath=/tmp/x", ResponseCode.NO_PERMISSION, "kvConfigPath"),
                             (b"aclEnable=false", ResponseCode.NO_PERMISSION, "aclEnable"),
                             (b"listenPort=1", ResponseCode.NO_PERMISSION, "listenPort"),
                             (b"noSuchKey=1", ResponseCode.SYSTEM_ERROR, "noSuchKey"),
                             (b"scanNotActiveBrokerInterval=-5", ResponseCode.SYSTEM_ERROR, "scanNotActiveBrokerInterval"),
                             (b"brokerChannelExpiredMs=abc", ResponseCode.SYSTEM_ERROR, "brokerChannelExpiredMs")):
        r = call_with_peer(svc, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
        assert r.code == code and word in (r.remark or ""), (body, r.code, r.remark)
    assert svc.cfg == NamesrvConfig()  # nothing changed


def test_system_and_unit_topic_lists() -> None:
    svc = NamesrvService(NamesrvConfig())
    registered(svc)
    body = orjson.loads(call(svc, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)
    assert body == {"topicList": ["DefaultCluster", "broker-a"], "brokerAddr": "10.0.0.1:10911"}  # port-ok: data
    assert orjson.loads(call(svc, RequestCode.GET_UNIT_TOPIC_LIST).body)["topicList"] == ["TU"]
    assert orjson.loads(call(svc, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST).body)["topicList"] == ["TS"]
    assert orjson.loads(call(svc, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST).body)["topicList"] == ["TS"]


def test_write_perm_switches_name_an_unknown_broker() -> None:
    svc = NamesrvService(NamesrvConfig())
    registered(svc)
    for code in (RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER):
        r = call_with_peer(svc, code, {"brokerName": "broker-zz"})
        assert r.code == ResponseCode.BROKER_NOT_EXIST and "broker-zz" in (r.remark or "")
    r = call_with_peer(svc, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert r.code == ResponseCode.SUCCESS and r.ext["wipeTopicCount"] == "3"
    route = svc.routes.topic_route("T1")
    assert route is not None and route["queueDatas"][0]["perm"] == 4
    r = call_with_peer(svc, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert r.ext["addTopicCount"] == "3" and svc.routes.topic_route("T1")["queueDatas"][0]["perm"] == 6  # type: ignore[index]


class _BrokerPeer(_Peer):
    """A broker's connection: the name server hooks its close."""

    def __init__(self) -> None:
        self.attrs: dict[str, Any] = {}

    def add_close_callback(self, cb: Any) -> None:
        pass


def test_a_re_registration_shows_its_changed_topics_and_the_memo_goes_with_the_broker() -> None:
    svc = NamesrvService(NamesrvConfig())
    peer = _BrokerPeer()
    ext = {"clusterName": "DefaultCluster", "brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a",  # port-ok: data
           "brokerId": "0"}

    def register(perm: int, version: int) -> None:  # a changed table comes with a new DataVersion, as RocketMQ's
        tcs = {t: TopicConfig(t, 4, 4, perm if t == "T1" else 6).to_json() for t in ("T1", "T2", "T3")}
        body = build_register_body(tcs, {"counter": version, "stateVersion": 0, "timestamp": version})
        r = svc.handlers()[RequestCode.REGISTER_BROKER](peer, request(RequestCode.REGISTER_BROKER, ext, body))  # type: ignore[arg-type]
        assert isinstance(r, RemotingCommand) and r.code == ResponseCode.SUCCESS, r

    register(6, 1)
    register(6, 1)  # the same table: taken from the memo
    assert svc.routes.topic_queue_table["T1"]["broker-a"].perm == 6
    register(2, 2)  # T1 changed: decoded again
    assert svc.routes.topic_queue_table["T1"]["broker-a"].perm == 2
    assert svc.routes.topic_queue_table["T2"]["broker-a"].perm == 6
    r = call_with_peer(svc, RequestCode.UNREGISTER_BROKER, ext)
    assert r.code == ResponseCode.SUCCESS and "T1" not in svc.routes.topic_queue_table
    register(4, 3)  # registered again after it left: everything decoded again, nothing stale
    assert svc.routes.topic_queue_table["T1"]["broker-a"].perm == 4
