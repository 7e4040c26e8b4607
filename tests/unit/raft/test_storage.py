"""Pure recovery rules: record replay and combining the snapshot image with the WAL."""

from __future__ import annotations

import pytest

from controller.raft.codec import CodecError, FrameDecoder, decode_message, encode_message
from controller.raft.storage import (
    StorageCorruptionError,
    entries_record,
    hard_state_record,
    recover,
    replay,
    snapshot_record,
)
from controller.raft.types import Entry, EntryKind, HardState, Message, MsgType, Snapshot


def ents(first: int, last: int, term: int) -> list[Entry]:
    return [Entry(i, term, EntryKind.NORMAL, b"%d" % i) for i in range(first, last + 1)]


def test_replay_overwrites_a_suffix_and_keeps_the_last_hard_state() -> None:
    st = replay([
        hard_state_record(HardState(1, "n1", 0)), entries_record(ents(1, 5, 1)),
        hard_state_record(HardState(2, "n2", 3)), entries_record(ents(4, 6, 2)),
    ])
    assert [(e.index, e.term) for e in st.entries] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)]
    assert st.hard_state == HardState(2, "n2", 3)


def test_replay_rejects_a_gap() -> None:
    with pytest.raises(StorageCorruptionError):
        replay([entries_record(ents(1, 2, 1)), entries_record(ents(5, 6, 1))])


def test_snapshot_marker_discards_older_entries() -> None:
    st = replay([entries_record(ents(1, 9, 1)), snapshot_record(7, 1), entries_record(ents(8, 8, 2))])
    assert st.marker == (7, 1) and [(e.index, e.term) for e in st.entries] == [(8, 2)]
    rec = recover(Snapshot(7, 1, b"img"), st)
    assert [e.index for e in rec.entries] == [8]


def test_image_newer_than_marker_keeps_wal_only_when_it_contains_the_snapshot_entry() -> None:
    # Crash after saving a received image but before logging its marker.
    matching = replay([entries_record(ents(1, 6, 1))])
    rec = recover(Snapshot(4, 1, b"img"), matching)
    assert [e.index for e in rec.entries] == [5, 6]
    divergent = replay([entries_record(ents(1, 6, 1))])
    rec = recover(Snapshot(4, 3, b"img"), divergent)
    assert rec.entries == [], "entries from a divergent history must not survive under a snapshot"
    assert rec.hard_state.commit == 4


def test_marker_without_image_is_corruption() -> None:
    with pytest.raises(StorageCorruptionError):
        recover(None, replay([snapshot_record(3, 1)]))


def test_commit_is_clamped_to_what_exists() -> None:
    rec = recover(None, replay([hard_state_record(HardState(3, "n1", 10)), entries_record(ents(1, 4, 3))]))
    assert rec.hard_state.commit == 4


def test_message_codec_round_trip_and_garbage() -> None:
    m = Message(MsgType.APP, "n1", "n2", 4, log_term=3, index=9, commit=8, entries=ents(10, 12, 4),
                ctx=b"r", snapshot=Snapshot(5, 2, b"img"), lease_tick=77)
    dec = FrameDecoder()
    wire = encode_message(m)
    objs = [o for chunk in (wire[:3], wire[3:10], wire[10:]) for o in dec.feed(chunk)]
    back = decode_message(objs[0])
    assert (back.type, back.frm, back.to, back.term, back.index, back.commit, back.ctx, back.lease_tick) == (
        MsgType.APP, "n1", "n2", 4, 9, 8, b"r", 77)
    assert back.entries == m.entries and back.snapshot == m.snapshot
    with pytest.raises(CodecError):
        decode_message([99, "a"])
    with pytest.raises(CodecError):
        FrameDecoder(max_frame_bytes=10).feed(b"\x00\x00\x01\x00" + b"x" * 300)


def test_crash_between_snapshot_image_and_marker_rewrites_the_wal() -> None:
    # Found by the simulator (seed 3738): without the rewrite, entries appended after restart
    # (from snapshot.index + 1) followed the stale WAL tail and left a gap that failed recovery later.
    stale = replay([hard_state_record(HardState(6, "n1", 21)), entries_record(ents(1, 23, 6))])
    rec = recover(Snapshot(24, 7, b"img"), stale)
    assert rec.entries == [] and rec.rewrite is not None
    after_restart = replay([*rec.rewrite, entries_record(ents(25, 26, 10))])
    again = recover(Snapshot(24, 7, b"img"), after_restart)
    assert [e.index for e in again.entries] == [25, 26] and again.rewrite is None
