"""The pages and scrape lines that grow with a broker's tables (the groups and topics pages, polled every 2 s while
open; the lag and topic-offset lines of every scrape) are built in loop turns, and show the same figures as the
pure figures."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from container.dashboard import figures
from container.dashboard.server import Dashboard
from tests.unit.dashboard.fakes import Directory, FakeBroker, Slot, Store, Topic

IDENT = "DefaultCluster:b:0"
ROWS = 300


class TurnCountingStore(Store):
    """Notes the loop turn of every max offset asked."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.turn = 0
        self.seen_turns: set[int] = set()

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self.seen_turns.add(self.turn)
        return super().max_offset_in_queue(topic, queue_id)


def large_broker() -> tuple[FakeBroker, TurnCountingStore]:
    topics = {f"T{i:03d}": Topic(2, 2) for i in range(ROWS)}
    queues = {(t, q): (0, 50 + q) for t in topics for q in range(2)}
    b = FakeBroker("b", topics=topics, queues=queues,
                   offsets={f"T{i % ROWS:03d}@G{i:04d}": {0: i % 50, 1: 3} for i in range(ROWS)})
    store = TurnCountingStore(b.store.queues)
    b.store = store
    return b, store


async def counting_turns(store: TurnCountingStore) -> asyncio.Task[None]:
    async def count() -> None:
        while True:
            store.turn += 1
            await asyncio.sleep(0)  # sleep-ok: counting loop turns

    return asyncio.get_running_loop().create_task(count())


@pytest.mark.parametrize("page", ["groups", "topics"])
async def test_a_page_is_built_over_several_loop_turns_with_the_figures_rows(page: str) -> None:
    b, store = large_broker()
    app = web.Application()
    Dashboard(Directory({IDENT: Slot(b)}), turn_budget_s=0.0).install(app)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        ticker = await counting_turns(store)
        try:
            resp = await client.get(f"/api/{page}")
            body = await resp.json()
            raw = await resp.read()
        finally:
            ticker.cancel()
    assert resp.status == 200 and resp.content_type == "application/json"
    expected = figures.group_rows(b) if page == "groups" else figures.topic_rows(b)  # type: ignore[arg-type]
    assert body == {"brokers": [{"identity": IDENT, "rows": expected}]} and len(expected) == ROWS
    assert raw == orjson.dumps({"brokers": [{"identity": IDENT, "rows": expected}]})  # what one dumps of it gives
    assert len(store.seen_turns) >= 3  # built over several turns, not in one


async def test_the_scrape_lines_are_built_over_several_loop_turns_with_the_figures() -> None:
    b, store = large_broker()
    directory = Directory({IDENT: Slot(b)})
    ticker = await counting_turns(store)
    try:
        text = await Dashboard(directory, turn_budget_s=0.0).metrics_text()  # type: ignore[arg-type]
    finally:
        ticker.cancel()
    assert text.splitlines() == figures.prometheus_lines(directory)  # type: ignore[arg-type]
    assert len(text.splitlines()) == 4 + 2 * ROWS and len(store.seen_turns) >= 3
