"""The exporter's driver: one scrape's families for the hosted masters, computed in slices (the event loop serves
the brokers' clients between them) and shared by scrapes that arrive while it runs or within ``min_interval_s``.

Only masters report (rocketmq-exporter asks each broker set's master, brokerId 0): a container hosting a slave
leaves that set to the container of its master, so that summing a family over the containers counts each set
once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import cast

import orjson
import structlog

from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection
from container.context import BrokerDirectory, ExportedBroker
from container.exporter.clients import ClientProbe
from container.exporter.collect import GroupFigures, LatencyCache, broker_figures, group_figures, topic_figures
from container.exporter.families import Samples
from container.exporter.runtime import runtime_labels, runtime_samples

GET_BROKER_RUNTIME_INFO = 28
log = structlog.get_logger("exporter")


def _collect_into(out: list[str], parts: Iterator[str]) -> Iterator[None]:
    for part in parts:
        out.append(part)
        yield


class Exporter:
    SLICE_S = 0.002  # longest a scrape computes before it lets the event loop serve others

    def __init__(self, directory: BrokerDirectory, *, min_interval_s: float = 1.0,
                 probe: ClientProbe | None = None) -> None:
        self.directory = directory
        self.min_interval_s = min_interval_s
        self.probe = probe or ClientProbe()
        self.latency = LatencyCache()
        self._text = ""
        self._at = float("-inf")
        self._running: asyncio.Future[str] | None = None
        self.last_render_s = 0.0  # wall time of the last computation (observability, tests)
        self.last_longest_slice_s = 0.0  # the longest the loop was held by it (wall time)
        self.last_longest_slice_cpu_s = 0.0  # ... in CPU time (what the work itself took, preemption left out)

    async def text(self) -> str:
        if self._running is not None:
            return await asyncio.shield(self._running)
        if time.monotonic() - self._at < self.min_interval_s:
            return self._text
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._running = fut
        try:
            text = await self.collect()
            self._text, self._at = text, time.monotonic()
            fut.set_result(text)
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: a waiter that was cancelled must not leave it unobserved
            raise
        finally:
            self._running = None
        return text

    def masters(self) -> list[tuple[str, ExportedBroker]]:
        out: list[tuple[str, ExportedBroker]] = []
        for ident, slot in sorted(self.directory.brokers.items()):
            b = slot.broker
            try:
                if isinstance(b, ExportedBroker) and b.is_master():
                    out.append((ident, b))
            except Exception:  # noqa: BLE001 - a broken broker must not break the scrape of the others
                continue
        return out

    async def collect(self) -> str:
        began = time.monotonic()
        self.last_longest_slice_s = self.last_longest_slice_cpu_s = 0.0
        s, groups = Samples(), GroupFigures()
        masters = self.masters()
        peers = {(b.cfg.broker_cluster_name, b.cfg.broker_name, b.cfg.broker_id): b.cfg.broker_addr
                 for _, b in masters}
        for _, slot in self.directory.brokers.items():
            cfg = slot.broker.cfg
            peers.setdefault((cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id), cfg.broker_addr)
        now_ms = int(time.time() * 1000)
        self.latency.start()
        for ident, b in masters:
            try:
                broker_figures(s, b, peers)
                await self._runtime(s, b)
                await self._drain(topic_figures(s, b))
                await self._drain(group_figures(s, b, groups, now_ms, self.latency))
            except Exception as e:  # noqa: BLE001 - one broken broker must not blank the others' figures
                log.warning("exporter_broker_failed", broker=ident, error=repr(e))
        await self._drain(groups.render(s))
        self.probe.kick(b for _, b in masters)
        self.probe.render(s)
        parts: list[str] = []
        await self._drain(_collect_into(parts, s.parts()))
        text = "".join(parts)
        self.last_render_s = time.monotonic() - began
        return text

    async def _drain(self, work: Iterator[None]) -> None:
        began, cpu = time.monotonic(), time.thread_time()
        for _ in work:
            held = time.monotonic() - began
            if held >= self.SLICE_S:
                self._held(held, time.thread_time() - cpu)
                await asyncio.sleep(0)  # sleep-ok: let the loop serve others between slices
                began, cpu = time.monotonic(), time.thread_time()
        self._held(time.monotonic() - began, time.thread_time() - cpu)

    def _held(self, wall: float, cpu: float) -> None:
        self.last_longest_slice_s = max(self.last_longest_slice_s, wall)
        self.last_longest_slice_cpu_s = max(self.last_longest_slice_cpu_s, cpu)

    async def _runtime(self, s: Samples, b: ExportedBroker) -> None:
        """The runtime families from the broker's own GET_BROKER_RUNTIME_INFO answer (as the exporter reads it)."""
        handler = b.dispatcher.lookup(GET_BROKER_RUNTIME_INFO)
        if handler is None:
            return
        res = handler(cast(Connection, None), request(GET_BROKER_RUNTIME_INFO))  # the handler reads no connection
        if res is not None and not isinstance(res, RemotingCommand):
            res = await res
        if res is None or res.code != 0 or not res.body:
            return
        table = {str(k): str(v) for k, v in orjson.loads(res.body).get("table", {}).items()}
        labels = runtime_labels(b.cfg.broker_cluster_name, b.cfg.broker_addr, table)
        for family, value in runtime_samples(table):
            s.add(family, labels, value)

    async def stop(self) -> None:
        await self.probe.stop()
