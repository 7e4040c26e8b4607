from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from brokerd.metadata import MetadataLoadError, TopicConfig, atomic_write
from brokerd.metadata import persist as persist_mod

from .helpers import make_broker


def _crash_on_final_rename(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """Simulate a crash between writing the temp file and renaming it over `target`."""
    real_replace: Callable[..., None] = os.replace

    def replace(src: str, dst: str) -> None:
        if str(dst) == str(target) and str(src).endswith(".tmp"):
            raise OSError("simulated crash before rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def test_atomic_write_keeps_previous_version_as_bak(tmp_path: Path) -> None:
    p = tmp_path / "f.json"
    atomic_write(str(p), b'{"v":1}')
    assert not (tmp_path / "f.json.bak").exists()
    atomic_write(str(p), b'{"v":2}')
    atomic_write(str(p), b'{"v":3}')
    assert p.read_bytes() == b'{"v":3}'
    assert (tmp_path / "f.json.bak").read_bytes() == b'{"v":2}'
    assert sorted(os.listdir(tmp_path)) == ["f.json", "f.json.bak"]


def test_crash_between_temp_write_and_rename_leaves_old_file_intact(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bm = make_broker(tmp_path)
    bm.topics.update(TopicConfig("Old", 2, 2))
    before = (tmp_path / "topics.json").read_bytes()
    _crash_on_final_rename(monkeypatch, tmp_path / "topics.json")
    with pytest.raises(OSError, match="simulated crash"):
        bm.topics.persist(force=True)
    bm.topics.update(TopicConfig("New", 2, 2))  # auto-persist fails too; logged, left dirty
    assert bm.topics.dirty
    monkeypatch.undo()
    assert (tmp_path / "topics.json").read_bytes() == before
    assert (tmp_path / "topics.json.tmp").exists()  # the half-finished write is left behind, harmless
    after_crash = make_broker(tmp_path)  # "restart"
    assert after_crash.topics.get("Old") == TopicConfig("Old", 2, 2)
    assert after_crash.topics.get("New") is None
    # the original (still running) broker retries on its next periodic persist
    assert bm.persist_all() == 1
    assert make_broker(tmp_path).topics.get("New") == TopicConfig("New", 2, 2)


@pytest.mark.parametrize("garbage", [b"", b"   ", b'{"topicConfigTable": {"T": {"top', b"[1,2]",
                                     b'{"topicConfigTable": {"T": {"perm": "rw"}}}'])
def test_corrupt_main_file_falls_back_to_bak(tmp_path: Path, garbage: bytes) -> None:
    bm = make_broker(tmp_path)
    bm.topics.update(TopicConfig("A"))
    bm.topics.update(TopicConfig("B"))  # topics.json has A and B, .bak has only A
    (tmp_path / "topics.json").write_bytes(garbage)
    again = make_broker(tmp_path)
    assert "A" in again.topics and "B" not in again.topics
    assert (tmp_path / "topics.json.corrupt").read_bytes() == garbage  # kept for inspection, not lost
    # the next write must not rotate the corrupt file over the good backup
    again.topics.update(TopicConfig("C"))
    bak = json.loads((tmp_path / "topics.json.bak").read_text())
    assert "A" in bak["topicConfigTable"]


def test_both_files_corrupt_fails_naming_the_file(tmp_path: Path) -> None:
    bm = make_broker(tmp_path)
    bm.topics.update(TopicConfig("A"))
    bm.topics.update(TopicConfig("B"))
    (tmp_path / "topics.json").write_bytes(b"{broken")
    (tmp_path / "topics.json.bak").write_bytes(b"also broken")
    with pytest.raises(MetadataLoadError, match="topics.json"):
        make_broker(tmp_path)
    assert (tmp_path / "topics.json").read_bytes() == b"{broken"  # nothing was overwritten


def test_corrupt_file_without_backup_is_an_error_not_an_empty_start(tmp_path: Path) -> None:
    (tmp_path / "consumerOffset.json").write_bytes(b'{"offsetTable": {"T@G": {"0": "x"}}}')
    with pytest.raises(MetadataLoadError, match="consumerOffset.json"):
        make_broker(tmp_path)
    (tmp_path / "consumerOffset.json").unlink()
    (tmp_path / "subscriptionGroup.json").write_bytes(b"")
    with pytest.raises(MetadataLoadError, match="subscriptionGroup.json"):
        make_broker(tmp_path)


def test_missing_main_with_bak_loads_bak(tmp_path: Path) -> None:
    bm = make_broker(tmp_path)
    bm.offsets.commit_offset("h", "G", "T", 0, 5)
    bm.persist_all()
    bm.offsets.commit_offset("h", "G", "T", 0, 6)
    bm.persist_all()
    (tmp_path / "consumerOffset.json").unlink()
    assert make_broker(tmp_path).offsets.query_offset("G", "T", 0) == 5


def test_fresh_directory_starts_empty_and_persist_all_writes_dirty_files_only(tmp_path: Path) -> None:
    bm = make_broker(tmp_path / "cfg")
    assert bm.persist_all() == 0
    bm.delay_offsets.update(1, 5)
    assert bm.persist_all() == 1
    assert bm.persist_all(force=True) == 5
    assert sorted(p for p in os.listdir(tmp_path / "cfg") if not p.endswith(".bak")) == [
        "consumerOffset.json", "delayOffset.json", "messageRequestMode.json", "subscriptionGroup.json", "topics.json"]


def test_prepare_persist_job_runs_off_loop_and_redirties_on_failure(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bm = make_broker(tmp_path)
    bm.offsets.commit_offset("h", "G", "T", 0, 5)
    jobs = bm.prepare_persist_all()
    assert [os.path.basename(j.path) for j in jobs] == ["consumerOffset.json"]
    assert not bm.offsets.dirty
    bm.offsets.commit_offset("h", "G", "T", 0, 6)  # mutation after encoding: stays dirty
    jobs[0].run()
    assert bm.offsets.dirty
    assert json.loads((tmp_path / "consumerOffset.json").read_text())["offsetTable"] == {"T@G": {"0": 5}}
    job = bm.offsets.prepare_persist()
    assert job is not None

    def fail(path: str, data: bytes, *, keep_backup: bool = True) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(persist_mod, "atomic_write", fail)
    with pytest.raises(OSError, match="disk full"):
        job.run()
    assert bm.offsets.dirty


def test_an_older_job_never_overwrites_a_newer_one(tmp_path: Path) -> None:
    bm = make_broker(tmp_path)
    bm.offsets.commit_offset("h", "G", "T", 0, 1)
    old = bm.offsets.prepare_persist()
    bm.offsets.commit_offset("h", "G", "T", 0, 2)
    new = bm.offsets.prepare_persist()
    assert old is not None and new is not None
    new.run()
    old.run()  # e.g. a slow background write finishing after a synchronous shutdown persist
    doc = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert doc["offsetTable"] == {"T@G": {"0": 2}}
