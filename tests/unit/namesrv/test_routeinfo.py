"""RouteInfoManager rules (spec 2.4 registration steps 1-7, unregister, expiry, channel close, queries)."""

from __future__ import annotations

from typing import Any

import orjson

from brokerd.namesrv.body import PERM_INHERIT, PERM_READ, PERM_WRITE, DataVersion, TopicConfig, dumps
from brokerd.namesrv.routeinfo import BrokerRegistration, QueueData, RegisterResult, RouteInfoManager

A0 = "10.0.0.1:10911"  # port-ok: address data, nothing binds it
A1 = "10.0.0.2:10911"  # port-ok: address data, nothing binds it
B0 = "10.0.0.3:10911"  # port-ok: address data, nothing binds it
DV1 = DataVersion(1, 0, 100)


class Clock:
    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def topics(*names: str, queues: int = 4, perm: int = 6) -> dict[str, TopicConfig]:
    return {n: TopicConfig(n, queues, queues, perm) for n in names}


def reg(name: str = "broker-a", addr: str = A0, bid: int = 0, tcs: dict[str, TopicConfig] | None = None,
        dv: DataVersion = DV1, **kw: Any) -> BrokerRegistration:
    return BrokerRegistration(
        cluster=kw.pop("cluster", "DefaultCluster"), broker_addr=addr, broker_name=name, broker_id=bid,
        ha_server_addr=kw.pop("ha", addr.replace("10911", "10912")),
        topic_config_table=tcs if tcs is not None else topics("TBW102", "T1"), data_version=dv, **kw,
    )


def mgr(clock: Clock | None = None, **kw: Any) -> RouteInfoManager:
    return RouteInfoManager(clock or Clock(), **kw)


def test_master_registration_creates_route_with_quoted_keys() -> None:
    m = mgr()
    assert m.register_broker(reg()) == RegisterResult(None, None)
    route = m.topic_route("T1")
    assert route == {
        "brokerDatas": [{"brokerAddrs": {"0": A0}, "brokerName": "broker-a", "cluster": "DefaultCluster",
                         "enableActingMaster": False}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                        "writeQueueNums": 4}],
    }
    raw = dumps(route)
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911"}' in raw  # port-ok: address data, nothing binds it
    assert raw.index(b'"brokerDatas"') < raw.index(b'"filterServerTable"') < raw.index(b'"queueDatas"')
    assert m.topic_route("nope") is None


def test_zone_name_and_acting_master_flag_appear_in_broker_data() -> None:
    m = mgr()
    m.register_broker(reg(zone_name="z1", enable_acting_master=True))
    bd = m.topic_route("T1")["brokerDatas"][0]  # type: ignore[index]
    assert bd["zoneName"] == "z1" and bd["enableActingMaster"] is True


def test_slave_gets_master_and_ha_address_and_does_not_write_queue_data() -> None:
    m = mgr()
    assert m.register_broker(reg(bid=1, addr=A1)) == RegisterResult(None, None)  # no master yet
    assert m.topic_route("T1") is None  # an old-version slave never creates queue data
    m.register_broker(reg())
    res = m.register_broker(reg(bid=1, addr=A1, tcs=topics("TBW102", "T1", "onlyOnSlave")))
    assert res == RegisterResult(A0, "10.0.0.1:10912")
    assert "onlyOnSlave" not in m.all_topics()
    assert m.topic_route("T1")["brokerDatas"][0]["brokerAddrs"] == {"0": A0, "1": A1}  # type: ignore[index]


def test_slave_to_master_switch_keeps_one_record_per_address() -> None:
    m = mgr()
    m.register_broker(reg(bid=1, addr=A1))
    m.register_broker(reg(bid=0, addr=A1))
    assert m.broker_addr_table["broker-a"].broker_addrs == {0: A1}
    assert m.topic_route("T1") is not None


def test_larger_state_version_elsewhere_wins() -> None:
    m = mgr()
    m.register_broker(reg(addr=A0, dv=DataVersion(3, 5, 100)))
    res = m.register_broker(reg(addr=B0, dv=DataVersion(9, 3, 200)))
    assert res == RegisterResult(None, None)
    assert m.broker_addr_table["broker-a"].broker_addrs == {0: A0}
    assert m.query_broker_data_version("DefaultCluster", B0) is None
    m.register_broker(reg(addr=B0, dv=DataVersion(1, 6, 300)))
    assert m.broker_addr_table["broker-a"].broker_addrs == {0: B0}


def test_single_topic_registration_needs_a_prior_full_one() -> None:
    m = mgr()
    assert m.register_broker(reg(tcs=topics("T1"))) is None
    assert m.broker_addr_table == {} and m.cluster_addr_table == {} and m.broker_live_table == {}
    assert m.register_broker(reg(tcs=topics("TBW102", "T1"))) is not None
    assert m.register_broker(reg(tcs=topics("T2"), dv=DataVersion(2, 0, 200))) is not None
    assert m.topic_route("T2") is not None


def test_incremental_body_adds_without_removing_absent_topics() -> None:
    m = mgr()
    m.register_broker(reg(tcs=topics("TBW102", "T1")))
    m.register_broker(reg(tcs=topics("T2"), dv=DataVersion(2, 0, 200)))
    assert m.all_topics() == ["T1", "T2", "TBW102"]
    m.register_broker(reg(tcs={"T1": TopicConfig("T1", 8, 8, 6)}, dv=DataVersion(3, 0, 300)))
    assert m.topic_route("T1")["queueDatas"][0]["writeQueueNums"] == 8  # type: ignore[index]


def test_delete_topic_with_broker_registration_option_removes_absent_topics() -> None:
    m = mgr(delete_topic_with_broker_registration=True)
    m.register_broker(reg(tcs=topics("TBW102", "T1", "T2")))
    m.register_broker(reg(tcs=topics("TBW102", "T1"), dv=DataVersion(2, 0, 200)))
    assert m.all_topics() == ["T1", "TBW102"]


def test_unchanged_data_version_does_not_overwrite_queue_data() -> None:
    m = mgr()
    m.register_broker(reg())
    assert m.wipe_write_perm("broker-a") == 2
    m.register_broker(reg())  # periodic re-registration, same DataVersion: wiped perm stays
    assert m.topic_route("T1")["queueDatas"][0]["perm"] == PERM_READ  # type: ignore[index]
    m.register_broker(reg(dv=DataVersion(2, 0, 200)))
    assert m.topic_route("T1")["queueDatas"][0]["perm"] == 6  # type: ignore[index]


def test_write_perm_wipe_and_add_count_topics() -> None:
    m = mgr()
    m.register_broker(reg(tcs=topics("TBW102", "T1", perm=PERM_READ | PERM_WRITE | PERM_INHERIT)))
    assert m.wipe_write_perm("broker-a") == 2
    assert m.topic_route("TBW102")["queueDatas"][0]["perm"] == PERM_READ | PERM_INHERIT  # type: ignore[index]
    assert m.add_write_perm("broker-a") == 2
    assert m.topic_route("TBW102")["queueDatas"][0]["perm"] == PERM_READ | PERM_WRITE  # type: ignore[index]
    assert m.wipe_write_perm("unknown") == 0


def test_unregister_master_and_slave() -> None:
    m = mgr()
    m.register_broker(reg())
    m.register_broker(reg(bid=1, addr=A1))
    m.register_broker(reg(name="broker-b", addr=B0, tcs=topics("TBW102", "Tb")))
    assert m.unregister_broker("DefaultCluster", A1, "broker-a", 1)
    assert m.broker_addr_table["broker-a"].broker_addrs == {0: A0}
    assert m.unregister_broker("DefaultCluster", A0, "broker-a", 0)
    assert "broker-a" not in m.broker_addr_table
    assert m.topic_route("T1") is None and "T1" not in m.all_topics()
    shared = m.topic_route("TBW102")
    assert shared is not None and [q["brokerName"] for q in shared["queueDatas"]] == ["broker-b"]
    assert m.cluster_info()["clusterAddrTable"] == {"DefaultCluster": ["broker-b"]}
    assert not m.unregister_broker("DefaultCluster", A0, "broker-a", 0)
    m.unregister_broker("DefaultCluster", B0, "broker-b", 0)
    assert m.cluster_addr_table == {} and m.topic_queue_table == {} and m.broker_live_table == {}


def test_expiry_scan_removes_only_stale_brokers() -> None:
    clock = Clock()
    m = mgr(clock)
    m.register_broker(reg())
    m.register_broker(reg(name="broker-b", addr=B0, tcs=topics("TBW102", "Tb"), timeout_ms=10_000))
    clock.t += 10_000
    assert m.scan_not_active_brokers() == []  # exactly at the timeout: still alive
    clock.t += 1
    removed = m.scan_not_active_brokers()
    assert [(r.broker_name, r.broker_addr, r.broker_id) for r in removed] == [("broker-b", B0, 0)]
    assert m.topic_route("Tb") is None
    clock.t += 100_000
    assert m.update_broker_timestamp("DefaultCluster", A0)  # BROKER_HEARTBEAT refreshes
    clock.t += 100_000
    assert m.scan_not_active_brokers() == []
    clock.t += 20_001
    assert [r.broker_name for r in m.scan_not_active_brokers()] == ["broker-a"]
    assert m.broker_addr_table == {} and m.topic_queue_table == {}
    assert not m.update_broker_timestamp("DefaultCluster", A0)


def test_channel_close_removes_exactly_the_brokers_registered_on_it() -> None:
    m = mgr()
    pooled, other = object(), object()
    m.register_broker(reg(), pooled)
    m.register_broker(reg(bid=1, addr=A1), pooled)
    m.register_broker(reg(name="broker-b", addr=B0, tcs=topics("TBW102", "Tb")), other)
    removed = m.on_channel_close(pooled)
    assert sorted((r.broker_name, r.broker_id) for r in removed) == [("broker-a", 0), ("broker-a", 1)]
    assert m.topic_route("T1") is None and m.topic_route("Tb") is not None
    # A broker that re-registered over a new connection survives the close of its old one.
    old, new = object(), object()
    m.register_broker(reg(), old)
    m.register_broker(reg(), new)
    assert m.on_channel_close(old) == []
    assert m.topic_route("T1") is not None


def test_prime_slave_with_acting_master_registers_read_only_and_route_relabels() -> None:
    m = mgr(support_acting_master=True)
    m.register_broker(reg(bid=2, addr=A1, enable_acting_master=True))
    qd = m.topic_queue_table["T1"]["broker-a"]
    assert qd.perm == PERM_READ  # write perm wiped for the acting master
    route = m.topic_route("T1")
    assert route is not None and route["brokerDatas"][0]["brokerAddrs"] == {"0": A1}
    assert m.broker_addr_table["broker-a"].broker_addrs == {2: A1}  # only the returned copy is relabelled


def test_master_leaving_acting_master_set_wipes_write_perm() -> None:
    m = mgr()
    m.register_broker(reg(enable_acting_master=True))
    m.register_broker(reg(bid=1, addr=A1, enable_acting_master=True))
    m.unregister_broker("DefaultCluster", A0, "broker-a", 0)
    assert m.topic_queue_table["T1"]["broker-a"].perm == PERM_READ


def test_filter_server_table_in_route() -> None:
    m = mgr()
    m.register_broker(reg(filter_server_list=["10.0.0.9:3000"]))
    assert m.topic_route("T1")["filterServerTable"] == {A0: ["10.0.0.9:3000"]}  # type: ignore[index]
    m.register_broker(reg(filter_server_list=[]))
    assert m.topic_route("T1")["filterServerTable"] == {}  # type: ignore[index]


def test_cluster_info_topic_lists_and_member_group() -> None:
    m = mgr()
    m.register_broker(reg())
    m.register_broker(reg(bid=1, addr=A1))
    m.register_broker(reg(name="broker-b", addr=B0, cluster="C2", tcs=topics("TBW102", "Tb")))
    info = m.cluster_info()
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"], "C2": ["broker-b"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": A0, "1": A1}
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}' in dumps(info)  # port-ok: address data, nothing binds it
    assert m.all_topics() == ["T1", "TBW102", "Tb"]
    assert m.topics_by_cluster("C2") == ["TBW102", "Tb"]
    assert m.topics_by_cluster("nope") == []
    assert m.broker_member_group("DefaultCluster", "broker-a") == {
        "brokerAddrs": {"0": A0, "1": A1}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
    assert m.broker_member_group("DefaultCluster", "ghost")["brokerAddrs"] == {}


def test_delete_topic_whole_or_per_cluster() -> None:
    m = mgr()
    m.register_broker(reg())
    m.register_broker(reg(name="broker-b", addr=B0, cluster="C2"))
    m.delete_topic("T1", "C2")
    assert [q["brokerName"] for q in m.topic_route("T1")["queueDatas"]] == ["broker-a"]  # type: ignore[index]
    m.delete_topic("T1")
    assert m.topic_route("T1") is None
    m.delete_topic("never-existed")


def test_register_topic_needs_known_brokers_and_changes_nothing_otherwise() -> None:
    m = mgr()
    m.register_broker(reg())
    err = m.register_topic("Tnew", [QueueData("broker-a", 2, 2, 6), QueueData("ghost", 1, 1, 6)])
    assert err is not None and "ghost" in err and "Tnew" not in m.topic_queue_table
    assert m.register_topic("Tnew", [QueueData("broker-a", 2, 2, 6)]) is None
    assert m.topic_route("Tnew")["queueDatas"][0]["readQueueNums"] == 2  # type: ignore[index]


def test_query_data_version_rules() -> None:
    m = mgr()
    dv = DataVersion(7, 0, 123)
    assert m.is_broker_topic_config_changed("DefaultCluster", A0, dv)  # unknown broker: changed
    m.register_broker(reg(dv=dv))
    assert not m.is_broker_topic_config_changed("DefaultCluster", A0, DataVersion(7, 0, 123))
    assert m.is_broker_topic_config_changed("DefaultCluster", A0, DataVersion(7, 0, 124))
    assert orjson.loads(dumps(m.query_broker_data_version("DefaultCluster", A0).to_json())) == {  # type: ignore[union-attr]
        "counter": 7, "stateVersion": 0, "timestamp": 123}
