"""A master and a slave broker in process, on real sockets: the slave adopts the master's topics, groups, consumer and
delay offsets (RocketMQ 4.x SlaveSynchronize), offsets committed on the slave reach the master (at once, or when a
master that was down comes back, without being overwritten by its older value), and pulls answer with the
suggestWhichBrokerId of spec §2.3."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from brokerd.broker import Broker
from brokerd.broker_config import BrokerConfig
from brokerd.ha.metasync import SlaveMetadataSync
from brokerd.metadata import SubscriptionGroupConfig
from brokerd.processors import pull as pull_processor
from brokerd.remoting import RemotingClient, RemotingCommand, RemotingServer, request
from tests.support import broker_port, until

pytestmark = pytest.mark.integration

NAME = "broker-ms"
TOPIC = "T_ms"
GROUP = "G_ms"
NEVER_MS = 3_600_000  # the slave's sync period: only the pushes of new commits run by themselves


def config(root: Path, port: int, *, slave: bool) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(root), listen_port=port, broker_name=NAME, broker_ip1="127.0.0.1",
                        broker_role="SLAVE" if slave else "ASYNC_MASTER", broker_id=1 if slave else 0,
                        fast_listen_port_enable=False, mapped_file_size_commit_log=4 * 1024 * 1024,
                        max_hash_slot_num=5000, max_index_num=20000, disk_space_warning_level_ratio=0.99,
                        disk_space_clean_forcibly_ratio=0.99, slave_sync_metadata_interval=NEVER_MS)


class Node:
    """One broker serving its dispatcher on a real socket (the container's job, done by hand)."""

    def __init__(self, cfg: BrokerConfig) -> None:
        self.cfg = cfg
        self.broker = Broker(cfg, RemotingClient(), namesrv_addrs=[])
        self.server: RemotingServer | None = None
        self.stopped = False

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.cfg.listen_port}"

    async def start(self) -> Node:
        await self.broker.start()
        await self.serve()
        return self

    async def serve(self) -> None:
        self.server = RemotingServer(self.broker.dispatcher, host="127.0.0.1", port=self.cfg.listen_port)
        await self.server.start()

    async def unserve(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=0)
            self.server = None

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        await self.unserve()
        await self.broker.shutdown()
        await self.broker.outer.close()


def slave_sync_of(slave: Broker) -> SlaveMetadataSync:
    """The slave's own metadata sync (the one its offset commits go to)."""
    sync = slave.slave_sync
    assert isinstance(sync, SlaveMetadataSync)
    return sync


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Node, Node, SlaveMetadataSync]]:
    master = await Node(config(tmp_path / "master", broker_port(), slave=False)).start()
    slave = await Node(config(tmp_path / "slave", broker_port(), slave=True)).start()
    slave.broker.master_addr = master.addr
    sync = slave_sync_of(slave.broker)
    try:
        yield master, slave, sync
    finally:
        await sync.stop()
        await slave.stop()
        await master.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    cli = RemotingClient()
    try:
        yield cli
    finally:
        await cli.close()


async def call(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
               body: bytes | None = None) -> RemotingCommand:
    return await client.invoke(addr, request(code, ext or {}, body), 5.0)


def commit(group: str, topic: str, qid: int, offset: int) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(qid), "commitOffset": str(offset)}


def pull_ext(qoff: int, *, sys_flag: int = 4, commit_offset: int = 0, group: str = GROUP,
             max_msgs: int = 32) -> dict[str, str]:
    return {"consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": str(qoff),
            "maxMsgNums": str(max_msgs), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "0"}


async def create_topic_and_group(client: RemotingClient, master: Node, **group: Any) -> None:
    r = await call(client, master.addr, 17, {"topic": TOPIC, "readQueueNums": "2", "writeQueueNums": "2",
                                             "perm": "6"})
    assert r.code == 0, r.remark
    body = orjson.dumps(SubscriptionGroupConfig(GROUP, **group).to_json())
    assert (await call(client, master.addr, 200, body=body)).code == 0


async def send(client: RemotingClient, master: Node, *bodies: bytes) -> None:
    for body in bodies:
        ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "2", "e": "0", "f": "0", "g": "0", "h": "0"}
        r = await call(client, master.addr, 310, ext, body)
        assert r.code == 0, r.remark


def replicate(master: Broker, slave: Broker) -> None:
    """Copy the master's new commit-log bytes to the slave (what HA does)."""
    while (off := slave.store.max_phy_offset) < master.store.max_phy_offset:
        with master.store.read_range(off, 1 << 20) as view:
            slave.store.append_raw(off, bytes(view))


# ------------------------------------------------------------------------------------------------ metadata


async def test_slave_adopts_the_masters_tables_and_replaces_only_what_changed(
        pair: tuple[Node, Node, SlaveMetadataSync], client: RemotingClient) -> None:
    master, slave, _ = pair
    changes: list[frozenset[str]] = []
    sync = SlaveMetadataSync(slave.broker, interval_ms=NEVER_MS, on_change=changes.append)
    m, s = master.broker.meta, slave.broker.meta
    await create_topic_and_group(client, master, retry_max_times=5)
    assert (await call(client, master.addr, 15, commit(GROUP, TOPIC, 1, 42))).code == 0
    m.delay_offsets.update(3, 17)

    assert await sync.sync_once()
    assert changes == [frozenset({"topics", "consumer_offsets", "delay_offsets", "subscription_groups"})]
    tc, sg = s.topics.get(TOPIC), s.subscriptions.find(GROUP)
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums) == (2, 2)
    assert sg is not None and sg.retry_max_times == 5
    assert s.offsets.query_offset(GROUP, TOPIC, 1) == 42
    assert s.delay_offsets.get(3) == 17
    assert s.topics.data_version == m.topics.data_version
    assert s.subscriptions.data_version == m.subscriptions.data_version
    assert dict(s.topics.all()) == dict(m.topics.all())  # the master's system topics too
    for mgr in (s.topics, s.subscriptions, s.offsets, s.delay_offsets):  # persisted at once
        assert not mgr.dirty
    with open(s.topics.path, encoding="utf-8") as f:
        assert TOPIC in json.load(f)["topicConfigTable"]
    with open(s.offsets.path, encoding="utf-8") as f:
        assert json.load(f)["offsetTable"][f"{TOPIC}@{GROUP}"] == {"1": 42}
    assert (sync.syncs, sync.failures) == (1, 0) and sync.last_sync_ms > 0

    # nothing changed on the master: nothing replaced, nothing written
    assert not await sync.sync_once()
    assert len(changes) == 1 and not s.topics.dirty and sync.syncs == 2

    # only an offset moved: only that table is replaced; the topic table keeps its DataVersion
    dv = s.topics.data_version
    assert (await call(client, master.addr, 15, commit(GROUP, TOPIC, 1, 43))).code == 0
    assert await sync.sync_once()
    assert changes[-1] == frozenset({"consumer_offsets"})
    assert s.offsets.query_offset(GROUP, TOPIC, 1) == 43 and s.topics.data_version == dv

    # a topic deleted on the master disappears from the slave
    assert (await call(client, master.addr, 215, {"topic": TOPIC})).code == 0
    assert await sync.sync_once()
    assert s.topics.get(TOPIC) is None and "topics" in changes[-1]


async def test_a_slave_without_a_known_master_does_not_sync(pair: tuple[Node, Node, SlaveMetadataSync]) -> None:
    _, slave, sync = pair
    slave.broker.master_addr = None
    assert not await sync.sync_once()
    assert (sync.syncs, sync.failures) == (0, 0)


# ------------------------------------------------------------------------------------------------ offsets


async def test_offset_committed_on_the_slave_reaches_the_master_at_once(
        pair: tuple[Node, Node, SlaveMetadataSync], client: RemotingClient) -> None:
    master, slave, sync = pair
    await create_topic_and_group(client, master)
    assert await sync.sync_once()
    sync.start()
    # UPDATE_CONSUMER_OFFSET (one-way, as the Java client sends it every 5 s)
    cmd = request(15, commit(GROUP, TOPIC, 0, 7), oneway=True)
    await client.invoke_oneway(slave.addr, cmd)
    await until(lambda: master.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 7, "the commit on the master")
    assert slave.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 7
    await until(lambda: sync.pending_count == 0, "the master's acknowledgement")

    # a commit piggybacked on a pull from the slave (FLAG_COMMIT_OFFSET)
    r = await call(client, slave.addr, 11, pull_ext(0, sys_flag=1 | 4, commit_offset=9))
    assert (r.code, r.ext["suggestWhichBrokerId"]) == (20, "0")  # nothing on the slave, the master is alive
    await until(lambda: master.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 9, "the pull's commit")
    assert sync.forwarded == 2 and sync.failures == 0


async def test_offset_committed_while_the_master_is_down_is_pushed_when_it_returns(
        pair: tuple[Node, Node, SlaveMetadataSync], client: RemotingClient) -> None:
    master, slave, sync = pair
    await create_topic_and_group(client, master)
    assert (await call(client, master.addr, 15, commit(GROUP, TOPIC, 0, 5))).code == 0
    assert await sync.sync_once()
    assert slave.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 5
    sync.start()

    await master.unserve()  # the master is down, the slave still believes in it
    with capture_logs() as logs:
        assert (await call(client, slave.addr, 15, commit(GROUP, TOPIC, 0, 11))).code == 0
        await until(lambda: sync.failures >= 1, "the failed forward")
        assert not await sync.sync_once()
        assert not await sync.sync_once()
    failed = [e for e in logs if e["event"] == "slave_metadata_sync_failed"]
    assert len(failed) == 1 and failed[0]["master"] == master.addr  # once per failure streak
    assert sync.failures >= 3 and sync.pending_offsets() == {(GROUP, TOPIC, 0): 11}
    assert slave.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 11
    assert master.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 5

    await master.serve()  # back: the next sync pushes first, then installs the master's table
    with capture_logs() as logs:
        await sync.sync_once()
    assert master.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 11
    assert slave.broker.meta.offsets.query_offset(GROUP, TOPIC, 0) == 11
    assert sync.pending_count == 0
    assert [e["event"] for e in logs if e["event"].startswith("slave_metadata_sync_")] == \
        ["slave_metadata_sync_recovered"]


async def test_offset_committed_without_a_known_master_waits_for_one(
        pair: tuple[Node, Node, SlaveMetadataSync], client: RemotingClient) -> None:
    master, slave, sync = pair
    await create_topic_and_group(client, master)
    assert await sync.sync_once()
    slave.broker.master_addr = None
    assert (await call(client, slave.addr, 15, commit(GROUP, TOPIC, 1, 3))).code == 0
    assert sync.pending_offsets() == {(GROUP, TOPIC, 1): 3}
    assert not await sync.push_pending() and sync.failures == 0  # nobody to push to: not a failure
    slave.broker.master_addr = master.addr
    await sync.sync_once()
    assert master.broker.meta.offsets.query_offset(GROUP, TOPIC, 1) == 3 and sync.pending_count == 0


async def test_offsets_pending_when_the_slave_restarts_reach_the_master_afterwards(
        pair: tuple[Node, Node, SlaveMetadataSync], client: RemotingClient) -> None:
    master, slave, sync = pair
    await create_topic_and_group(client, master)
    assert await sync.sync_once()
    await master.unserve()
    assert (await call(client, slave.addr, 15, commit(GROUP, TOPIC, 1, 21))).code == 0
    assert not await sync.sync_once()
    await slave.stop()  # the pending offset is kept on disk

    again = await Node(slave.cfg).start()
    try:
        again.broker.master_addr = master.addr
        await master.serve()
        await slave_sync_of(again.broker).sync_once()
        assert master.broker.meta.offsets.query_offset(GROUP, TOPIC, 1) == 21
        assert again.broker.meta.offsets.query_offset(GROUP, TOPIC, 1) == 21
        assert slave_sync_of(again.broker).pending_count == 0
    finally:
        await again.stop()


# ------------------------------------------------------------------------------------------------ pulls


async def test_pull_suggestions_on_master_and_slave(pair: tuple[Node, Node, SlaveMetadataSync], client: RemotingClient,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    master, slave, sync = pair
    await create_topic_and_group(client, master, broker_id=1, which_broker_when_consume_slowly=2)
    await send(client, master, b"m0", b"m1", b"m2")
    assert await sync.sync_once()
    replicate(master.broker, slave.broker)

    async def pull(node: Node, qoff: int, **kw: Any) -> tuple[int, str]:
        r = await call(client, node.addr, 11, pull_ext(qoff, **kw))
        return r.code, r.ext["suggestWhichBrokerId"]

    # master, slaveReadEnable=false (the default): always the master
    assert await pull(master, 0) == (0, "0")
    # master, slaveReadEnable: the group's brokerId, or whichBrokerWhenConsumeSlowly when the consumer lags
    # more than accessMessageInMemoryMaxRatio % of RAM
    mb, sb = master.broker, slave.broker
    mb.cfg = dataclasses.replace(mb.cfg, slave_read_enable=True)
    assert await pull(master, 0, max_msgs=1) == (0, "1")
    monkeypatch.setattr(pull_processor, "TOTAL_PHYSICAL_MEMORY", 0)  # from now on any lag is too much
    assert await pull(master, 0, max_msgs=1) == (0, "2")
    assert await pull(master, 3) == (19, "1")  # caught up: no record, no lag

    # slave, master alive: found -> the master next; not found -> 20 at once (even with FLAG_SUSPEND)
    assert await pull(slave, 0) == (0, "0")
    assert await pull(slave, 3, sys_flag=2 | 4) == (20, "0")
    assert await pull(slave, 9) == (20, "0")
    # slave, slaveReadEnable and a lagging consumer: stays on whichBrokerWhenConsumeSlowly
    sb.cfg = dataclasses.replace(sb.cfg, slave_read_enable=True)
    assert await pull(slave, 0, max_msgs=1) == (0, "2")
    assert await pull(slave, 3) == (20, "0")
    # slave, master unknown (down): it answers as the store says
    sb.master_addr = None
    assert await pull(slave, 0, max_msgs=1) == (0, "2")
    sb.cfg = dataclasses.replace(sb.cfg, slave_read_enable=False)
    assert await pull(slave, 0) == (0, "0")
    assert await pull(slave, 3) == (19, "0")
