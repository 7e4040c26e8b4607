"""An HA deployment as processes (3 controllers + 2 cross-layout containers): each container's dashboard shows its
brokers' roles, the sync state set and the controller leader, and the controllers' `/metrics` agree with it
(exactly one Raft leader, at that address; heartbeats, requests and their latency histogram counted)."""

from __future__ import annotations

import asyncio
import functools
import json
import pathlib
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import Chromium, chromium_path, publish_screenshots
from tests.ha_cluster import HACluster
from tests.integration.test_dashboard import parse_metrics
from tests.support import wait_for

pytestmark = pytest.mark.integration


def boot_port(text: str) -> int | None:
    m = re.search(r"metrics port (\d+)", text)
    return int(m.group(1)) if m else None


def container_port(ha: HACluster, c: int) -> int | None:
    return boot_port(ha.daemons[c].output())


def controller_port(ha: HACluster, i: int) -> int | None:
    return boot_port(ha.ctl.log_path(i).read_text(errors="replace"))


def get_json(url: str) -> Any:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def get_metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse_metrics(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())


@pytest.fixture
def ha(tmp_path: pathlib.Path) -> Iterator[HACluster]:
    cl = HACluster(tmp_path, containers=2, replicas=2).start()
    try:
        yield cl
    finally:
        cl.stop()


def test_dashboard_shows_roles_sync_state_set_and_the_controller_leader(ha: HACluster) -> None:
    dash = [wait_for(functools.partial(container_port, ha, c), 30, f"container {c}'s boot line") for c in range(2)]
    ctl = [wait_for(functools.partial(controller_port, ha, i), 30, f"controller n{i}'s boot line") for i in range(3)]

    def settled() -> dict[str, Any] | None:
        o = get_json(f"http://127.0.0.1:{dash[0]}/api/overview")
        rows = {r["name"]: r for r in o["brokers"]}
        a, b = rows.get("broker-a"), rows.get("broker-b")
        ok = a is not None and a["ha"]["role"] == "MASTER" and len(a["ha"]["syncStateSet"]) == 2
        ok = ok and b is not None and b["ha"]["role"] == "SLAVE" and b["ha"]["connected"]
        return o if ok and o["controllerLeaders"] else None

    overview = wait_for(settled, 30, "broker-a master with a 2-member sync state set, broker-b a connected slave "
                                     "and a known controller leader")
    rows = {r["name"]: r for r in overview["brokers"]}
    assert rows["broker-b"]["ha"]["masterHaAddr"]
    assert rows["broker-a"]["ha"]["controllerMode"] and rows["broker-a"]["ha"]["masterEpoch"] >= 1
    [leader_addr] = overview["controllerLeaders"]

    # the controllers' /metrics: one leader, the one the brokers talk to
    scrapes = [get_metrics(p) for p in ctl]
    leaders = [i for i, m in enumerate(scrapes) if m[("controller_raft_leader", (("node", f"n{i}"),))] == 1]
    assert [ha.ctl.addrs[i] for i in leaders] == [leader_addr]
    lead = leaders[0]
    m, node = get_metrics(ctl[lead]), ("node", f"n{lead}")
    assert m[("controller_raft_term", (node,))] >= 1
    assert m[("controller_raft_commit_index", (node,))] >= m[("controller_raft_applied_index", (node,))] > 0
    assert m[("controller_raft_apply_lag", (node,))] >= 0
    assert m[("controller_broker_heartbeats_total", (node,))] > 0 and m[("controller_live_brokers", (node,))] == 4
    assert m[("controller_raft_leadership_changes_total", (node, ("to", "leader")))] >= 1
    register = (node, ("request", "CONTROLLER_REGISTER_BROKER"))
    assert m[("controller_requests_total", register)] >= 1
    assert m[("controller_request_duration_seconds_count", register)] == m[("controller_requests_total", register)]
    assert m[("controller_request_duration_seconds_bucket", (("le", "+Inf"),) + register)] == \
        m[("controller_requests_total", register)]


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (scripts/test installs it)")
async def test_ha_overview_in_chromium(ha: HACluster, tmp_path: pathlib.Path) -> None:
    port = wait_for(functools.partial(container_port, ha, 0), 30, "container 0's boot line")
    browser = Chromium(tmp_path / "chromium")
    try:
        await asyncio.wait_for(browser.start(), 60)
        page = await asyncio.wait_for(browser.new_page(), 30)
        await page.goto(f"http://127.0.0.1:{port}/dashboard/#overview")
        cell = "[...document.querySelectorAll('[data-{0}]')].find(e => e.dataset.{0}.includes(':{1}:'))?.textContent"
        await page.wait_for(f"document.querySelector('[data-card=\"controller_leader\"]').textContent.includes(':')"
                            f" && ({cell.format('sss', 'broker-a')} || '').split(', ').length === 2"
                            f" && {cell.format('role', 'broker-b')} === 'SLAVE'", 30,
                            "the controller leader, broker-a's 2-member sync state set, broker-b a slave")
        await page.screenshot(tmp_path / "shots" / "overview-ha.png")
        assert page.errors == [], page.errors
        await asyncio.wait_for(page.close(), 15)
    finally:
        await asyncio.wait_for(browser.stop(), 30)
    publish_screenshots(tmp_path / "shots")
