"""Message request modes in the broker's metadata: the table, RocketMQ's file / 402 shape, and the RIP-81 change
records that replicate them (the same pure apply the slaves and the Spark compaction job use)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokerd.metadata import BrokerMetadata, MessageRequestMode, RecordingObserver
from brokerd.metadata.hook import KIND_MESSAGE_REQUEST_MODE
from brokerd.sync.image import docs_from_image, empty_image, fold, image_from_docs
from brokerd.sync.records import MESSAGE_REQUEST_MODE_SYNC, SYNC_TOPICS, SyncRecord


def meta(path: Path) -> BrokerMetadata:
    bm = BrokerMetadata(str(path), cluster_name="C", broker_name="b")
    bm.load()
    return bm


def test_modes_persist_and_answer_rocketmqs_shape(tmp_path: Path) -> None:
    bm = meta(tmp_path / "m")
    bm.request_modes.set(MessageRequestMode("T", "G", "POP", 2))
    bm.request_modes.set(MessageRequestMode("T", "G2"))
    assert bm.request_modes.rocketmq_json() == {"messageRequestModeMap": {"T": {
        "G": {"topic": "T", "consumerGroup": "G", "mode": "POP", "popShareQueueNum": 2},
        "G2": {"topic": "T", "consumerGroup": "G2", "mode": "PULL", "popShareQueueNum": 0}}}}
    again = meta(tmp_path / "m")
    assert again.request_modes.get("T", "G") == MessageRequestMode("T", "G", "POP", 2)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "messageRequestMode.json").write_text(json.dumps(bm.request_modes.rocketmq_json()))
    assert meta(tmp_path / "r").request_modes.get("T", "G2") == MessageRequestMode("T", "G2")  # RocketMQ's file
    with pytest.raises(ValueError):
        bm.request_modes.set(MessageRequestMode("T", "G", "PUSH"))
    with pytest.raises(ValueError):
        bm.request_modes.set(MessageRequestMode("T@x", "G", "POP"))


def test_a_mode_change_replicates_as_a_change_record(tmp_path: Path) -> None:
    master = meta(tmp_path / "master")
    seen = RecordingObserver()
    master.hub.add_observer(seen)
    master.request_modes.set(MessageRequestMode("T", "G", "POP", 1))
    assert master.request_modes.delete("T", "G") and not master.request_modes.delete("T", "G")
    master.request_modes.set(MessageRequestMode("T", "G3", "POP"))
    changes = seen.of_kind(KIND_MESSAGE_REQUEST_MODE)
    assert [c.op for c in changes] == ["put", "delete", "put"] and changes[0].key == "T@G"
    assert MESSAGE_REQUEST_MODE_SYNC in SYNC_TOPICS
    records = [SyncRecord.decode(SyncRecord(c.kind, "DELETED" if c.op == "delete" else "UPDATED", c.key, c.value,
                                            c.data_version, 1).encode()) for c in changes]
    slave = meta(tmp_path / "slave")
    for r in records:  # a slave applies them from its replicated log
        slave.apply_record(r.kind, r.op, r.key, r.value, r.data_version)
    assert dict(slave.request_modes.all()) == dict(master.request_modes.all())
    image = fold(empty_image(), records)  # the pure fold the compaction job runs
    docs = docs_from_image(image)
    assert image_from_docs(docs)[KIND_MESSAGE_REQUEST_MODE].entries == {"T@G3": records[-1].value}
    fresh = meta(tmp_path / "fresh")
    fresh.adopt_sections({**fresh.export_sections(), "messageRequestModes": docs["messageRequestModes"]})
    assert fresh.request_modes.get("T", "G3") == MessageRequestMode("T", "G3", "POP")
    with pytest.raises(ValueError):
        SyncRecord(KIND_MESSAGE_REQUEST_MODE, "UPDATED", "T@G", 5, {}, 1).validate()
