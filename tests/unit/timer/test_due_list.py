"""The firing's staged timers (``firing.DueList``): taken in due order whatever order they were pushed in (mostly in
order, some late timers and refused batches out of it), against a heap."""

from __future__ import annotations

import heapq
import random

from brokerd.timer.firing import DueList, Pending


def test_staged_timers_come_out_in_due_order() -> None:
    rnd = random.Random(3)
    due_list, heap = DueList(), list[Pending]()
    clock, qoff = 1_000, 0
    for _ in range(20_000):
        if rnd.random() < 0.55:
            clock += rnd.randrange(3)
            due = clock if rnd.random() < 0.9 else clock - rnd.randrange(500)  # a late timer, or a batch put back
            item: Pending = (due, qoff, 0, False, b"")
            qoff += 1
            due_list.push(item)
            heapq.heappush(heap, item)
        elif heap:
            assert due_list.first() == heap[0]
            assert due_list.pop() == heapq.heappop(heap)
        assert len(due_list) == len(heap) and bool(due_list) == bool(heap)
    assert [due_list.pop() for _ in range(len(heap))] == [heapq.heappop(heap) for _ in range(len(heap))]
    due_list.clear()
    assert not due_list
