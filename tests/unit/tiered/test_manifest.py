"""The tier's manifest logic, pure: chunk planning never passes the confirm offset nor a segment, the chain is
fenced by epoch, and a new master resumes only a tier that agrees with its log."""

from __future__ import annotations

import pytest

from brokerd.tiered.manifest import Chunk, Fenced, Manifest, plan_chunk, verify_against_log

SEG = 1000


def test_a_chunk_never_passes_the_confirm_offset_nor_a_segment_end() -> None:
    assert plan_chunk(0, 150, SEG, 200) == 0  # less than a chunk confirmed: wait
    assert plan_chunk(0, 250, SEG, 200) == 200  # a chunk's worth: cut (at the last record below it)
    assert plan_chunk(900, 1000, SEG, 200) == 1000  # the segment's rest, all confirmed: up to its end
    assert plan_chunk(900, 999, SEG, 200) == 0  # the segment is not sealed/confirmed to its end yet
    assert plan_chunk(1000, 5000, SEG, 200) == 1200  # backlog: one chunk at a time
    for upl in range(0, 3000, 70):
        for conf in range(upl, 3200, 90):
            limit = plan_chunk(upl, conf, SEG, 200)
            assert limit == 0 or (upl < limit <= conf and limit <= upl - upl % SEG + SEG)


def test_the_chain_is_fenced_by_epoch_and_round_trips() -> None:
    m = Manifest().claimed(3, 1, [(1, 0), (3, 500)], 1).appended(Chunk(0, 400, 7, 11), 3, [(1, 0), (3, 500)], 2)
    assert Manifest.decode(m.encode()) == m and m.version == 2 and m.end == 400
    with pytest.raises(Fenced):
        m.appended(Chunk(400, 600, 1, 1), 2, [], 3)  # a deposed master (lower epoch) cannot extend it
    with pytest.raises(Fenced):
        m.claimed(2, 0, [], 3)
    with pytest.raises(ValueError):
        m.appended(Chunk(500, 600, 1, 1), 3, [], 3)  # a gap
    assert m.chunk_at(399) == Chunk(0, 400, 7, 11) and m.chunk_at(400) is None


def test_a_new_master_resumes_only_a_tier_its_log_agrees_with() -> None:
    m = Manifest().claimed(2, 0, [(1, 0), (2, 300)], 1).appended(Chunk(0, 500, 0, 0), 2, [(1, 0), (2, 300)], 2)
    assert verify_against_log(m, [(1, 0), (2, 300), (4, 900)], 0, 1000, 0) is None
    assert verify_against_log(m, [(1, 0), (2, 300), (4, 900)], 0, 1000, None) is None  # bytes gone locally
    assert "beyond" in (verify_against_log(m, [(1, 0), (2, 300)], 0, 400, None) or "")
    assert "epoch" in (verify_against_log(m, [(1, 0), (3, 300)], 0, 1000, 0) or "")
    assert "differs" in (verify_against_log(m, [(1, 0), (2, 300)], 0, 1000, 12345) or "")
