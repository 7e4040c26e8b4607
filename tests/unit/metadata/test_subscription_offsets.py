from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokerd.metadata import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    MetadataHub,
    RecordingObserver,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from brokerd.metadata.persist import encode_json

from .helpers import make_hub

# ----- subscription groups -----


@given(st.builds(
    SubscriptionGroupConfig,
    group_name=st.from_regex(r"[%|a-zA-Z0-9_-]{1,30}", fullmatch=True),
    consume_enable=st.booleans(), retry_queue_nums=st.integers(0, 64), retry_max_times=st.integers(-1, 32),
    broker_id=st.integers(0, 8), which_broker_when_consume_slowly=st.integers(0, 8),
    attributes=st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=2),
))
def test_subscription_group_json_round_trip(cfg: SubscriptionGroupConfig) -> None:
    assert SubscriptionGroupConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_heartbeat_defaults_and_camel_case_keys() -> None:
    j = SubscriptionGroupConfig("G").to_json()
    assert {k: j[k] for k in ("groupName", "consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable",
                              "retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly",
                              "notifyConsumerIdsChangedEnable")} == {
        "groupName": "G", "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
        "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True}
    assert SubscriptionGroupConfig.from_json({"groupName": "G"}) == SubscriptionGroupConfig("G")


def test_find_or_create_auto_creates_once(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = SubscriptionGroupManager(str(tmp_path), hub)
    mgr.load()
    assert mgr.find("G") is None
    cfg = mgr.find_or_create("G")
    assert cfg == SubscriptionGroupConfig("G")
    assert mgr.find_or_create("G") is cfg
    assert [(c.kind, c.op, c.key) for c in recorder.changes] == [("subscription_group", "put", "G")]
    assert (tmp_path / "subscriptionGroup.json").exists()


def test_find_or_create_without_auto_create(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = SubscriptionGroupManager(str(tmp_path), hub, auto_create_subscription_group=False)
    mgr.load()
    assert mgr.find_or_create("G") is None
    assert mgr.find_or_create("CID_RMQ_SYS_X") is not None  # system groups are always created
    assert mgr.find_or_create("TOOLS_CONSUMER") is not None  # built in
    assert len(recorder.changes) == 1


def test_find_or_create_rejects_bad_names(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = SubscriptionGroupManager(str(tmp_path), hub)
    assert mgr.find_or_create("bad group") is None
    assert mgr.find_or_create("g" * 256) is None


def test_group_update_delete_persist_reload(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = SubscriptionGroupManager(str(tmp_path), hub)
    mgr.load()
    mgr.update(SubscriptionGroupConfig("G", retry_max_times=3, consume_broadcast_enable=False))
    mgr.update(SubscriptionGroupConfig("H"))
    assert mgr.delete("H") and not mgr.delete("H")
    assert [c.seq for c in recorder.changes] == [1, 2, 3]
    with pytest.raises(ValueError, match="retryQueueNums"):
        mgr.update(SubscriptionGroupConfig("G", retry_queue_nums=-1))
    with pytest.raises(TypeError):
        mgr.all()["X"] = SubscriptionGroupConfig("X")  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        mgr.all()["G"].retry_max_times = 1  # type: ignore[misc]
    again = SubscriptionGroupManager(str(tmp_path), make_hub())
    again.load()
    assert dict(again.all()) == dict(mgr.all())
    assert again.data_version == mgr.data_version
    assert "CID_ONS-HTTP-PROXY" in again.all()


# ----- consumer offsets -----


def test_commit_and_query(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    mgr.load()
    assert mgr.query_offset("G", "T", 0) == -1
    mgr.commit_offset("10.0.0.1", "G", "T", 0, 12)
    mgr.commit_offset("10.0.0.1", "G", "T", 1, 3)
    mgr.commit_offset("10.0.0.1", "G", "T", 0, 12)  # unchanged: no change record
    assert mgr.query_offset("G", "T", 0) == 12 and mgr.query_offset("G", "T", 2) == -1
    assert mgr.offsets_of("G", "T") == {0: 12, 1: 3}
    assert [(c.kind, c.op, c.key, c.value) for c in recorder.changes] == [
        ("consumer_offset", "put", "G@T", {0: 12}), ("consumer_offset", "put", "G@T", {1: 3})]
    copy = mgr.offsets_of("G", "T")
    copy[0] = 99
    assert mgr.query_offset("G", "T", 0) == 12


def test_commit_does_no_io_and_persist_is_a_noop_when_clean(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    mgr.load()
    assert mgr.persist() is False
    mgr.commit_offset("h", "G", "T", 0, 1)
    assert not (tmp_path / "consumerOffset.json").exists()
    assert mgr.dirty
    assert mgr.persist() is True
    assert mgr.persist() is False
    mgr.commit_offset("h", "G", "T", 0, 1)  # same value: stays clean
    assert mgr.persist() is False
    doc = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert doc["offsetTable"] == {"T@G": {"0": 1}}


def test_version_bumps_every_step_commits(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub, version_step=3)
    v0 = mgr.data_version.counter
    for i in range(7):
        mgr.commit_offset("h", "G", "T", 0, i + 1)
    assert mgr.data_version.counter == v0 + 2
    assert [c.data_version["counter"] - v0 for c in recorder.changes] == [0, 0, 1, 1, 1, 2, 2]


def test_group_topic_indexes_and_removals(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    for g, t in (("G1", "T1"), ("G1", "T2"), ("G2", "T1")):
        mgr.commit_offset("h", g, t, 0, 5)
    assert mgr.groups_of_topic("T1") == {"G1", "G2"}
    assert mgr.topics_of_group("G1") == {"T1", "T2"}
    recorder.clear()
    assert mgr.remove_offset("G1") == 2
    assert sorted((c.op, c.key, c.value) for c in recorder.changes) == [("delete", "G1@T1", None),
                                                                       ("delete", "G1@T2", None)]
    assert mgr.remove_topic("T1") == 1
    assert mgr.table() == {}
    assert mgr.remove("G9", "T9") is False


def test_names_with_separator_are_rejected(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    with pytest.raises(ValueError, match="'@'"):
        mgr.commit_offset("h", "G@x", "T", 0, 1)
    with pytest.raises(ValueError):
        mgr.commit_offsets("h", "G", "", {0: 1})


def test_commit_offsets_batch_emits_only_changed_queues(tmp_path: Path, hub: MetadataHub,
                                                       recorder: RecordingObserver) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    mgr.commit_offset("h", "G", "T", 0, 5)
    mgr.commit_offsets("h", "G", "T", {0: 5, 1: 7, 2: 9})
    mgr.commit_offsets("h", "G", "T", {1: 7})
    mgr.commit_offsets("h", "G", "U", {})
    assert [c.value for c in recorder.changes] == [{0: 5}, {1: 7, 2: 9}]
    assert "U@G" not in mgr.table()


def test_all_json_and_persist_round_trip(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    mgr.commit_offset("h", "G", "T", 3, 42)
    body = mgr.all_json()
    assert body["offsetTable"] == {"T@G": {"3": 42}}
    assert body["dataVersion"] == mgr.data_version.to_json()
    json.dumps(body)
    mgr.persist()
    again = ConsumerOffsetManager(str(tmp_path), make_hub())
    again.load()
    assert again.table() == mgr.table() and again.data_version == mgr.data_version



def test_the_offsets_file_holds_the_same_bytes_as_the_exported_document(tmp_path: Path, hub: MetadataHub) -> None:
    """The file is encoded from the table itself (no queue map rebuilt): the bytes of RocketMQ's document."""
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    for g, t, q, o in (("G", "T", 3, 42), ("G", "T", 0, 7), ("H", "%RETRY%H", 0, -1), ("G", "U", 12, 5)):
        mgr.commit_offset("h", g, t, q, o)
    mgr.persist()
    assert (tmp_path / "consumerOffset.json").read_bytes() == encode_json(mgr.export_state())


def test_loads_fastjson_file_with_unquoted_integer_keys(tmp_path: Path, hub: MetadataHub) -> None:
    (tmp_path / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"TopicTest@G1":{0:12,1:-1,2:7},\n\t\t"%RETRY%G1@G1":{0:0}\n\t}\n}')
    (tmp_path / "delayOffset.json").write_text('{"offsetTable":{1:10,2:0}}')
    mgr = ConsumerOffsetManager(str(tmp_path), hub)
    mgr.load()
    assert mgr.offsets_of("G1", "TopicTest") == {0: 12, 1: -1, 2: 7}
    assert mgr.groups_of_topic("%RETRY%G1") == {"G1"}
    delay = DelayOffsetManager(str(tmp_path), hub)
    delay.load()
    assert dict(delay.all()) == {1: 10, 2: 0}


# ----- delay offsets -----


def test_delay_offsets(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = DelayOffsetManager(str(tmp_path), hub)
    mgr.load()
    assert mgr.get(3) == 0
    mgr.update(3, 10)
    mgr.update(3, 10)
    mgr.update(1, 2)
    assert mgr.get(3) == 10
    assert [(c.kind, c.key, c.value) for c in recorder.changes] == [("delay_offset", "3", 10), ("delay_offset", "1", 2)]
    with pytest.raises(ValueError, match="delay level"):
        mgr.update(0, 1)
    with pytest.raises(TypeError):
        mgr.all()[5] = 1  # type: ignore[index]
    assert mgr.all_json()["offsetTable"] == {"3": 10, "1": 2}
    assert mgr.persist() and not mgr.persist()
    again = DelayOffsetManager(str(tmp_path), make_hub())
    again.load()
    assert dict(again.all()) == {1: 2, 3: 10} and again.data_version == mgr.data_version
