"""Exactly-once revive through the commit log: a revive batch cut anywhere (a crash, a failover to a slave that
holds a prefix of the log) is closed at the next start and only its missing deliveries are made."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerd.message import decode_records
from brokerd.pop.popping import PopRequest
from brokerd.store.message_store import MessageStore
from tests.unit.pop.conftest import HarnessFactory, PopHarness, msg
from tests.unit.store.conftest import crash

G, T = "G", "T"
RETRY = f"%RETRY%{G}_{T}"


def committed(h: PopHarness, group: str, topic: str, qid: int) -> int:
    """The group's consumer offset once the moved commit points are stored (they are at the loop's next turn)."""
    h.svc.core.commit_offsets()
    return h.broker.meta.offsets.query_offset(group, topic, qid)


def record_ends(store: MessageStore, start: int) -> list[int]:
    ends, phys = [], start
    seg = store.cfg.mapped_file_size_commit_log
    while phys < store.max_phy_offset:
        size = store.commit_log.record_size_at(phys)
        if size <= 0:
            phys = (phys // seg + 1) * seg
            continue
        phys += size
        ends.append(phys)
    return ends


async def popped_and_due(h: PopHarness, n: int, acked: int) -> int:
    h.topic(T)
    h.send(T, n)
    h.svc.activate()
    out = h.svc.pop(PopRequest(G, T, 0, 32, 1000, False))
    assert out.found == n
    for o in range(acked):
        assert h.svc.ack((G, T, 0), 0, out.pop_time, False, [o]).code == 0
    h.end_turn()
    h.now += 1000
    return h.store.max_phy_offset


def retry_bodies(h: PopHarness) -> list[bytes]:
    r = h.store.get_message(RETRY, 0, 0, 1000)
    return sorted(m.body for b in r.buffers for m in decode_records(bytes(b)))


@pytest.mark.parametrize("delivered", [0, 1, 6, 11])
async def test_a_cut_revive_batch_is_completed_exactly_once(harness: HarnessFactory, tmp_path: Path,
                                                            delivered: int) -> None:
    h = await harness(tmp_path / "b")
    start = await popped_and_due(h, 12, acked=1)
    h.svc.reviver.run(h.now)
    ends = record_ends(h.store, start)
    full = retry_bodies(h)
    assert full == sorted(f"m{i}".encode() for i in range(1, 12))
    # keep BEGIN (after the retry topic's creation record) and `delivered` deliveries: the rest is lost
    begin_at = next(i for i, p in enumerate([start, *ends[:-1]]) if _is_begin(h, p))
    h.store.truncate_dirty_files(ends[begin_at + delivered])
    assert len(retry_bodies(h)) == delivered
    await crash(h.store)
    again = await harness(tmp_path / "b")  # the same store directory, recovered
    again.now = h.now
    again.svc.activate()
    assert again.svc.reviver.run(again.now)
    assert retry_bodies(again) == full  # every un-acked message once: none lost, none twice
    assert not again.svc.state.cks
    again.svc.deactivate()
    again.svc.activate()  # and a later rebuild agrees
    assert not again.svc.state.cks


def _is_begin(h: PopHarness, phys: int) -> bool:
    raw = h.store.look_message_by_offset(phys)
    if raw is None:
        return False
    m = decode_records(raw)[0]
    return m.topic.startswith("rmq_sys_REVIVE_LOG_") and m.properties.get("TAGS") == "BEGIN"


async def test_a_new_master_revives_what_its_log_holds(harness: HarnessFactory, tmp_path: Path) -> None:
    """A slave holds the master's log (here: the same store); it serves no POP, then is promoted and revives."""
    h = await harness(tmp_path / "b")
    await popped_and_due(h, 5, acked=2)
    h.broker.master = False
    h.svc.on_role()
    assert not h.svc.active and not h.svc.state.cks
    assert h.svc.reviver.run(h.now) and retry_bodies(h) == []  # a slave revives nothing
    h.broker.master = True
    h.svc.on_role()
    assert h.svc.active and len(h.svc.state.cks) == 1
    h.svc.reviver.run(h.now)
    assert retry_bodies(h) == [b"m2", b"m3", b"m4"]


async def test_acks_survive_a_crash(harness: HarnessFactory, tmp_path: Path) -> None:
    h = await harness(tmp_path / "b")
    await popped_and_due(h, 6, acked=4)
    await crash(h.store)
    again = await harness(tmp_path / "b")
    again.now = h.now
    again.svc.activate()
    again.svc.reviver.run(again.now)
    assert retry_bodies(again) == [b"m4", b"m5"]
    assert committed(again, G, T, 0) == 6



@pytest.mark.parametrize("delivered", [0, 3])
async def test_a_record_written_after_a_cut_batch_is_not_taken_for_one_of_its_deliveries(
        harness: HarnessFactory, tmp_path: Path, delivered: int) -> None:
    """After a crash, something else may be appended before POP closes the cut batch (another service, a send):
    only the records matching the batch's digests, in order, count as its deliveries."""
    h = await harness(tmp_path / "b")
    start = await popped_and_due(h, 8, acked=0)
    h.svc.reviver.run(h.now)
    ends = record_ends(h.store, start)
    begin_at = next(i for i, p in enumerate([start, *ends[:-1]]) if _is_begin(h, p))
    h.store.truncate_dirty_files(ends[begin_at + delivered])
    foreign = msg(RETRY, f"m{delivered}".encode())  # the next delivery's body, sent by someone else
    assert h.store.append_message(foreign).ok
    await crash(h.store)
    again = await harness(tmp_path / "b")
    again.now = h.now
    again.svc.activate()
    assert again.svc.reviver.run(again.now)
    bodies = retry_bodies(again)
    assert bodies == sorted([*(f"m{i}".encode() for i in range(8)), f"m{delivered}".encode()])  # + the foreign one
    assert not again.svc.state.cks


async def test_revived_copies_carry_nothing_of_their_batch(harness: HarnessFactory, tmp_path: Path) -> None:
    h = await harness(tmp_path / "b")
    await popped_and_due(h, 3, acked=0)
    h.svc.reviver.run(h.now)
    r = h.store.get_message(RETRY, 0, 0, 10)
    props = [m.properties for b in r.buffers for m in decode_records(bytes(b))]
    assert len(props) == 3 and all("__BATCH" not in p and "1ST_POP_TIME" in p for p in props)
