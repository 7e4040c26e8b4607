"""ConfigManager.adopt_state: a slave adopting its master's table (RocketMQ SlaveSynchronize)."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerd.metadata import RecordingObserver, SubscriptionGroupConfig, TopicConfig
from brokerd.metadata.names import RMQ_SYS_SCHEDULE_TOPIC

from .helpers import make_broker


def test_topics_adopted_over_the_built_in_ones_with_the_masters_version(tmp_path: Path) -> None:
    master = make_broker(tmp_path / "m")
    slave = make_broker(tmp_path / "s", stream_id="s")
    rec = RecordingObserver()
    slave.hub.add_observer(rec)
    master.topics.update(TopicConfig("T1", 2, 2))
    master.topics.update(TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, 3, 3))  # the master's value of a built-in wins
    doc = master.topics.export_state()
    del doc["topicConfigTable"]["SELF_TEST_TOPIC"]  # a built-in the master lacks stays on the slave
    assert slave.topics.adopt_state(doc, if_version_differs=True)
    assert slave.topics.get("T1") == TopicConfig("T1", 2, 2)
    sched = slave.topics.get(RMQ_SYS_SCHEDULE_TOPIC)
    assert sched is not None and sched.read_queue_nums == 3
    assert slave.topics.get("SELF_TEST_TOPIC") is not None
    assert slave.topics.data_version == master.topics.data_version
    assert slave.topics.dirty and rec.changes == []  # emits nothing; the caller persists
    slave.topics.persist()
    assert not slave.topics.adopt_state(doc, if_version_differs=True) and not slave.topics.dirty


def test_version_only_comparison_ignores_content_with_an_equal_version(tmp_path: Path) -> None:
    master = make_broker(tmp_path / "m")
    slave = make_broker(tmp_path / "s", stream_id="s")
    master.subscriptions.update(SubscriptionGroupConfig("G1"))
    doc = master.subscriptions.export_state()
    assert slave.subscriptions.adopt_state(doc, if_version_differs=True)
    doc["subscriptionGroupTable"]["G2"] = SubscriptionGroupConfig("G2").to_json()  # same version, new content
    assert not slave.subscriptions.adopt_state(doc, if_version_differs=True)
    assert slave.subscriptions.find("G2") is None
    assert slave.subscriptions.adopt_state(doc)  # compared by content: replaced
    assert slave.subscriptions.find("G2") is not None


def test_offsets_compared_by_content_and_replaced_wholesale(tmp_path: Path) -> None:
    master = make_broker(tmp_path / "m")
    slave = make_broker(tmp_path / "s", stream_id="s")
    master.offsets.commit_offset("c", "G", "T", 0, 5)
    slave.offsets.commit_offset("c", "Gone", "T", 0, 1)
    assert slave.offsets.adopt_state(master.offsets.export_state())
    assert slave.offsets.table() == {"T@G": {0: 5}}
    assert not slave.offsets.adopt_state(master.offsets.export_state())
    master.offsets.commit_offset("c", "G", "T", 0, 6)  # the version moves only every 500 commits
    assert master.offsets.data_version == slave.offsets.data_version
    assert slave.offsets.adopt_state(master.offsets.export_state())
    assert slave.offsets.query_offset("G", "T", 0) == 6


def test_a_malformed_document_changes_nothing(tmp_path: Path) -> None:
    slave = make_broker(tmp_path / "s")
    slave.delay_offsets.update(1, 4)
    before = slave.delay_offsets.export_state()
    for bad in ({"offsetTable": {"x": 1}}, {"offsetTable": []}, [1]):
        with pytest.raises(ValueError):
            slave.delay_offsets.adopt_state(bad)
    assert slave.delay_offsets.export_state() == before
