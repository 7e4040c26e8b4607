"""WAL and snapshot store on real files: torn writes, rotation crashes, corruption."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.raft.snapshot import SnapshotStore
from controller.raft.storage import StorageCorruptionError, entries_record, hard_state_record, snapshot_record
from controller.raft.types import Entry, EntryKind, HardState, Snapshot
from controller.raft.wal import WriteAheadLog


def ents(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(i, term, EntryKind.NORMAL, b"v%d" % i) for i in range(first, last + 1)]


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("wal-*.log"))


def test_wal_survives_a_torn_tail_and_keeps_appending(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.open()
    wal.append([hard_state_record(HardState(1, "n1", 0)), entries_record(ents(1, 3))], sync=True)
    wal.append([entries_record(ents(4, 6))], sync=True)
    wal.close()
    seg = segments(tmp_path)[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as f:  # tear the last record: half of it reached the disk
        f.truncate(size - 7)
    wal = WriteAheadLog(tmp_path)
    st = wal.open()
    assert [e.index for e in st.entries] == [1, 2, 3], "the torn record is dropped, the rest kept"
    assert wal.truncated_bytes > 0
    wal.append([entries_record(ents(4, 5, 2))], sync=True)
    wal.close()
    st = WriteAheadLog(tmp_path).open()
    assert [(e.index, e.term) for e in st.entries] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]


def test_wal_ignores_garbage_after_the_last_good_record(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.open()
    wal.append([entries_record(ents(1, 2))], sync=True)
    wal.close()
    with open(segments(tmp_path)[-1], "ab") as f:
        f.write(os.urandom(100))
    assert [e.index for e in WriteAheadLog(tmp_path).open().entries] == [1, 2]


def test_bit_flip_in_a_sealed_segment_is_reported_not_hidden(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.open()
    wal.append([entries_record(ents(1, 2))], sync=True)
    first = segments(tmp_path)[0]
    wal.rotate([hard_state_record(HardState(1, "", 0)), entries_record(ents(1, 2))])
    wal.close()
    # Recreate an older sealed segment with a flipped byte (as if a crash left it behind).
    data = bytearray(segments(tmp_path)[0].read_bytes())
    data[10] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(StorageCorruptionError):
        WriteAheadLog(tmp_path).open()


def test_rotation_is_atomic_and_drops_older_segments(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.open()
    wal.append([entries_record(ents(1, 10))], sync=True)
    (tmp_path / "wal-0000000000000009.log.tmp").write_bytes(b"half-written rotation")
    wal.rotate([snapshot_record(8, 1), hard_state_record(HardState(1, "n1", 8)), entries_record(ents(9, 10))])
    wal.append([entries_record(ents(11, 11))], sync=True)
    wal.close()
    assert len(segments(tmp_path)) == 1
    st = WriteAheadLog(tmp_path).open()
    assert st.marker == (8, 1) and [e.index for e in st.entries] == [9, 10, 11]
    assert not list(tmp_path.glob("*.tmp"))


def test_snapshot_store_keeps_the_newest_image_and_detects_damage(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    assert store.load() is None
    store.save(Snapshot(5, 1, b"five"))
    store.save(Snapshot(9, 2, b"nine"))
    (tmp_path / "snap-00000000000000000011-00000000000000000002.snap.tmp").write_bytes(b"partial")
    assert store.load() == Snapshot(9, 2, b"nine")
    assert len(list(tmp_path.glob("snap-*.snap"))) == 1
    img = next(tmp_path.glob("snap-*.snap"))
    raw = bytearray(img.read_bytes())
    raw[-1] ^= 1
    img.write_bytes(bytes(raw))
    with pytest.raises(StorageCorruptionError):
        store.load()
