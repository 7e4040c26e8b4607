"""Snapshot + change replay: master mutations -> recorded changes -> a fresh slave ends with identical tables."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerd.metadata import (
    BrokerMetadata,
    MetadataChange,
    MetadataSyncGap,
    RecordingObserver,
    SubscriptionGroupConfig,
    TopicConfig,
)

from .helpers import make_broker

TOPICS = ["T0", "T1", "T2", "%RETRY%G0"]
GROUPS = ["G0", "G1", "G2"]

ops = st.one_of(
    st.tuples(st.just("topic_update"), st.sampled_from(TOPICS), st.integers(0, 16), st.sampled_from([2, 4, 6, 7])),
    st.tuples(st.just("topic_delete"), st.sampled_from(TOPICS)),
    st.tuples(st.just("auto_create"), st.sampled_from(TOPICS), st.integers(-1, 16)),
    st.tuples(st.just("send_back"), st.sampled_from(GROUPS)),
    st.tuples(st.just("group_update"), st.sampled_from(GROUPS), st.integers(0, 20)),
    st.tuples(st.just("group_find_or_create"), st.sampled_from(GROUPS)),
    st.tuples(st.just("group_delete"), st.sampled_from(GROUPS)),
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.integers(0, 3),
              st.integers(-1, 50)),
    st.tuples(st.just("commit_batch"), st.sampled_from(GROUPS), st.sampled_from(TOPICS),
              st.dictionaries(st.integers(0, 3), st.integers(0, 50), max_size=3)),
    st.tuples(st.just("remove_group_offsets"), st.sampled_from(GROUPS)),
    st.tuples(st.just("remove_topic_offsets"), st.sampled_from(TOPICS)),
    st.tuples(st.just("delay"), st.integers(1, 18), st.integers(0, 50)),
    st.tuples(st.just("state_version"), st.integers(0, 5)),
)


def run_op(bm: BrokerMetadata, op: tuple[Any, ...]) -> None:
    name, args = op[0], op[1:]
    if name == "topic_update":
        bm.topics.update(TopicConfig(args[0], args[1], args[1], args[2]))
    elif name == "topic_delete":
        bm.topics.delete(args[0])
    elif name == "auto_create":
        bm.topics.create_topic_in_send_message_method(args[0], "TBW102", "127.0.0.1:1", args[1], 0)
    elif name == "send_back":
        bm.topics.create_topic_in_send_back_method("%RETRY%" + args[0], 1, 6, 0)
    elif name == "group_update":
        bm.subscriptions.update(SubscriptionGroupConfig(args[0], retry_max_times=args[1]))
    elif name == "group_find_or_create":
        bm.subscriptions.find_or_create(args[0])
    elif name == "group_delete":
        bm.subscriptions.delete(args[0])
    elif name == "commit":
        bm.offsets.commit_offset("127.0.0.1", args[0], args[1], args[2], args[3])
    elif name == "commit_batch":
        bm.offsets.commit_offsets("127.0.0.1", args[0], args[1], args[2])
    elif name == "remove_group_offsets":
        bm.offsets.remove_offset(args[0])
    elif name == "remove_topic_offsets":
        bm.offsets.remove_topic(args[0])
    elif name == "delay":
        bm.delay_offsets.update(args[0], args[1])
    elif name == "state_version":
        bm.hub.state_version = args[0]


def state_of(bm: BrokerMetadata) -> dict[str, Any]:
    return {
        "topics": dict(bm.topics.all()), "topics_dv": bm.topics.data_version,
        "groups": dict(bm.subscriptions.all()), "groups_dv": bm.subscriptions.data_version,
        "offsets": bm.offsets.table(), "offsets_dv": bm.offsets.data_version,
        "delay": dict(bm.delay_offsets.all()), "delay_dv": bm.delay_offsets.data_version,
    }


def new_master(d: str) -> tuple[BrokerMetadata, RecordingObserver]:
    # small version steps so offset DataVersion bumps happen inside short op sequences
    bm = make_broker(d, stream_id="master-1", consumer_offset_version_step=3, delay_offset_version_step=2)
    rec = RecordingObserver()
    bm.hub.add_observer(rec)
    return bm, rec


def new_slave(d: str) -> tuple[BrokerMetadata, RecordingObserver, RecordingObserver]:
    bm = make_broker(d, stream_id="slave-1")
    local, applied = RecordingObserver(), RecordingObserver()
    bm.hub.add_observer(local)
    bm.hub.add_applied_observer(applied)
    return bm, local, applied


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(ops, max_size=25), after=st.lists(ops, max_size=25))
def test_snapshot_then_replay_gives_identical_tables(before: list[tuple[Any, ...]],
                                                     after: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as md, tempfile.TemporaryDirectory() as sd:
        master, rec = new_master(md)
        for op in before:
            run_op(master, op)
        snap = master.snapshot()
        snap_seq = master.hub.seq
        for op in after:
            run_op(master, op)
        assert [c.seq for c in rec.changes] == list(range(1, len(rec.changes) + 1))

        slave, local, applied = new_slave(sd)
        slave.apply_snapshot(snap)
        assert slave.applied_position == ("master-1", snap_seq)
        # the whole log is delivered (records before the snapshot are duplicates), over the wire, twice
        for change in rec.changes + rec.changes:
            slave.apply_change(MetadataChange.from_wire(change.to_wire()))

        assert state_of(slave) == state_of(master)
        assert slave.applied_position == ("master-1", master.hub.seq)
        assert local.changes == [] and slave.hub.seq == 0  # replay is not a local mutation
        assert [c.seq for c in applied.changes] == [c.seq for c in rec.changes if c.seq > snap_seq]

        # what the slave persisted reloads to the same state
        slave.persist_all()
        assert state_of(make_broker(sd, stream_id="slave-2")) == state_of(master)


def test_replay_rejects_gaps_foreign_streams_and_missing_bootstrap(tmp_path: Path) -> None:
    master, rec = new_master(str(tmp_path / "m"))
    for i in range(3):
        master.topics.update(TopicConfig(f"T{i}"))
    slave, _, _ = new_slave(str(tmp_path / "s"))
    with pytest.raises(MetadataSyncGap, match="no snapshot"):
        slave.apply_change(rec.changes[0])
    slave.apply_snapshot(master.snapshot())
    master.topics.update(TopicConfig("T3"))
    master.topics.update(TopicConfig("T4"))
    with pytest.raises(MetadataSyncGap, match="gap"):
        slave.apply_change(rec.changes[4])
    assert slave.apply_change(rec.changes[3]) is True
    assert slave.apply_change(rec.changes[3]) is False
    restarted = dataclasses.replace(rec.changes[4], stream="master-2", seq=1)
    with pytest.raises(MetadataSyncGap, match="stream"):
        slave.apply_change(restarted)
    assert slave.topics.get("T3") is not None and slave.topics.get("T4") is None
    assert slave.applied_position == ("master-1", 4)


def test_malformed_change_is_rejected_without_side_effects(tmp_path: Path) -> None:
    master, rec = new_master(str(tmp_path / "m"))
    slave, _, _ = new_slave(str(tmp_path / "s"))
    slave.apply_snapshot(master.snapshot())
    before = state_of(slave)
    bad = MetadataChange("consumer_offset", "put", "G@T", {0: "x"}, {"counter": 1}, 1, "master-1")
    with pytest.raises(ValueError):
        slave.apply_change(bad)
    junk: Any = "x"
    bad_dv = MetadataChange("topic", "put", "T", {"topicName": "T"}, {"counter": junk}, 1, "master-1")
    with pytest.raises(ValueError):
        slave.apply_change(bad_dv)
    assert state_of(slave) == before and slave.applied_position == ("master-1", 0)


def test_bad_snapshot_changes_nothing(tmp_path: Path) -> None:
    master, _ = new_master(str(tmp_path / "m"))
    master.topics.update(TopicConfig("M"))
    slave, _, _ = new_slave(str(tmp_path / "s"))
    slave.topics.update(TopicConfig("Local"))
    before = state_of(slave)
    doc = msgpack.unpackb(master.snapshot(), strict_map_key=False)
    doc["consumerOffsets"] = {"offsetTable": {"no-separator": {"0": 1}}}
    for data in (b"junk", msgpack.packb({"format": 99}), msgpack.packb(doc)):
        with pytest.raises(ValueError):
            slave.apply_snapshot(data)
        assert state_of(slave) == before
    assert slave.applied_position == (None, 0)


def test_snapshot_replaces_slave_tables_and_adopts_master_versions(tmp_path: Path) -> None:
    master, _ = new_master(str(tmp_path / "m"))
    master.topics.update(TopicConfig("M"))
    master.offsets.commit_offset("h", "G", "M", 0, 9)
    slave, local, _ = new_slave(str(tmp_path / "s"))
    slave.topics.update(TopicConfig("OnlyOnSlave"))
    local.clear()
    slave.apply_snapshot(master.snapshot())
    assert "OnlyOnSlave" not in slave.topics and "M" in slave.topics
    assert slave.topics.data_version == master.topics.data_version
    assert local.changes == []
    assert make_broker(str(tmp_path / "s")).offsets.query_offset("G", "M", 0) == 9  # persisted
