"""The dashboard's HTTP API on a real metrics server (loopback, port 0) over in-memory brokers: read-only without
a credentials source, login against an `AdminCredentials` test double, signed HttpOnly SameSite=Strict session,
CSRF token on admin POSTs, throttled failed logins, admin actions run through the broker's own handler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from container.dashboard.server import Dashboard
from container.metrics import MetricsServer
from tests.unit.dashboard.fakes import Admins, Directory, FakeBroker, Slot, Topic

pytestmark = pytest.mark.integration
IDENT = "DefaultCluster:b:0"


async def serve(credentials: Admins | None) -> tuple[MetricsServer, FakeBroker]:
    b = FakeBroker("b", topics={"T": Topic(1, 1)}, queues={("T", 0): (0, 8)}, offsets={"T@G": {0: 3}})
    d = Directory({IDENT: Slot(b)})
    dash = Dashboard(d, credentials, sample_interval_s=0.05)
    m = MetricsServer(d, 0, extra_text=dash.metrics_text, setup_app=dash.install)
    await m.start()
    return m, b


@pytest.fixture
async def admin_server() -> AsyncIterator[tuple[str, FakeBroker]]:
    m, b = await serve(Admins({"admin": "pw"}))
    yield f"http://127.0.0.1:{m.port}", b
    await m.stop()


async def post(s: aiohttp.ClientSession, url: str, body: object, csrf: str | None = None) -> tuple[int, dict[str, str]]:
    headers = {"X-CSRF-Token": csrf} if csrf else {}
    async with s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def test_read_only_without_a_credentials_source() -> None:
    m, b = await serve(None)
    base = f"http://127.0.0.1:{m.port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/api/session") as r:
                body = await r.json()
            assert body["adminEnabled"] is False and "no credentials source" in body["notice"]
            assert (await post(s, base + "/api/login", {"accessKey": "admin", "secretKey": "pw"}))[0] == 403
            assert (await post(s, base + "/api/topic", {"broker": IDENT, "topic": "X"}))[0] == 403
            async with s.get(base + "/metrics") as r:
                text = await r.text()
            assert f'rocketmq_consumer_lag_messages{{broker="{IDENT}",group="G",topic="T"}} 5' in text
            assert f'rocketmq_messages_in_total{{broker="{IDENT}"}} 10' in text  # the existing series unchanged
            assert "Content-Security-Policy" not in r.headers
    finally:
        await m.stop()
    assert b.requests == []


async def test_admin_login_csrf_and_create_topic(admin_server: tuple[str, FakeBroker]) -> None:
    base, b = admin_server
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:  # unsafe: IP-address host
        status, body = await post(s, base + "/api/login", {"accessKey": "admin", "secretKey": "wrong"})
        assert status == 401
        assert (await post(s, base + "/api/topic", {"broker": IDENT, "topic": "X"}))[0] == 401
        async with s.post(base + "/api/login", json={"accessKey": "admin", "secretKey": "pw"}) as r:
            assert r.status == 200
            csrf = (await r.json())["csrf"]
            cookie = r.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        async with s.get(base + "/api/session") as r:
            assert (await r.json())["user"] == "admin"
        # the cookie alone is not enough: the CSRF token must come along
        assert (await post(s, base + "/api/topic", {"broker": IDENT, "topic": "X"}))[0] == 403
        assert (await post(s, base + "/api/topic", {"broker": IDENT, "topic": "X"}, csrf + "x"))[0] == 403
        async with s.post(base + "/api/topic", data="broker=x&topic=X",
                          headers={"X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded"}) as r:
            assert r.status == 415  # a cross-site form cannot post JSON
        status, body = await post(s, base + "/api/topic", {"broker": IDENT, "topic": "X", "queues": 8}, csrf)
        assert status == 200 and body == {"ok": True, "broker": IDENT, "topic": "X"}
        assert [(c.code, c.ext) for c in b.requests] == [
            (17, {"topic": "X", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6"})]
        status, body = await post(s, base + "/api/topic", {"broker": IDENT, "topic": "bad topic"}, csrf)
        assert status == 400 and body["error"] == "topic name is invalid"  # the broker's own answer
        assert (await post(s, base + "/api/topic", {"broker": "x:y:0", "topic": "X"}, csrf))[0] == 404
        status, body = await post(s, base + "/api/topic/delete", {"broker": IDENT, "topic": "X"}, csrf)
        assert status == 400 and "not supported" in body["error"]  # the fake broker has no 215 handler
        async with s.get(base + "/api/topics") as r:
            assert "X" in {t["topic"] for t in (await r.json())["brokers"][0]["rows"]}
        await post(s, base + "/api/logout", {})
        assert (await post(s, base + "/api/topic", {"broker": IDENT, "topic": "Y"}, csrf))[0] == 401


async def test_failed_logins_are_throttled(admin_server: tuple[str, FakeBroker]) -> None:
    base, _ = admin_server
    async with aiohttp.ClientSession() as s:
        codes = [(await post(s, base + "/api/login", {"accessKey": "admin", "secretKey": f"guess{i}"}))[0]
                 for i in range(6)]
        assert codes == [401] * 5 + [429]
        assert (await post(s, base + "/api/login", {"accessKey": "admin", "secretKey": "pw"}))[0] == 429


async def test_history_samples_the_counters(admin_server: tuple[str, FakeBroker]) -> None:
    base, b = admin_server

    async def rates(s: aiohttp.ClientSession) -> list[float | None]:
        async with s.get(base + "/api/history") as r:
            h = await r.json()
        return list(h["brokers"].get(IDENT, {}).get("rocketmq_messages_in_total", []))

    async with aiohttp.ClientSession() as s:
        deadline = asyncio.get_running_loop().time() + 10
        while not await rates(s):  # the sampler (every 50 ms here) has taken two samples
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)  # sleep-ok: polling a condition with a deadline
        b.stats.msgs_in += 100
        while not any((v or 0) > 0 for v in await rates(s)):  # the increase shows as a rate
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)  # sleep-ok: polling a condition with a deadline
        async with s.get(base + "/api/errors") as r:
            assert set(await r.json()) == {"total", "entries"}
