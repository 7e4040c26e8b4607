from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokerd.metadata import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    MetadataHub,
    RecordingObserver,
    TopicConfig,
    TopicConfigManager,
)

from .helpers import make_hub


def make_mgr(tmp_path: Path, hub: MetadataHub, **kw: object) -> TopicConfigManager:
    mgr = TopicConfigManager(str(tmp_path), hub, cluster_name="DefaultCluster", broker_name="broker-a", **kw)  # type: ignore[arg-type]
    mgr.load()
    return mgr


topic_names = st.from_regex(r"[%|a-zA-Z0-9_-]{1,40}", fullmatch=True)
topic_configs = st.builds(
    TopicConfig,
    topic_name=topic_names,
    read_queue_nums=st.integers(0, 1024),
    write_queue_nums=st.integers(0, 1024),
    perm=st.integers(0, 15),
    topic_filter_type=st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
    topic_sys_flag=st.integers(0, 3),
    order=st.booleans(),
    attributes=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10), max_size=3),
)


# ----- TopicConfig -----


@given(topic_configs)
def test_topic_config_json_round_trip(tc: TopicConfig) -> None:
    assert TopicConfig.from_json(tc.to_json()) == tc
    assert TopicConfig.from_json(json.loads(json.dumps(tc.to_json()))) == tc
    assert hash(TopicConfig.from_json(tc.to_json())) == hash(tc)


def test_topic_config_json_matches_rocketmq_shape() -> None:
    assert TopicConfig("T", 8, 8).to_json() == {
        "attributes": {}, "order": False, "perm": 6, "readQueueNums": 8, "topicFilterType": "SINGLE_TAG",
        "topicName": "T", "topicSysFlag": 0, "writeQueueNums": 8,
    }


def test_topic_config_from_json_defaults_and_coercion() -> None:
    tc = TopicConfig.from_json({"topicName": "T"})
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_filter_type) == (16, 16, 6, "SINGLE_TAG")
    tc = TopicConfig.from_json({"topicName": "T", "readQueueNums": "4", "order": "true", "unknownKey": 1})
    assert tc.read_queue_nums == 4 and tc.order is True
    with pytest.raises(ValueError, match=r"topicConfig\[T\]\.perm"):
        TopicConfig.from_json({"topicName": "T", "perm": "rw"})


def test_topic_config_is_immutable() -> None:
    tc = TopicConfig("T", attributes={"+message.type": "NORMAL"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        tc.perm = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        tc.attributes["x"] = "y"  # type: ignore[index]


def test_topic_config_attributes_are_copied_from_the_callers_dict() -> None:
    attrs = {"a": "1"}
    tc = TopicConfig("T", attributes=attrs)
    attrs["a"] = "2"
    assert tc.attributes["a"] == "1"


@pytest.mark.parametrize(
    ("change", "field"),
    [({"topic_name": "bad name"}, "topicName"), ({"read_queue_nums": -1}, "readQueueNums"),
     ({"perm": 16}, "perm"), ({"topic_filter_type": "SQL"}, "topicFilterType")],
)
def test_update_rejects_bad_configs_naming_the_field(tmp_path: Path, hub: MetadataHub,
                                                     recorder: RecordingObserver, change: dict[str, object],
                                                     field: str) -> None:
    mgr = make_mgr(tmp_path, hub)
    with pytest.raises(ValueError, match=field):
        mgr.update(dataclasses.replace(TopicConfig("T"), **change))  # type: ignore[arg-type]
    assert recorder.changes == [] and mgr.get("T") is None


# ----- system topics -----


def test_system_topics_created_on_first_load(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    t = mgr.all()
    assert (t["TBW102"].perm, t["TBW102"].read_queue_nums, t["TBW102"].write_queue_nums) == (7, 8, 8)
    assert t["SCHEDULE_TOPIC_XXXX"].write_queue_nums == 18
    assert t["SELF_TEST_TOPIC"].write_queue_nums == 1
    assert t["BenchmarkTest"].write_queue_nums == 1024
    assert t["DefaultCluster"].perm == PERM_INHERIT | PERM_READ | PERM_WRITE
    assert (t["broker-a"].perm, t["broker-a"].write_queue_nums) == (7, 1)
    for name in ("OFFSET_MOVED_EVENT", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                 "DefaultCluster_REPLY_TOPIC", "rmq_sys_REVIVE_LOG_DefaultCluster"):
        assert name in t
    assert mgr.is_system_topic("broker-a") and mgr.is_system_topic("TBW102") and not mgr.is_system_topic("T")


def test_tbw102_absent_without_auto_create_and_cluster_topic_perm_follows_flag(tmp_path: Path,
                                                                              hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub, auto_create_topic_enable=False, cluster_topic_enable=False,
                   default_topic_queue_nums=4)
    assert "TBW102" not in mgr
    assert mgr.all()["DefaultCluster"].perm == PERM_INHERIT


def test_constructor_validates_its_settings(hub: MetadataHub, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="defaultTopicQueueNums"):
        TopicConfigManager(str(tmp_path), hub, cluster_name="C", broker_name="b", default_topic_queue_nums=0)
    with pytest.raises(ValueError, match="brokerName"):
        TopicConfigManager(str(tmp_path), hub, cluster_name="C", broker_name="")


# ----- mutations emit exactly once -----


def test_update_and_delete_emit_one_change_each_with_increasing_seq(tmp_path: Path, hub: MetadataHub,
                                                                    recorder: RecordingObserver) -> None:
    mgr = make_mgr(tmp_path, hub)
    v0 = mgr.data_version
    mgr.update(TopicConfig("T", 4, 4))
    mgr.update(TopicConfig("T", 8, 8, order=True))
    assert mgr.delete("T") is True
    assert mgr.delete("T") is False
    assert [(c.op, c.key, c.seq) for c in recorder.changes] == [("put", "T", 1), ("put", "T", 2), ("delete", "T", 3)]
    assert recorder.changes[1].value == TopicConfig("T", 8, 8, order=True).to_json()
    assert recorder.changes[2].value is None
    counters = [c.data_version["counter"] for c in recorder.changes]
    assert counters == [v0.counter + 1, v0.counter + 2, v0.counter + 3]
    assert recorder.changes[-1].data_version == mgr.data_version.to_json()


def test_state_version_from_hub_is_stamped(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    hub.state_version = 42
    mgr.update(TopicConfig("T"))
    assert mgr.data_version.state_version == 42


def test_table_and_version_are_read_only(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    with pytest.raises(TypeError):
        mgr.all()["X"] = TopicConfig("X")  # type: ignore[index]
    with pytest.raises(TypeError):
        del mgr.all()["TBW102"]  # type: ignore[attr-defined]
    dv = mgr.data_version
    dv.next_version()
    assert mgr.data_version != dv
    view = mgr.all()
    mgr.update(TopicConfig("Live"))
    assert "Live" in view  # a live read-only view, not a stale copy


# ----- auto-create on send (spec §2.3 step 4) -----


def test_auto_create_from_tbw102(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = make_mgr(tmp_path, hub)
    v0 = mgr.data_version.counter
    tc = mgr.create_topic_in_send_message_method("NewTopic", "TBW102", "10.0.0.1:5555", 4, 0)
    assert tc == TopicConfig("NewTopic", 4, 4, PERM_READ | PERM_WRITE)
    assert mgr.data_version.counter == v0 + 1
    assert mgr.get("NewTopic") == tc
    assert [c.key for c in recorder.changes] == ["NewTopic"]
    # second call: the existing config, no new change
    assert mgr.create_topic_in_send_message_method("NewTopic", "TBW102", "x", 2, 0) is tc
    assert len(recorder.changes) == 1


def test_auto_create_queue_count_capped_by_template(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    tc = mgr.create_topic_in_send_message_method("Big", "TBW102", "x", 64, 1)
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.topic_sys_flag) == (8, 8, 1)
    tc = mgr.create_topic_in_send_message_method("Neg", "TBW102", "x", -3, 0)
    assert tc is not None and tc.write_queue_nums == 0


def test_auto_create_inherits_perm_minus_inherit_and_filter_type(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    mgr.update(TopicConfig("TPL", 3, 5, PERM_INHERIT | PERM_READ, "MULTI_TAG"))
    tc = mgr.create_topic_in_send_message_method("Child", "TPL", "x", 4, 0)
    assert tc == TopicConfig("Child", 4, 4, PERM_READ, "MULTI_TAG")


def test_auto_create_refused_cases(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = make_mgr(tmp_path, hub)
    mgr.update(TopicConfig("NoInherit", perm=PERM_READ | PERM_WRITE))
    recorder.clear()
    assert mgr.create_topic_in_send_message_method("A", "Missing", "x", 4, 0) is None
    assert mgr.create_topic_in_send_message_method("A", "NoInherit", "x", 4, 0) is None
    assert mgr.create_topic_in_send_message_method("bad name", "TBW102", "x", 4, 0) is None
    assert recorder.changes == [] and "A" not in mgr


def test_tbw102_left_in_file_is_not_a_template_when_auto_create_is_off(tmp_path: Path) -> None:
    on = make_mgr(tmp_path, make_hub())
    on.persist(force=True)
    off = make_mgr(tmp_path, make_hub(), auto_create_topic_enable=False)
    assert "TBW102" in off  # kept from the file, as RocketMQ does
    assert off.create_topic_in_send_message_method("A", "TBW102", "x", 4, 0) is None


def test_send_back_creation_is_idempotent(tmp_path: Path, hub: MetadataHub, recorder: RecordingObserver) -> None:
    mgr = make_mgr(tmp_path, hub)
    tc = mgr.create_topic_in_send_back_method("%RETRY%G", 1, PERM_READ | PERM_WRITE, 0)
    assert tc == TopicConfig("%RETRY%G", 1, 1, 6)
    again = mgr.create_topic_in_send_back_method("%RETRY%G", 3, PERM_READ, 0)
    assert again is tc
    assert len(recorder.changes) == 1
    assert mgr.create_topic_if_absent(TopicConfig("%RETRY%G", 9, 9)) is tc


# ----- registration body and persistence -----


def test_register_wrapper_all_or_selected(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    mgr.update(TopicConfig("T", 2, 2))
    full = mgr.register_wrapper()
    assert set(full["topicConfigTable"]) == set(mgr.all())
    assert full["dataVersion"] == mgr.data_version.to_json()
    inc = mgr.register_wrapper(["T", "unknown"])
    assert inc["topicConfigTable"] == {"T": TopicConfig("T", 2, 2).to_json()}
    json.dumps(full)  # JSON-able as is


def test_persist_and_reload_round_trip(tmp_path: Path, hub: MetadataHub) -> None:
    mgr = make_mgr(tmp_path, hub)
    mgr.update(TopicConfig("T", 3, 5, 6, "MULTI_TAG", 2, True, {"+k": "v"}))
    doc = json.loads((tmp_path / "topics.json").read_text())
    assert set(doc) == {"dataVersion", "topicConfigTable"}
    assert doc["topicConfigTable"]["T"]["writeQueueNums"] == 5
    again = make_mgr(tmp_path, make_hub())
    assert dict(again.all()) == dict(mgr.all())
    assert again.data_version == mgr.data_version
    assert again.dirty is False and again.persist() is False


def test_loads_a_rocketmq_written_file(tmp_path: Path, hub: MetadataHub) -> None:
    (tmp_path / "topics.json").write_text(json.dumps({
        "dataVersion": {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000},
        "topicConfigTable": {
            "TopicTest": {"order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
                          "topicName": "TopicTest", "topicSysFlag": 0, "writeQueueNums": 4,
                          "topicMessageType": "NORMAL"},
            "TBW102": {"perm": 7, "readQueueNums": 4, "topicName": "TBW102", "writeQueueNums": 4},
        },
    }))
    mgr = make_mgr(tmp_path, hub)
    assert mgr.get("TopicTest") == TopicConfig("TopicTest", 4, 4)
    assert mgr.get("TBW102") == TopicConfig("TBW102", 4, 4, 7)  # the file wins over the built-in default
    assert "SCHEDULE_TOPIC_XXXX" in mgr  # system topics missing from the file are added
    assert mgr.data_version.counter == 7
