"""The simulated disk's crash model, and the seed that showed recovered WAL records must be made durable."""

from __future__ import annotations

import random

from controller.raft.storage import entries_record, hard_state_record
from controller.raft.types import Entry, EntryKind, HardState
from tests.sim.cluster import run_seed
from tests.sim.disk import SimDisk


class _KeepAll(random.Random):
    """A crash that keeps every record still in flight."""

    def randint(self, a: int, b: int) -> int:
        return b

    def random(self) -> float:
        return 0.0


class _LoseAll(random.Random):
    """A crash (power loss) that keeps nothing that was not durable."""

    def randint(self, a: int, b: int) -> int:
        return a

    def random(self) -> float:
        return 0.99


def _ents(first: int, last: int, term: int) -> list[Entry]:
    return [Entry(i, term, EntryKind.NOOP) for i in range(first, last + 1)]


def test_records_recovered_after_a_crash_survive_the_next_crash() -> None:
    # Seed 1492 (3 nodes, 20000 steps): n1 held entries 25..27 of term 10, crashed while writing the
    # overwrite of 25 by term 11, restarted with that write in its log (page cache only), acknowledged
    # it to the term-11 leader, then crashed again and came back with the term-10 entry: the leader's
    # heartbeat (commit = min(match 25, committed)) then committed the wrong entry 25 on n1.
    disk = SimDisk()
    disk.begin([("append", [hard_state_record(HardState(10, "n1", 24)), entries_record(_ents(1, 27, 10))])], True)
    disk.complete()
    disk.begin([("append", [hard_state_record(HardState(11, "", 24)), entries_record(_ents(25, 25, 11))])], True)
    disk.crash(_KeepAll())  # the interrupted write made it (to the page cache)
    first = disk.load()
    assert [(e.index, e.term) for e in first.entries[-1:]] == [(25, 11)]
    disk.crash(_LoseAll())  # no write since the restart: what the restart recovered is durable
    second = disk.load()
    assert [(e.index, e.term) for e in second.entries[-1:]] == [(25, 11)], "an acknowledged entry was lost"


def test_seed_1492_acknowledged_entry_recovered_from_page_cache_is_kept() -> None:
    run_seed(1492, 3, 20_000)  # failed with "n1 committed index 25 as term 10 but it was committed as term 11"
