"""SlaveMetadataSync against a fake master (a real BrokerMetadata answering through a fake remoting client): pending
offsets, the offset overlay, failure streaks, the loop; and the pure helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from brokerd.ha.metasync import (
    PENDING_FILE,
    PendingOffsets,
    SlaveMetadataSync,
    SyncError,
    decode_pending,
    encode_pending,
    overlay_offsets,
    parse_body,
    update_offset_request,
)
from brokerd.metadata import BrokerMetadata, MessageRequestMode, SubscriptionGroupConfig, TopicConfig
from brokerd.remoting import ConnectionClosed, RemotingCommand, ResponseCode, request
from tests.unit.metadata.helpers import make_broker

MASTER = "10.0.0.1:10911"  # port-ok: an address the fake outer client answers for; nothing binds it


class FakeMaster:
    """Answers the sync's requests from a BrokerMetadata, as brokerd/processors/admin.py and offsets.py do."""

    def __init__(self, meta: BrokerMetadata) -> None:
        self.meta = meta
        self.down = False
        self.refuse: dict[int, int] = {}  # request code -> response code
        self.bodies: dict[int, bytes] = {}  # request code -> body to answer instead
        self.before: dict[int, Callable[[], None]] = {}  # request code -> run before answering
        self.codes: list[int] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        assert addr == MASTER
        self.codes.append(cmd.code)
        if self.down:
            raise ConnectionClosed(f"cannot connect to {addr}: refused")
        if cmd.code in self.before:
            self.before[cmd.code]()
        if cmd.code in self.refuse:
            return cmd.response(self.refuse[cmd.code], "refused")
        if cmd.code in self.bodies:
            return cmd.response(body=self.bodies[cmd.code])
        m = self.meta
        if cmd.code == 15:
            m.offsets.commit_offset("slave", cmd.str_field("consumerGroup"), cmd.str_field("topic"),
                                    cmd.int_field("queueId"), cmd.int_field("commitOffset"))
            return cmd.response()
        docs = {21: m.topics.register_wrapper(), 43: m.offsets.all_json(), 45: m.delay_offsets.all_json(),
                201: {"subscriptionGroupTable": {k: v.to_json() for k, v in m.subscriptions.all().items()},
                      "dataVersion": m.subscriptions.data_version.to_json()},
                402: m.request_modes.rocketmq_json()}
        return cmd.response(body=orjson.dumps(docs[cmd.code]))


@dataclass
class FakeHost:
    meta: BrokerMetadata
    outer: FakeMaster
    master: str | None = MASTER
    master_role: bool = False
    log: Any = field(default_factory=lambda: structlog.get_logger().bind(broker="DefaultCluster:broker-a:1"))

    def master_broker_addr(self) -> str | None:
        return None if self.master_role else self.master

    def is_master(self) -> bool:
        return self.master_role


@pytest.fixture
def env(tmp_path: Path) -> tuple[BrokerMetadata, BrokerMetadata, FakeMaster, FakeHost]:
    master = make_broker(tmp_path / "master")
    slave = make_broker(tmp_path / "slave", stream_id="slave-1")
    outer = FakeMaster(master)
    return master, slave, outer, FakeHost(slave, outer)


def new_sync(host: FakeHost, **kw: Any) -> SlaveMetadataSync:
    return SlaveMetadataSync(host, **kw)  # type: ignore[arg-type]


async def until(cond: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)  # sleep-ok: polling a condition with a deadline


# ------------------------------------------------------------------------------------------------ pure parts


def test_pending_offsets_keep_the_newest_commit_until_it_is_acknowledged() -> None:
    p = PendingOffsets()
    p.put("g", "t", 0, 5)
    p.put("g", "t", 0, 6)
    p.put("g", "t", 1, 1)
    assert len(p) == 2 and ("g", "t", 0) in p
    assert not p.acknowledge(("g", "t", 0), 5)  # an older value was acknowledged: 6 still pending
    assert p.acknowledge(("g", "t", 0), 6)
    assert p.as_dict() == {("g", "t", 1): 1}
    p.clear()
    assert len(p) == 0


def test_overlay_sets_the_kept_queues_and_leaves_the_document_alone() -> None:
    doc = {"offsetTable": {"t@g": {"0": 3, "1": 4}}, "dataVersion": {"counter": 2}}
    out = overlay_offsets(doc, {("g", "t", 1): 9, ("g2", "t", 0): 1})
    assert out == {"offsetTable": {"t@g": {"0": 3, "1": 9}, "t@g2": {"0": 1}}, "dataVersion": {"counter": 2}}
    assert doc["offsetTable"] == {"t@g": {"0": 3, "1": 4}}
    assert overlay_offsets(doc, {}) == doc
    for bad in ({}, {"offsetTable": []}, [1]):
        with pytest.raises(ValueError):
            overlay_offsets(bad, {})


def test_parse_body_reads_a_java_masters_bare_integer_keys() -> None:
    cmd = request(43)
    java = cmd.response(body=b'{"offsetTable":{"t@g":{0:12,1:13}}}')
    assert parse_body(java, "consumer_offsets") == {"offsetTable": {"t@g": {"0": 12, "1": 13}}}
    with pytest.raises(SyncError, match="17"):
        parse_body(cmd.response(ResponseCode.TOPIC_NOT_EXIST, "no"), "topics")
    with pytest.raises(SyncError, match="empty"):
        parse_body(cmd.response(), "topics")
    with pytest.raises(SyncError):
        parse_body(cmd.response(body=b"{nope"), "topics")


def test_update_offset_request_has_rocketmqs_header() -> None:
    cmd = update_offset_request("g", "t", 3, 42)
    assert cmd.code == 15 and cmd.ext == {"consumerGroup": "g", "topic": "t", "queueId": "3", "commitOffset": "42"}


def test_interval_must_be_positive(env: Any) -> None:
    with pytest.raises(ValueError, match="slaveSyncMetadataInterval"):
        new_sync(env[3], interval_ms=0)


# ------------------------------------------------------------------------------------------------ sync_once


async def test_first_sync_installs_everything_then_nothing_until_the_master_changes(env: Any) -> None:
    master, slave, outer, host = env
    master.topics.update(TopicConfig("T1", 4, 4))
    master.subscriptions.update(SubscriptionGroupConfig("G1", retry_max_times=3))
    master.offsets.commit_offset("c", "G1", "T1", 2, 8)
    master.delay_offsets.update(2, 5)
    seen: list[frozenset[str]] = []
    sync = new_sync(host, on_change=seen.append)
    assert await sync.sync_once()
    assert outer.codes == [21, 43, 45, 201, 402]  # RocketMQ's order; nothing pending to push
    assert slave.topics.get("T1") == master.topics.get("T1")
    assert slave.offsets.table() == master.offsets.table() and slave.delay_offsets.get(2) == 5
    assert slave.subscriptions.find("G1") == master.subscriptions.find("G1")
    assert not await sync.sync_once()
    assert len(seen) == 1 and sync.syncs == 2


async def test_the_message_request_modes_reach_the_slave_and_follow_the_masters_changes(env: Any) -> None:
    """mqadmin setConsumeMode on the master reaches a slave under the 4.x full sync (RocketMQ's
    syncMessageRequestMode), removals too; a master that does not know 402 leaves the slave's modes alone."""
    master, slave, outer, host = env
    master.request_modes.set(MessageRequestMode("T1", "G1", "POP", 2))
    master.request_modes.set(MessageRequestMode("T1", "G2", "POP"))
    seen: list[frozenset[str]] = []
    sync = new_sync(host, on_change=seen.append)
    assert await sync.sync_once()
    assert slave.request_modes.get("T1", "G1") == MessageRequestMode("T1", "G1", "POP", 2)
    assert seen == [frozenset({"message_request_modes"})]
    assert (Path(slave.config_dir) / "messageRequestMode.json").exists()  # persisted at once
    master.request_modes.delete("T1", "G2")
    assert await sync.sync_once()
    assert slave.request_modes.get("T1", "G2") is None and slave.request_modes.get("T1", "G1") is not None
    outer.refuse[402] = ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert not await sync.sync_once() and sync.failures == 0
    assert slave.request_modes.get("T1", "G1") is not None


async def test_a_commit_during_the_offset_fetch_keeps_the_slaves_value(env: Any) -> None:
    master, slave, outer, host = env
    master.topics.update(TopicConfig("T1", 4, 4))
    master.offsets.commit_offset("c", "G", "T1", 0, 3)
    sync = new_sync(host)
    assert await sync.sync_once()
    # the consumer commits 10 on the slave while the master's (older) table is on its way
    outer.before[43] = lambda: sync.commit_offset("c", "G", "T1", 0, 10)
    await sync.sync_once()
    assert slave.offsets.query_offset("G", "T1", 0) == 10 and sync.pending_offsets() == {("G", "T1", 0): 10}
    del outer.before[43]
    await sync.sync_once()  # pushed first, then the master's table agrees
    assert master.offsets.query_offset("G", "T1", 0) == 10 and sync.pending_count == 0


async def test_a_refused_push_stops_the_offset_install_and_stays_pending(env: Any) -> None:
    master, slave, outer, host = env
    master.offsets.commit_offset("c", "G", "T1", 0, 3)
    sync = new_sync(host)
    sync.commit_offset("c", "G", "T1", 0, 7)
    outer.refuse[15] = ResponseCode.SYSTEM_ERROR
    with capture_logs() as logs:
        assert not await sync.sync_once()
        assert not await sync.push_pending()
    assert sync.failures == 2 and sync.syncs == 0
    assert [e["event"] for e in logs] == ["slave_metadata_sync_failed"]
    assert logs[0]["broker"] == "DefaultCluster:broker-a:1" and logs[0]["step"] == "sync"
    assert slave.offsets.query_offset("G", "T1", 0) == 7 and sync.pending_count == 1
    assert 43 not in outer.codes  # never fetched over a pending value the master refused


async def test_an_offset_for_a_topic_the_master_lacks_is_dropped(env: Any) -> None:
    _, _, outer, host = env
    sync = new_sync(host)
    sync.commit_offset("c", "G", "Gone", 0, 7)
    outer.refuse[15] = ResponseCode.TOPIC_NOT_EXIST
    with capture_logs() as logs:
        assert await sync.push_pending()
    assert sync.pending_count == 0 and sync.forwarded == 0
    assert [e["event"] for e in logs] == ["slave_offset_dropped"]


async def test_a_bad_table_fails_the_sync_and_keeps_what_was_installed(env: Any) -> None:
    master, slave, outer, host = env
    master.topics.update(TopicConfig("T1", 4, 4))
    outer.bodies[45] = b'{"offsetTable": {"x": 1}}'
    sync = new_sync(host)
    with capture_logs() as logs:
        assert await sync.sync_once()  # topics and consumer offsets were replaced before the bad delay table
    assert slave.topics.get("T1") is not None and not slave.topics.dirty
    assert sync.failures == 1 and sync.syncs == 0 and 201 not in outer.codes
    assert "delay_offsets" in logs[0]["error"]


async def test_master_gone_during_the_sync_installs_nothing_more(env: Any) -> None:
    master, slave, outer, host = env
    master.topics.update(TopicConfig("T1", 4, 4))

    def demoted() -> None:
        host.master = None

    outer.before[21] = demoted
    sync = new_sync(host)
    assert not await sync.sync_once()
    assert slave.topics.get("T1") is None and sync.failures == 1


async def test_no_master_no_sync_and_a_master_never_syncs(env: Any) -> None:
    _, _, outer, host = env
    sync = new_sync(host)
    host.master = None
    assert not await sync.sync_once()
    host.master, host.master_role = MASTER, True
    assert not await sync.sync_once()
    assert outer.codes == [] and sync.failures == 0


async def test_an_unchanged_commit_that_is_not_pending_is_not_forwarded(env: Any) -> None:
    master, slave, outer, host = env
    master.offsets.commit_offset("c", "G", "T1", 0, 3)
    sync = new_sync(host)
    await sync.sync_once()
    sync.commit_offset("c", "G", "T1", 0, 3)  # what the slave already has from its master
    assert sync.pending_count == 0


async def test_failure_streaks_log_once_and_recovery_once(env: Any) -> None:
    _, _, outer, host = env
    sync = new_sync(host)
    outer.down = True
    with capture_logs() as logs:
        for _ in range(3):
            assert not await sync.sync_once()
        outer.down = False
        await sync.sync_once()
        await sync.sync_once()
        outer.down = True
        await sync.sync_once()
    events = [e["event"] for e in logs]
    assert events == ["slave_metadata_sync_failed", "slave_metadata_sync_recovered", "slave_metadata_sync_failed"]
    assert sync.failures == 4 and sync.syncs == 2


# ------------------------------------------------------------------------------------------------ the loop


async def test_the_loop_pushes_commits_at_once_and_syncs_every_interval(env: Any) -> None:
    master, slave, outer, host = env
    sync = new_sync(host, interval_ms=3_600_000)
    sync.start()
    sync.start()  # idempotent
    try:
        await until(lambda: sync.syncs == 1, "the first full sync, at once")
        calls = len(outer.codes)
        sync.commit_offset("c", "G", "T1", 1, 4)
        await until(lambda: master.offsets.query_offset("G", "T1", 1) == 4, "the push")
        assert 21 not in outer.codes[calls:]  # the commit is pushed without waiting for the next full sync
    finally:
        await sync.stop()
    assert not sync.running

    fast = new_sync(host, interval_ms=10)
    master.topics.update(TopicConfig("T2", 1, 1))
    fast.start()
    try:
        await until(lambda: slave.topics.get("T2") is not None and fast.syncs >= 2, "periodic syncs")
    finally:
        await fast.stop()


async def test_the_loop_on_a_master_drops_pending_offsets(env: Any) -> None:
    _, _, outer, host = env
    outer.down = True
    sync = new_sync(host, interval_ms=10)
    sync.commit_offset("c", "G", "T1", 1, 4)
    host.master_role = True
    sync.start()
    try:
        await until(lambda: sync.pending_count == 0, "the pending set dropped")
    finally:
        await sync.stop()


# ------------------------------------------------------------------------------------------------ restarts


def test_pending_file_roundtrip_and_junk() -> None:
    pending = {("g", "t", 0): 5, ("g2", "t", 3): 0}
    assert decode_pending(encode_pending(pending)) == pending
    assert decode_pending(encode_pending({})) == {}
    for junk in (b"", b"[]", b'{"pending": {}}', b'{"pending": [{"group": "g"}]}',
                 b'{"pending": [{"group": "g", "topic": "t", "queueId": "0", "offset": 1}]}'):
        with pytest.raises(ValueError):
            decode_pending(junk)


async def test_pending_offsets_survive_a_restart_and_reach_the_master(env: Any, tmp_path: Path) -> None:
    master, slave, outer, host = env
    path = Path(slave.config_dir) / PENDING_FILE
    sync = new_sync(host)
    outer.down = True
    sync.commit_offset("c", "G", "T1", 0, 12)
    assert not await sync.push_pending()
    assert decode_pending(path.read_bytes()) == {("G", "T1", 0): 12}  # written once the push failed
    await sync.stop()

    # the slave restarts before its consumer-offset file was written: only the pending file has the commit
    restarted = make_broker(tmp_path / "slave", stream_id="slave-2")
    host2 = FakeHost(restarted, outer)
    sync2 = new_sync(host2)
    sync2.start()
    try:
        assert sync2.pending_offsets() == {("G", "T1", 0): 12}
        assert restarted.offsets.query_offset("G", "T1", 0) == 12
        outer.down = False
        await sync2.sync_once()
        assert master.offsets.query_offset("G", "T1", 0) == 12 and sync2.pending_count == 0
        assert decode_pending(path.read_bytes()) == {}  # emptied once acknowledged
    finally:
        await sync2.stop()


async def test_a_master_that_acknowledges_at_once_never_writes_the_pending_file(env: Any) -> None:
    _, slave, _, host = env
    sync = new_sync(host)
    for offset in range(3):
        sync.commit_offset("c", "G", "T1", 0, offset)
        assert await sync.push_pending()
    await sync.sync_once()
    await sync.stop()
    assert not (Path(slave.config_dir) / PENDING_FILE).exists()


async def test_forget_pending_on_promotion(env: Any) -> None:
    _, slave, outer, host = env
    outer.down = True
    sync = new_sync(host)
    sync.commit_offset("c", "G", "T1", 0, 12)
    await sync.push_pending()
    await sync.forget_pending()
    assert sync.pending_count == 0 and slave.offsets.query_offset("G", "T1", 0) == 12
    assert decode_pending((Path(slave.config_dir) / PENDING_FILE).read_bytes()) == {}
