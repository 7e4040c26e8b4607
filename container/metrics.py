"""Per-broker observability: Prometheus text on an aiohttp `/metrics` endpoint (labelled by broker identity,
so nothing leaks between brokers) and `/health`."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from container.context import BrokerDirectory, HostedBroker

COUNTERS: tuple[tuple[str, str, str, Callable[[HostedBroker], int]], ...] = (
    ("rocketmq_messages_in_total", "counter", "Messages stored by the broker", lambda b: b.stats.msgs_in),
    ("rocketmq_messages_out_total", "counter", "Messages returned to consumers", lambda b: b.stats.msgs_out),
    ("rocketmq_bytes_in_total", "counter", "Stored bytes", lambda b: b.stats.bytes_in),
    ("rocketmq_send_lane_messages_total", "counter", "Messages of rocketmq_messages_in_total stored by the C send lane",
     lambda b: b.send_lane.handled if b.send_lane is not None else 0),
    ("rocketmq_send_lane_acl_misses_total", "counter",
     "ACL on: sends the C lane left to the Python path (unsigned, bad signature, account not yet admitted)",
     lambda b: sum(b.send_lane.acl_misses().values()) if b.send_lane is not None else 0),
    ("rocketmq_send_lane_header_cache_hits_total", "counter",
     "JSON send headers the C lane parsed by their differences from a client's previous header (the rest: misses)",
     lambda b: b.send_lane.header_cache()[0] if b.send_lane is not None else 0),
    ("rocketmq_send_lane_header_cache_misses_total", "counter", "JSON send headers the C lane parsed in full",
     lambda b: b.send_lane.header_cache()[1] if b.send_lane is not None else 0),
    ("rocketmq_acl_denied_total", "counter", "Requests refused NO_PERMISSION by the ACL check", lambda b: b.acl_denied),
    ("rocketmq_send_queue_size", "gauge", "Stored sends waiting for their answer (flush, replicas)",
     lambda b: b.send_admission.pending),
    ("rocketmq_bytes_out_total", "counter", "Bytes returned to consumers", lambda b: b.stats.bytes_out),
    ("rocketmq_errors_total", "counter", "Failed requests", lambda b: b.stats.errors),
    ("rocketmq_disk_usage_bytes", "gauge", "Commit log + consume queue + index bytes",
     lambda b: b.store.logical_usage_bytes()),
    ("rocketmq_commitlog_max_offset", "gauge", "Commit log max physical offset", lambda b: b.store.max_phy_offset),
    ("rocketmq_store_writeable", "gauge", "1 when the store accepts writes", lambda b: int(b.store.is_writeable())),
    ("rocketmq_ha_master", "gauge", "1 while the broker is its set's master", lambda b: int(b.ha_status()["role"] == "MASTER")),
    ("rocketmq_ha_master_epoch", "gauge", "The master epoch the broker acts on", lambda b: b.ha_status()["masterEpoch"]),
    ("rocketmq_ha_confirm_offset", "gauge", "Commit-log offset consumers may read up to (replicated)",
     lambda b: b.ha_status()["confirmOffset"]),
    ("rocketmq_ha_sync_state_set_size", "gauge", "Members of the sync state set (master only)",
     lambda b: len(b.ha_status().get("syncStateSet", []))),
    ("rocketmq_ha_replica_wait_timeouts_total", "counter", "Sends answered FLUSH_SLAVE_TIMEOUT",
     lambda b: b.ha_status()["replicaTimeouts"]),
    ("rocketmq_ha_slave_connected", "gauge", "1 while a slave is connected to its master's HA port",
     lambda b: int(bool(b.ha_status().get("connected")))),
    ("rocketmq_tiered_end_offset", "gauge", "Tiered storage: commit-log offset below which the tier holds everything",
     lambda b: _tier(b, "manifest", "end")),
    ("rocketmq_tiered_min_offset", "gauge", "Tiered storage: the lowest commit-log offset the tier still holds",
     lambda b: _tier(b, "manifest", "minOffset")),
    ("rocketmq_tiered_uploaded_bytes_total", "counter", "Tiered storage: bytes this broker uploaded as master",
     lambda b: _tier(b, "uploadedBytes")),
    ("rocketmq_tiered_read_fetches_total", "counter", "Tiered storage: chunks fetched from the tier for reads",
     lambda b: _tier(b, "reader", "fetches")),
    ("rocketmq_tiered_fenced", "gauge", "Tiered storage: 1 when a higher epoch owns the tier (uploads stopped)",
     lambda b: int(bool(_tier(b, "fenced")))),
)


def _tier(b: HostedBroker, *path: str) -> int:
    """A figure of the broker's tiered-storage status (0 when tiering is off)."""
    v: object = b.ha_status().get("tiered") or {}
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return v if isinstance(v, int) else (1 if isinstance(v, str) and v else 0)


def escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(container: BrokerDirectory) -> str:
    lines: list[str] = []
    slots = sorted(container.brokers.items())
    for name, kind, help_, get in COUNTERS:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for ident, slot in slots:
            try:
                value = get(slot.broker)
            except Exception:  # noqa: BLE001 - a broken broker must not break the scrape of the others
                continue
            lines.append(f'{name}{{broker="{escape_label(ident)}"}} {value}')
    lines.append("# HELP rocketmq_ha_slave_lag_bytes A master's max offset minus each connected slave's ack")
    lines.append("# TYPE rocketmq_ha_slave_lag_bytes gauge")
    for ident, slot in slots:
        try:
            st = slot.broker.ha_status()
        except Exception:  # noqa: BLE001
            continue
        for sid, s in sorted(st.get("slaves", {}).items()):
            lag = max(0, int(st["maxOffset"]) - int(s["ack"]))
            lines.append(f'rocketmq_ha_slave_lag_bytes{{broker="{escape_label(ident)}",slave="{escape_label(sid)}"}} {lag}')
    lines.append("# HELP rocketmq_send_refused_total Sends answered SYSTEM_BUSY at once (overload shedding), by reason")
    lines.append("# TYPE rocketmq_send_refused_total counter")
    for ident, slot in slots:
        for reason, n in sorted(slot.broker.send_admission.refused.items()):
            lines.append(f'rocketmq_send_refused_total{{broker="{escape_label(ident)}",reason="{reason}"}} {n}')
    lines.append("# HELP rocketmq_send_lane_fallbacks_total Sends the Python processor took while the C send lane"
                 " exists, by why the lane left them")
    lines.append("# TYPE rocketmq_send_lane_fallbacks_total counter")
    for ident, slot in slots:
        lane = slot.broker.send_lane
        for reason, n in sorted(lane.fallbacks.items()) if lane is not None else ():
            lines.append(f'rocketmq_send_lane_fallbacks_total{{broker="{escape_label(ident)}",reason="{reason}"}} {n}')
    lines.append("# HELP rocketmq_container_brokers Brokers hosted by this container")
    lines.append("# TYPE rocketmq_container_brokers gauge")
    lines.append(f"rocketmq_container_brokers {len(slots)}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """`/metrics` and `/health`; `extra_text` appends more series to a scrape, `setup_app` adds routes (the
    dashboard) to the same application."""

    def __init__(self, container: BrokerDirectory, port: int, host: str = "127.0.0.1", *,
                 extra_text: Callable[[], str] | None = None,
                 setup_app: Callable[[web.Application], None] | None = None) -> None:
        self.container = container
        self.requested_port = port
        self.host = host
        self.extra_text = extra_text
        self.setup_app = setup_app
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        if self.setup_app is not None:
            self.setup_app(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.requested_port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # (host, port, ...) of the one socket the site bound

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        text = render(self.container)
        if self.extra_text is not None:
            text += self.extra_text()
        return web.Response(body=text.encode(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _health(self, request: web.Request) -> web.Response:
        brokers = {k: s.broker.health()[0] for k, s in self.container.brokers.items()}
        ok = all(v == "running" for v in brokers.values())
        return web.json_response({"status": "ok" if ok else "degraded", "brokers": brokers}, status=200 if ok else 503)
