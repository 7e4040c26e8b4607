"""``rocketmq_client_*``: what each online consumer reports of itself, asked as rocketmq-exporter asks it
(GET_CONSUMER_RUNNING_INFO, 307, sent to the client over its own connection to a hosted master; the client answers
with its ConsumerRunningInfo, whose ``statusTable`` holds per topic pullRT, pullTPS, consumeRT, consumeOKTPS,
consumeFailedTPS and consumeFailedMsgs, the figures of the client's own one-minute statistics).

The asking runs in the background, started by a scrape when the last round is older than ``interval_s`` (so a
scrape never waits for clients); each answer is kept ``expire_s`` (the exporter's outOfTimeSeconds), a client
that does not answer in ``timeout_s`` keeps its last answer until then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from brokerd.namesrv.lenient_json import loads
from brokerd.remoting.command import request
from brokerd.remoting.connection import Connection
from container.context import ExportedBroker
from container.exporter.families import Samples

GET_CONSUMER_RUNNING_INFO = 307
CLIENT_FIGURES = (("rocketmq_client_consume_fail_msg_count", "consumeFailedMsgs"),
                  ("rocketmq_client_consume_fail_msg_tps", "consumeFailedTPS"),
                  ("rocketmq_client_consume_ok_msg_tps", "consumeOKTPS"),
                  ("rocketmq_client_consume_rt", "consumeRT"),
                  ("rocketmq_client_consumer_pull_rt", "pullRT"),
                  ("rocketmq_client_consumer_pull_tps", "pullTPS"))

log = structlog.get_logger("exporter")


@dataclass(frozen=True)
class Target:
    group: str
    client_id: str
    client_addr: str
    conn: Connection


@dataclass
class Status:
    values: dict[str, float]  # statusTable field -> value
    at: float  # monotonic time of the answer


def targets(brokers: Iterable[ExportedBroker]) -> list[Target]:
    """Each online consumer once per group (through the first master it is connected to)."""
    out: dict[tuple[str, str], Target] = {}
    for b in brokers:
        for group, info in sorted(b.consumers.groups.items()):
            for conn, ch in info.channels.items():
                if (group, ch.client_id) not in out and conn.is_open:
                    host, port = conn.remote_addr
                    out[(group, ch.client_id)] = Target(group, ch.client_id, f"{host}:{port}", conn)
    return list(out.values())


def status_table(body: bytes | None) -> dict[str, dict[str, float]]:
    """A ConsumerRunningInfo body's statusTable (topic -> figures); {} when it has none or is unreadable."""
    if not body:
        return {}
    try:
        doc: Any = loads(body)
    except ValueError:
        return {}
    table = doc.get("statusTable") if isinstance(doc, dict) else None
    out: dict[str, dict[str, float]] = {}
    for topic, fig in (table or {}).items():
        if isinstance(fig, dict):
            out[str(topic)] = {k: float(v) for k, v in fig.items() if isinstance(v, int | float)}
    return out


class ClientProbe:
    def __init__(self, *, interval_s: float = 15.0, expire_s: float = 60.0, timeout_s: float = 3.0,
                 concurrency: int = 16) -> None:
        self.interval_s, self.expire_s, self.timeout_s = interval_s, expire_s, timeout_s
        self.results: dict[tuple[str, str, str, str], Status] = {}  # (group, topic, client addr, client id)
        self._task: asyncio.Task[None] | None = None
        self._last = float("-inf")
        self._sem = asyncio.Semaphore(concurrency)
        self.rounds = 0

    def kick(self, brokers: Iterable[ExportedBroker]) -> None:
        """Start a round in the background when none runs and the last one began ``interval_s`` ago."""
        now = time.monotonic()
        if (self._task is not None and not self._task.done()) or now - self._last < self.interval_s:
            return
        self._last = now
        self._task = asyncio.get_running_loop().create_task(self.round(targets(brokers)))

    async def round(self, found: list[Target]) -> None:
        await asyncio.gather(*(self._ask(t) for t in found))
        self.rounds += 1

    async def _ask(self, t: Target) -> None:
        cmd = request(GET_CONSUMER_RUNNING_INFO, {"consumerGroup": t.group, "clientId": t.client_id,
                                                  "jstackEnable": "false"})
        async with self._sem:
            try:
                resp = await t.conn.request(cmd, self.timeout_s)
            except Exception as e:  # noqa: BLE001 - a client gone or slow: its last answer stays until it expires
                log.debug("client_running_info_failed", group=t.group, client=t.client_id, error=repr(e))
                return
        if resp.code != 0:
            return
        now = time.monotonic()
        for topic, fig in status_table(resp.body).items():
            self.results[(t.group, topic, t.client_addr, t.client_id)] = Status(fig, now)

    def render(self, s: Samples) -> None:
        cutoff = time.monotonic() - self.expire_s
        for key in [k for k, v in self.results.items() if v.at < cutoff]:
            del self.results[key]
        for (group, topic, addr, client_id), st in sorted(self.results.items()):
            for family, field_ in CLIENT_FIGURES:
                s.add(family, (addr, client_id, group, topic), st.values.get(field_, 0.0))

    async def settle(self) -> None:
        """Wait for the round in progress, if any."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
