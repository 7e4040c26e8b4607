"""Epoch file (spec §4.5) and the consistent-point search of the AutoSwitch HA handshake (spec §4.4)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from brokerd.store.epoch import EpochEntry, EpochFile, EpochFileError, consistent_point, decode, encode
from brokerd.store.message_store import MessageStore
from brokerd.store.results import PutStatus

from .conftest import StoreFactory, make_msg

NL = os.linesep
E = EpochEntry


def make(tmp_path: Path, *pairs: tuple[int, int]) -> EpochFile:
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    f.load()
    for epoch, start in pairs:
        assert f.append(epoch, start)
    return f


def reopen(f: EpochFile) -> EpochFile:
    g = EpochFile(f.path)
    g.load()
    return g


# ---------------------------------------------------------------- format and round trip


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 0), (2, 4096), (5, 9000))
    g = reopen(f)
    assert g.entries() == [E(1, 0), E(2, 4096), E(5, 9000)]
    assert g.last_epoch() == 5 and g.last_entry() == E(5, 9000)
    assert g.end_offset(1) == 4096 and g.end_offset(2) == 9000 and g.end_offset(5) is None


def test_exact_file_format(tmp_path: Path) -> None:
    make(tmp_path, (1, 0), (3, 1234))
    body = f"1-0{NL}3-1234{NL}"
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    expected = f"2{NL}{crc}{NL}{body}".encode()
    assert (tmp_path / "epochFileCheckpoint").read_bytes() == expected
    assert (tmp_path / "epochFileCheckpoint.bak").read_bytes() == expected


def test_reads_a_file_written_in_the_rocketmq_format(tmp_path: Path) -> None:
    body = f"7-0{NL}8-100{NL}"
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    (tmp_path / "epochFileCheckpoint").write_bytes(f"2{NL}{crc}{NL}{body}".encode())
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    f.load()
    assert f.entries() == [E(7, 0), E(8, 100)]


def test_empty_history(tmp_path: Path) -> None:
    f = make(tmp_path)
    assert f.entries() == [] and f.last_epoch() == 0 and f.last_entry() is None
    assert f.find_epoch_at(0) is None
    assert not (tmp_path / "epochFileCheckpoint").exists()  # loading creates nothing


@pytest.mark.parametrize("bad", [
    b"", b"1\n", b"x\n0\n", b"2\n0\n1-0\n", b"1\n5\n1-0\n", b"1\n0\n1:0\n", b"+1\n0\n1-0\n",
])  # fmt: skip
def test_decode_rejects_bad_content(bad: bytes) -> None:
    with pytest.raises(ValueError):
        decode(bad)


def test_decode_rejects_out_of_order_entries_even_with_a_good_crc() -> None:
    with pytest.raises(ValueError, match="out of order"):
        decode(encode([E(2, 0), E(1, 10)]))
    with pytest.raises(ValueError, match="out of order"):
        decode(encode([E(1, 10), E(2, 10)]))


# ---------------------------------------------------------------- append rules


@pytest.mark.parametrize(("epoch", "start", "ok"), [
    (4, 200, True),    # both larger
    (3, 200, False),   # same epoch
    (2, 200, False),   # smaller epoch
    (4, 100, False),   # same start offset (spec: strictly larger)
    (4, 50, False),    # smaller start offset
])  # fmt: skip
def test_append_requires_strictly_larger_epoch_and_start(tmp_path: Path, epoch: int, start: int, ok: bool) -> None:
    f = make(tmp_path, (1, 0), (3, 100))
    assert f.append(epoch, start) is ok
    expected = [E(1, 0), E(3, 100)] + ([E(epoch, start)] if ok else [])
    assert f.entries() == expected
    assert reopen(f).entries() == expected  # a rejected append leaves the file alone too


def test_append_rejects_out_of_range_values(tmp_path: Path) -> None:
    f = make(tmp_path)
    with pytest.raises(ValueError, match="epoch"):
        f.append(-1, 0)
    with pytest.raises(ValueError, match="epoch"):
        f.append(1 << 31, 0)
    with pytest.raises(ValueError, match="start_offset"):
        f.append(1, -5)
    assert f.entries() == []


def test_find_epoch_at(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 100), (2, 500), (4, 900))
    assert f.find_epoch_at(99) is None
    assert f.find_epoch_at(100) == E(1, 100)
    assert f.find_epoch_at(499) == E(1, 100)
    assert f.find_epoch_at(500) == E(2, 500)
    assert f.find_epoch_at(900) == E(4, 900)
    assert f.find_epoch_at(10**15) == E(4, 900)  # last entry is open-ended


# ---------------------------------------------------------------- truncation


@pytest.mark.parametrize(("offset", "left"), [
    (0, []), (100, [E(1, 0)]), (101, [E(1, 0), E(2, 100)]), (500, [E(1, 0), E(2, 100), E(3, 300)]),
])  # fmt: skip
def test_truncate_suffix_by_offset(tmp_path: Path, offset: int, left: list[EpochEntry]) -> None:
    f = make(tmp_path, (1, 0), (2, 100), (3, 300))
    f.truncate_suffix_by_offset(offset)
    assert f.entries() == left
    assert reopen(f).entries() == left


@pytest.mark.parametrize(("epoch", "left"), [
    (1, []), (2, [E(1, 0)]), (3, [E(1, 0), E(2, 100)]), (9, [E(1, 0), E(2, 100), E(3, 300)]),
])  # fmt: skip
def test_truncate_suffix_by_epoch(tmp_path: Path, epoch: int, left: list[EpochEntry]) -> None:
    f = make(tmp_path, (1, 0), (2, 100), (3, 300))
    f.truncate_suffix_by_epoch(epoch)
    assert f.entries() == left
    assert reopen(f).entries() == left


def test_truncate_then_append_a_new_epoch_at_the_same_offset(tmp_path: Path) -> None:
    """Becoming master with epoch 3 after epoch 3 was half-written: truncate >= 3, append (3, max)."""
    f = make(tmp_path, (1, 0), (2, 100), (3, 300))
    f.truncate_suffix_by_epoch(3)
    assert f.append(3, 250)
    assert reopen(f).entries() == [E(1, 0), E(2, 100), E(3, 250)]


# ---------------------------------------------------------------- consistent point (spec §4.4)

A = [E(1, 0), E(2, 100), E(3, 300)]


@pytest.mark.parametrize(("local", "other", "local_max", "other_max", "point"), [
    # identical histories: the last epoch ends at each side's max offset
    (A, A, 400, 500, 400),
    (A, A, 500, 400, 400),
    # slave is behind inside an older epoch the master moved on from
    ([E(1, 0), E(2, 100)], A, 250, 500, 250),
    ([E(1, 0), E(2, 100)], A, 350, 500, 300),  # slave wrote past where the master's epoch 2 ended
    # slave has a newer epoch the master never saw: fall back to the newest shared epoch
    ([*A, E(4, 350)], A, 420, 500, 350),
    # diverged: same epoch number, different start -> keep walking back
    ([E(1, 0), E(2, 100), E(3, 320)], A, 400, 500, 300),
    ([E(1, 0), E(2, 120)], [E(1, 0), E(2, 100)], 200, 200, 100),
    # nothing in common
    ([E(1, 5)], [E(1, 0)], 50, 50, -1),
    ([E(2, 0)], [E(1, 0)], 50, 50, -1),
    # empty histories
    ([], A, 0, 500, -1),
    (A, [], 400, 0, -1),
    ([], [], 0, 0, -1),
])  # fmt: skip
def test_consistent_point(local: list[EpochEntry], other: list[EpochEntry], local_max: int, other_max: int,
                          point: int) -> None:  # fmt: skip
    assert consistent_point(local, other, local_max, other_max) == point


def test_find_consistent_point_uses_the_file_entries(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 0), (2, 100), (4, 350))
    assert f.find_consistent_point([E(1, 0), E(2, 100), E(3, 300)], 420, 500) == 300


# ---------------------------------------------------------------- corruption and crash safety


def test_corrupt_main_file_falls_back_to_backup(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 0), (2, 100))
    main = f.path.read_bytes()
    f.path.write_bytes(main.replace(b"2-100", b"2-900"))  # CRC no longer matches
    assert reopen(f).entries() == [E(1, 0), E(2, 100)]


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
def test_main_file_missing_or_empty_uses_backup(tmp_path: Path, damage: str) -> None:
    f = make(tmp_path, (1, 0), (2, 100))
    if damage == "missing":
        f.path.unlink()
    else:
        f.path.write_bytes(b"" if damage == "empty" else b"\x00\x00\x00")
    g = reopen(f)
    assert g.entries() == [E(1, 0), E(2, 100)]
    assert g.append(3, 200)  # and the next write repairs the main file
    assert decode(f.path.read_bytes()) == [E(1, 0), E(2, 100), E(3, 200)]


def test_both_corrupt_raises_an_error_naming_the_file(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 0), (2, 100))
    f.path.write_bytes(b"2\n123\n1-0\n2-100\n")
    f.backup_path.write_bytes(b"junk")
    g = EpochFile(f.path)
    with pytest.raises(EpochFileError, match="epochFileCheckpoint") as info:
        g.load()
    assert "CRC mismatch" in str(info.value) and "epochFileCheckpoint.bak" in str(info.value)
    assert f.path.read_bytes() == b"2\n123\n1-0\n2-100\n"  # nothing was overwritten


def test_corrupt_main_without_backup_raises(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 0))
    f.backup_path.unlink()
    f.path.write_bytes(b"1\n0\n1-0\n")
    with pytest.raises(EpochFileError, match="epochFileCheckpoint"):
        reopen(f)


def test_torn_temp_file_leaves_the_previous_version(tmp_path: Path) -> None:
    """A crash while writing the temp file (before the rename) must not affect what is loaded."""
    f = make(tmp_path, (1, 0), (2, 100))
    full = encode([E(1, 0), E(2, 100), E(3, 200)])
    (tmp_path / "epochFileCheckpoint.tmp").write_bytes(full[: len(full) - 3])
    (tmp_path / "epochFileCheckpoint.bak.tmp").write_bytes(full[:4])
    g = reopen(f)
    assert g.entries() == [E(1, 0), E(2, 100)]
    assert g.append(3, 200)  # a stale temp file does not block the next write
    assert reopen(g).entries() == [E(1, 0), E(2, 100), E(3, 200)]


def test_failed_write_changes_nothing(tmp_path: Path) -> None:
    f = make(tmp_path, (1, 0))
    (tmp_path / "epochFileCheckpoint.tmp").mkdir()  # the temp file cannot be created
    with pytest.raises(OSError):
        f.append(2, 100)
    assert f.entries() == [E(1, 0)]
    with pytest.raises(OSError):
        f.truncate_suffix_by_offset(0)
    assert f.entries() == [E(1, 0)]
    assert reopen(f).entries() == [E(1, 0)]


# ---------------------------------------------------------------- wired into the message store


async def put(store: MessageStore, n: int) -> list[int]:
    ends = []
    for i in range(n):
        r = await store.put_message(make_msg(body=f"m{i}".encode() * 10))
        assert r.status is PutStatus.PUT_OK
        ends.append(r.wrote_offset + r.wrote_bytes)
    return ends


async def test_store_reloads_epochs_after_restart(make_store: StoreFactory, tmp_path: Path) -> None:
    store = await make_store()
    assert store.epochs.path == tmp_path / "store" / "epochFileCheckpoint"
    assert store.epochs.append(1, 0)
    ends = await put(store, 3)
    assert store.epochs.append(2, ends[-1])
    await store.shutdown()
    store2 = await make_store()
    assert store2.epochs.entries() == [E(1, 0), E(2, ends[-1])]  # entry at exactly the log end is kept
    assert store2.epochs.find_epoch_at(ends[0]) == E(1, 0)


async def test_store_truncates_epochs_with_the_log(make_store: StoreFactory) -> None:
    store = await make_store()
    store.epochs.append(1, 0)
    ends = await put(store, 2)
    store.epochs.append(2, ends[0])
    store.epochs.append(3, ends[1])
    store.truncate_dirty_files(ends[0])
    assert store.max_phy_offset == ends[0]
    assert store.epochs.entries() == [E(1, 0)]  # epochs starting at or after the cut are gone
    await store.shutdown()
    store2 = await make_store()
    assert store2.epochs.entries() == [E(1, 0)] and store2.max_phy_offset == ends[0]


async def test_store_drops_epochs_beyond_the_recovered_log_end(make_store: StoreFactory) -> None:
    store = await make_store()
    ends = await put(store, 1)
    store.epochs.append(1, 0)
    store.epochs.append(2, ends[0] + 1000)  # points past any data the log holds
    await store.shutdown()
    store2 = await make_store()
    assert store2.epochs.entries() == [E(1, 0)]


async def test_store_start_fails_clearly_on_unreadable_epoch_files(make_store: StoreFactory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "epochFileCheckpoint").write_bytes(b"bad")
    (root / "epochFileCheckpoint.bak").write_bytes(b"bad")
    with pytest.raises(EpochFileError, match="epochFileCheckpoint"):
        await make_store()
    assert (root / "epochFileCheckpoint").read_bytes() == b"bad"
