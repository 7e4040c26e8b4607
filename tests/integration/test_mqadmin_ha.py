"""mqadmin against the HA deployment (3 controllers serving the name-server role, two containers in the cross
layout: each holds the master of one broker set and the slave of the other): cluster-wide commands reach the master
of each set, the HA and controller commands print RocketMQ 5's output, and after electMaster moves a set's master the
same commands reach the new master."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.ha_cluster import HACluster
from tests.integration.helpers.mqadmin import MQAdmin
from tests.support import rpc, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HACluster]:
    cl = HACluster(tmp_path_factory.mktemp("mqadmin-ha"), containers=2, replicas=2).start()
    try:
        for name in cl.sets:
            cl.wait_in_sync(name, 2)
        yield cl
    finally:
        cl.stop()


@pytest.fixture(scope="module")
def mq(ha: HACluster) -> MQAdmin:
    return MQAdmin(ha.namesrv)


def has_topic(addr: str, topic: str) -> bool:
    return bool(rpc(addr, 351, {"topic": topic}).code == 0)


def test_cluster_commands_reach_the_master_of_each_set(ha: HACluster, mq: MQAdmin) -> None:
    masters = {name: ha.wait_master(name) for name in ha.sets}
    out = mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_ha", "-r", "2", "-w", "2")
    assert sorted(re.findall(r"^create topic to (\S+) success\.$", out, re.M)) == sorted(masters.values())
    for name in ha.sets:
        slave = next(ha.broker_addr(name, c) for c in range(ha.n) if ha.broker_addr(name, c) != masters[name])
        wait_for(lambda: has_topic(slave, "T_ha"), 15, f"T_ha on {name}'s slave (metadata sync)")  # noqa: B023

    rows = [r.split() for r in mq.ok("clusterList").splitlines()[1:]]
    assert sorted((r[1], r[2] == "0") for r in rows) == [("broker-a", False), ("broker-a", True),
                                                        ("broker-b", False), ("broker-b", True)]
    cfg = mq.ok("getBrokerConfig", "-c", "DefaultCluster")
    for master in masters.values():
        assert f"============Master: {master}============" in cfg
        assert re.search(rf"============My Master: {re.escape(master)}=====Slave: \S+============", cfg)

    mq.ok("sendMessage", "-t", "T_ha", "-p", "via the masters")
    status = [r.split() for r in mq.ok("topicStatus", "-t", "T_ha").splitlines() if r.startswith("broker-")]
    assert len(status) == 4 and sum(int(r[3]) for r in status) == 1

    ha_out = mq.ok("haStatus", "-c", "DefaultCluster")
    assert sorted(re.findall(r"^#MasterAddr\t(\S+)$", ha_out, re.M)) == sorted(masters.values())
    assert re.findall(r"^#SlaveNum\t(\d+)$", ha_out, re.M) == ["1", "1"]
    slave_view = mq.ok("haStatus", "-b", ha.broker_addr("broker-a", 1))
    # a slave reports the master's HA address (RocketMQ's HAClientRuntimeInfo.masterAddr)
    assert re.search(r"^#MasterAddr\t127\.0\.0\.1:\d+\n#CommitLogMaxOffset\t\d+$", slave_view, re.M), slave_view
    assert "#MasterFlushOffset\t" in slave_view


def test_controller_commands_and_a_moved_master(ha: HACluster, mq: MQAdmin) -> None:
    controller = ha.ctl.addrs[0]
    meta = mq.ok("getControllerMetaData", "-a", controller)
    assert re.search(r"^#ControllerLeaderAddress\t\S+$", meta, re.M) and meta.count("#Peer:\t") == 3
    sss = mq.ok("getSyncStateSet", "-a", controller, "-c", "DefaultCluster")
    assert sss.count("#brokerName\t") == 2 and "#SyncStateSetNums\t2" in sss

    info = mq.ok("getSyncStateSet", "-a", controller, "-b", "broker-a")
    master_id = re.search(r"^#MasterBrokerId\t(\d+)$", info, re.M)
    ids = re.findall(r"brokerId=(\d+), brokerAddress='(\S+)'", info)
    assert master_id and len(ids) == 2
    new_id, new_addr = next((i, a) for i, a in ids if i != master_id.group(1))
    out = mq.ok("electMaster", "-a", controller, "-b", new_id, "-bn", "broker-a", "-c", "DefaultCluster")
    assert f"\n#BrokerMasterAddr\t{new_addr}\n" in out
    wait_for(lambda: ha.master_of("broker-a") == new_addr, 30, "the name servers routing broker-a's new master")

    out = mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_moved")
    assert new_addr in re.findall(r"^create topic to (\S+) success\.$", out, re.M)
    assert has_topic(new_addr, "T_moved")
    mq.fails("electMaster", "-a", controller, "-b", "99", "-bn", "broker-a", "-c", "DefaultCluster", needle="electMaster failed")


def test_broker_epochs_of_every_replica(ha: HACluster, mq: MQAdmin) -> None:
    epochs = mq.ok("getBrokerEpoch", "-c", "DefaultCluster")
    assert epochs.count("#brokerAddr\t") == 4 and "#Epoch: EpochEntry{epoch=" in epochs
    assert re.search(r"^#clusterName\tDefaultCluster\n#brokerName\tbroker-a\n#brokerAddr\t\S+\n#brokerId\t\d+$", epochs, re.M)
    one = mq.ok("getBrokerEpoch", "-b", "broker-b")
    assert one.count("#brokerAddr\t") == 2 and "broker-a" not in one
