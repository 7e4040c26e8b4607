"""Incremental metadata sync (RIP-81) with real processes: topics, groups and offsets made on the master through the
real client and the admin codes reach the slave at once and survive a failover; an empty slave bootstraps from a
snapshot; the full-sync baseline (allowMetadataIncrementalSync=false) is still there for comparison."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
from typing import Any

import orjson
import pytest

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import request
from tests.ha_cluster import HACluster
from tests.support import ClientRun, topics, wait_for

pytestmark = pytest.mark.integration


def call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> Any:
    async def go() -> Any:
        cli = RemotingClient()
        try:
            return await cli.invoke(addr, request(code, ext or {}, body), 5.0)
        finally:
            await cli.close()

    return asyncio.run(go())


def groups(addr: str) -> set[str]:
    r = call(addr, 201)
    return set(orjson.loads(r.body)["subscriptionGroupTable"]) if r.code == 0 else set()


def offsets(addr: str) -> dict[str, dict[str, int]]:
    r = call(addr, 43)
    return dict(orjson.loads(r.body)["offsetTable"]) if r.code == 0 else {}


def create_topic(addr: str, name: str) -> int:
    ext = {"topic": name, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
    return int(call(addr, 17, ext).code)


def create_group(addr: str, name: str) -> int:
    return int(call(addr, 200, {}, orjson.dumps({"groupName": name})).code)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Any:
    cl = HACluster(tmp_path, containers=2, replicas=2, sets=1, broker_extra={"allowMetadataIncrementalSync": "true"})
    try:
        yield cl.start()
    finally:
        cl.stop()


def test_metadata_made_on_the_master_survives_its_death(cluster: HACluster, tmp_path: pathlib.Path) -> None:
    cl = cluster
    master = cl.master_of("broker-a")
    assert master is not None
    slave = next(cl.broker_addr("broker-a", c) for c in range(2) if cl.broker_addr("broker-a", c) != master)
    assert create_topic(master, "MetaT0") == 0  # answered once its record is replicated
    wait_for(lambda: "MetaT0" in topics(slave), 10, "the topic applied on the slave")
    for i in range(1, 20):
        assert create_topic(master, f"MetaT{i}") == 0 and create_group(master, f"MetaG{i}") == 0
    env = {"NAMESRV": cl.namesrv, "TOPIC": "MetaT1", "GROUP": "MetaConsumer"}
    code, _ = ClientRun("produce", {**env, "COUNT": 200}, tmp_path / "p").wait(60)
    assert code == 0
    consumer = ClientRun("push", {**env, "COUNT": 200, "TIMEOUT": 60, "LINGER_S": 7}, tmp_path / "c")
    try:
        wait_for(lambda: len({d["props"]["seq"] for d in consumer.received()}) >= 200, 60, "200 consumed")
        committed = "MetaT1@MetaConsumer"
        wait_for(lambda: sum(offsets(master).get(committed, {}).values()) == 200, 20, "the offsets committed")
    finally:
        consumer.kill()
    wait_for(lambda: offsets(slave).get(committed) == offsets(master).get(committed), 5, "offsets on the slave")
    made_topics, made_groups = topics(master), groups(master)
    cl.kill_container(cl.container_of(master))
    new = cl.wait_master("broker-a", not_addr=master, timeout=30)
    assert new == slave
    assert made_topics <= topics(new) and made_groups <= groups(new)
    assert sum(offsets(new)[committed].values()) == 200  # a consumer resumes without re-consuming


def test_an_empty_slave_bootstraps_from_a_snapshot(cluster: HACluster) -> None:
    cl = cluster
    master = cl.master_of("broker-a")
    assert master is not None
    for i in range(50):
        assert create_topic(master, f"Boot{i}") == 0
    c = 1 - cl.container_of(master)
    slave = cl.broker_addr("broker-a", c)
    cl.kill_container(c)
    shutil.rmtree(cl.tmp / f"c{c}")  # the slave's disk is gone: it starts empty
    for i in range(50, 60):
        assert create_topic(master, f"Boot{i}") == 0
    cl.start_container(c)
    cl.wait_container(c)
    wait_for(lambda: {f"Boot{i}" for i in range(60)} <= topics(slave), 30, "the empty slave has every topic")
    status = orjson.loads(call(slave, 28).body)["table"]
    assert status["brokerRole"] == "SLAVE"
