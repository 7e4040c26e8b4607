"""Headless Chromium (Debian's `chromium`, installed by scripts/test) driven over the DevTools protocol with
aiohttp's websocket client: navigate, evaluate, wait on a page condition, screenshot, and collect every console
error, uncaught exception and browser-side error (failed loads, CSP violations) the page produced."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import time
from typing import Any

import aiohttp

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._waiting.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
            else:
                self._event(data.get("method", ""), data.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                      for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(d.get("exception", {}).get("description", d.get("text"))))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            e = params["entry"]
            self.errors.append(f"log ({e.get('source')}): {e.get('text')} {e.get('url', '')}")

    async def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        mid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[mid] = fut
        await self.ws.send_str(json.dumps({"id": mid, "method": method, "params": params or {}}))
        reply = await asyncio.wait_for(fut, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        r = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate {expression!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def wait_for(self, expression: str, timeout: float, what: str) -> Any:
        """Poll a JS expression until it is truthy (the page's own state, never a fixed sleep); an expression
        that throws (the document is still loading) counts as not yet."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                last = await self.evaluate(expression)
            except RuntimeError as e:
                last = e
            else:
                if last:
                    return last
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last}); "
                                     f"page errors: {self.errors}")
            await asyncio.sleep(0.1)  # sleep-ok: polling a condition with a deadline

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def screenshot(self, path: pathlib.Path, width: int = 1400) -> None:
        """A full-page PNG `width` pixels wide."""
        height = int(await self.evaluate("document.documentElement.scrollHeight"))
        await self.send("Emulation.setDeviceMetricsOverride",
                        {"width": width, "height": max(400, height), "deviceScaleFactor": 1, "mobile": False})
        shot = await self.send("Page.captureScreenshot", {"format": "png"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


class Chromium:
    """One headless Chromium process with its own profile directory, killed on `stop`."""

    def __init__(self, profile: pathlib.Path) -> None:
        exe = chromium_path()
        if exe is None:
            raise RuntimeError("chromium is not installed (scripts/test installs Debian's chromium)")
        self.exe = exe
        self.profile = profile
        self.proc: subprocess.Popen[bytes] | None = None
        self.session = aiohttp.ClientSession()
        self.http = ""

    async def start(self, timeout: float = 60) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        log = self.profile / "chromium.log"
        self.proc = subprocess.Popen(
            [self.exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", f"--user-data-dir={self.profile}", "--window-size=1400,900",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": ""})
        deadline = time.monotonic() + timeout
        while not self.http:
            m = re.search(r"DevTools listening on ws://([\d.]+:\d+)/", log.read_text(errors="replace"))
            if m:
                self.http = f"http://{m.group(1)}"
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start: {log.read_text(errors='replace')[-2000:]}")
            else:
                await asyncio.sleep(0.1)  # sleep-ok: polling a condition with a deadline
        return self

    async def new_page(self) -> Page:
        async with self.session.put(f"{self.http}/json/new?about:blank") as r:
            target = await r.json()
        ws = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(ws)
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        return page

    async def stop(self) -> None:
        await self.session.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


async def open_page(page: Page, base: str, name: str, shots: pathlib.Path) -> None:
    """Show one dashboard page, wait until it rendered from the API, screenshot it as `shots/<name>.png`."""
    await page.goto(f"{base}/dashboard/#{name}")
    await page.wait_for(f"document.body.dataset.loaded === {json.dumps(name)}", 20, f"the {name} page")
    await page.screenshot(shots / f"{name}.png")


def publish_screenshots(shots: pathlib.Path) -> None:
    """With UPDATE_DASHBOARD_SCREENSHOTS=1, copy the screenshots to docs/dashboard/ (linked from the README)."""
    if os.environ.get("UPDATE_DASHBOARD_SCREENSHOTS") != "1":
        return
    target = pathlib.Path(__file__).resolve().parents[1] / "docs" / "dashboard"
    target.mkdir(parents=True, exist_ok=True)
    for png in shots.glob("*.png"):
        shutil.copy(png, target / png.name)
