"""The groups page of a broker with many committed queues is built a slice per loop turn (it is polled every 2 s
while open), and lists the same rows as the figures."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from container.dashboard import figures
from container.dashboard.server import GROUP_ROWS_PER_TURN, Dashboard
from tests.unit.dashboard.fakes import Directory, FakeBroker, Slot, Store, Topic

IDENT = "DefaultCluster:b:0"


class TurnCountingStore(Store):
    """Notes the loop turn of every max offset asked."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.turn = 0
        self.seen_turns: set[int] = set()

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self.seen_turns.add(self.turn)
        return super().max_offset_in_queue(topic, queue_id)


async def test_the_groups_page_gives_the_loop_turns_and_lists_the_figures_rows() -> None:
    groups = 3 * GROUP_ROWS_PER_TURN
    b = FakeBroker("b", topics={"T": Topic(2, 2)}, queues={("T", 0): (0, 50), ("T", 1): (0, 9)},
                   offsets={f"T@G{i:04d}": {0: i % 60, 1: 3} for i in range(groups)})
    store = TurnCountingStore(b.store.queues)
    b.store = store
    app = web.Application()
    Dashboard(Directory({IDENT: Slot(b)})).install(app)  # type: ignore[arg-type]

    async def count_turns() -> None:
        while True:
            store.turn += 1
            await asyncio.sleep(0)  # sleep-ok: counting loop turns

    async with TestClient(TestServer(app)) as client:
        ticker = asyncio.create_task(count_turns())
        try:
            resp = await client.get("/api/groups")
            body = await resp.json()
        finally:
            ticker.cancel()
    assert resp.status == 200 and resp.content_type == "application/json"
    [page] = body["brokers"]
    assert page["rows"] == figures.group_rows(b)  # type: ignore[arg-type]
    assert len(page["rows"]) == groups and page["rows"][1]["lag"] == 50 - 1 + 9 - 3
    assert len(store.seen_turns) >= 3  # built over several turns, not in one
