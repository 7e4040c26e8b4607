"""The dashboard in headless Chromium (Debian's package, driven over the DevTools protocol) while the real
RocketMQ client produces and consumes: every page loads and updates without a console error, the figures on the page match
`/metrics`, a hostile group name is shown as text, and an admin logs in (credentials test double standing in
for the ACL accounts) and creates a topic from the page.

Screenshots go to the test's directory; with UPDATE_DASHBOARD_SCREENSHOTS=1 also to docs/dashboard/."""

from __future__ import annotations

import asyncio
import json
import pathlib
import urllib.request

import pytest

from container.config import ContainerConfig
from container.host import BrokerContainer
from tests.browser import Chromium, chromium_path, open_page, publish_screenshots
from tests.integration.test_dashboard import parse_metrics
from tests.support import ClientRun, arpc, broker_port, until, write_broker_conf

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(chromium_path() is None,
                                 reason="chromium is not installed (scripts/test installs Debian's chromium)")]

HOSTILE_GROUP = '<img src=x id=xss onerror="window.pwned=1">G'


class FakeAdmins:
    """Stands in for the ACL package's accounts (`admin: true` ones pass)."""

    def __init__(self, accounts: dict[str, str]) -> None:
        self.accounts = accounts

    def is_admin(self, access_key: str, secret_key: str) -> bool:
        return self.accounts.get(access_key) == secret_key


async def fetch_text(url: str) -> str:
    return await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())


async def test_dashboard_pages_in_chromium_while_producing(tmp_path: pathlib.Path) -> None:
    # bounded as a whole: a browser or client that stops answering fails the test instead of holding the suite
    await asyncio.wait_for(pages_in_chromium_while_producing(tmp_path), 240)


async def pages_in_chromium_while_producing(tmp_path: pathlib.Path) -> None:
    port = broker_port()
    conf = write_broker_conf(tmp_path / "b.conf", name="broker-a", port=port, store=tmp_path / "store")
    c = BrokerContainer(ContainerConfig(listen_port=0, embedded_namesrv_port=0, metrics_port=0,
                                        container_state_file=str(tmp_path / "state.json"),
                                        broker_config_paths=str(conf), dashboard_sample_interval_ms=250),
                        admin_credentials=FakeAdmins({"admin": "s3cret"}))
    await c.start()
    assert c.metrics is not None
    base, addr, ident = f"http://127.0.0.1:{c.metrics.port}", f"127.0.0.1:{port}", "DefaultCluster:broker-a:0"
    shots = tmp_path / "shots"
    browser = Chromium(tmp_path / "chromium")
    producer = consumer = None
    try:
        topic = "T_browser"
        assert (await arpc(addr, 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4"})).code == 0
        assert (await arpc(addr, 15, {"consumerGroup": HOSTILE_GROUP, "topic": topic, "queueId": "1",
                                      "commitOffset": "0"})).code == 0
        consumer = ClientRun("push", {"NAMESRV": c.namesrv_addrs[0], "TOPIC": topic, "GROUP": "G_browser",
                                      "COUNT": 10**6, "TIMEOUT": 120}, tmp_path / "consumer")
        await until(lambda: "G_browser" in c.brokers[ident].broker.consumers.groups, "the consumer registered", 60)
        producer = ClientRun("produce", {"NAMESRV": c.namesrv_addrs[0], "TOPIC": topic, "COUNT": 300,
                                         "PACE_MS": 15}, tmp_path / "producer")
        await browser.start()
        page = await browser.new_page()
        await until(lambda: len(producer.rows) > 20 and len(consumer.received()) > 5,
                    "the producer sending and the consumer receiving", 60)

        await open_page(page, base, "overview", shots)
        await page.wait_for(f"document.querySelector('[data-role=\"{ident}\"]')?.textContent === 'MASTER'", 10,
                            "the broker's role")
        await page.wait_for("Number(document.querySelector('#chart-msgs svg')?.dataset.points) >= 16", 20,
                            "a throughput line of 8 samples")
        await page.screenshot(shots / "overview.png")
        await open_page(page, base, "topics", shots)
        await page.goto(f"{base}/dashboard/#groups")
        await page.wait_for("document.querySelector('[data-group=\"G_browser@T_browser\"] td:nth-child(3)')"
                            "?.textContent === '1'", 30, "G_browser with its consumer online and committed offsets")
        await open_page(page, base, "groups", shots)
        # the hostile group name is text, never markup
        assert await page.evaluate("document.getElementById('xss') === null && window.pwned === undefined")
        assert HOSTILE_GROUP in await page.evaluate("document.getElementById('groups').textContent")
        await open_page(page, base, "errors", shots)

        # log in as admin through the form, then create a topic from the Topics page
        await open_page(page, base, "admin", shots)
        await page.evaluate("document.getElementById('access-key').value = 'admin';"
                            "document.getElementById('secret-key').value = 's3cret';"
                            "document.querySelector('#login button').click()")
        await page.wait_for("document.body.classList.contains('admin')", 10, "the admin session")
        await page.screenshot(shots / "admin.png")
        await page.goto(f"{base}/dashboard/#topics")
        await page.wait_for("document.body.dataset.loaded === 'topics' && document.getElementById('ct-broker').value",
                            20, "the topics page with its create form")
        await page.evaluate("document.getElementById('ct-topic').value = 'T_from_dashboard';"
                            "document.querySelector('#create-topic button').click()")
        await page.wait_for("document.querySelector('[data-topic=\"T_from_dashboard\"]') !== null", 20,
                            "the created topic listed")
        assert (await arpc(addr, 351, {"topic": "T_from_dashboard"})).code == 0
        await page.screenshot(shots / "topics-admin.png")

        # once the producer is done, the page's figures settle on exactly the scrape's
        code, rows = await asyncio.to_thread(producer.wait, 120)
        assert code == 0, rows[-3:]
        await until(lambda: len({d["props"]["seq"] for d in consumer.received()}) >= 300,
                    "the consumer received every message", 60)
        await page.goto(f"{base}/dashboard/#overview")
        metrics = parse_metrics(await fetch_text(base + "/metrics"))
        want = {name: int(v) for (name, labels), v in metrics.items() if labels == (("broker", ident),)}
        assert want["rocketmq_messages_in_total"] >= 300
        for name in ("rocketmq_messages_in_total", "rocketmq_messages_out_total", "rocketmq_errors_total",
                     "rocketmq_commitlog_max_offset"):
            cell = f"document.querySelector('[data-metric=\"{name}\"][data-broker=\"{ident}\"]')?.textContent"
            await page.wait_for(f"{cell} === {json.dumps(f'{want[name]:,}')}", 20, f"{name} = {want[name]} on the page")
        lag_rows = [v for (name, labels), v in metrics.items() if name == "rocketmq_consumer_lag_messages"
                    and dict(labels).get("group") == HOSTILE_GROUP]
        assert lag_rows and lag_rows[0] > 0
        await page.goto(f"{base}/dashboard/#groups")
        lag_cell = "[...document.querySelectorAll('[data-lag]')].find(e => e.dataset.lag.startsWith('<img'))?.textContent"
        await page.wait_for(f"{lag_cell} === {json.dumps(f'{int(lag_rows[0]):,}')}", 20, "the group's lag")
        await page.goto(f"{base}/dashboard/#overview")
        await page.wait_for("document.body.dataset.loaded === 'overview'", 20, "the overview again")
        assert page.errors == [], page.errors
        await page.close()
    finally:
        for proc in (producer, consumer):
            if proc is not None:
                proc.kill()
        await asyncio.wait_for(browser.stop(), 30)
        await asyncio.wait_for(c.stop(), 60)
    publish_screenshots(shots)
