"""Per-broker observability: Prometheus text on an aiohttp `/metrics` endpoint (labelled by broker identity,
so nothing leaks between brokers) and `/health`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from aiohttp import web

from brokerd import loopmon
from brokerd.remoting.connection import loop_turns
from container.context import BrokerDirectory, HostedBroker, HostedSlot
from container.exporter import Exporter

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
    # timer messages (brokerd/timer, docs/timer.md)
    ("rocketmq_timer_pending", "gauge", "Timer messages waiting for their time (not fired, rolled or recalled yet)",
     lambda b: b.timers.figures()["pending"]),
    ("rocketmq_timer_parked_total", "counter", "Timer messages accepted (parked in rmq_sys_wheel_timer)",
     lambda b: b.timers.figures()["parked"]),
    ("rocketmq_timer_fired_total", "counter", "Timer messages delivered into their real topic by this broker",
     lambda b: b.timers.figures()["fired"]),
    ("rocketmq_timer_rolled_total", "counter", "Timer messages parked again (due beyond the wheel's window)",
     lambda b: b.timers.figures()["rolled"]),
    ("rocketmq_timer_recalled_total", "counter", "Timer messages recalled before their time (RECALL_MESSAGE)",
     lambda b: b.timers.figures()["recalled"]),
    ("rocketmq_timer_dropped_total", "counter", "Timer messages resolved without a delivery (illegal, no real topic)",
     lambda b: b.timers.figures()["dropped"]),
    ("rocketmq_timer_refused_total", "counter", "Timer sends refused (beyond timerMaxDelaySec, malformed)",
     lambda b: b.timers.figures()["refused"]),
)


def _tier(b: HostedBroker, *path: str) -> int:
    """A figure of the broker's tiered-storage status (0 when tiering is off)."""
    v: object = b.ha_status().get("tiered") or {}
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return v if isinstance(v, int) else (1 if isinstance(v, str) and v else 0)


def _timer_lines(slots: list[tuple[str, HostedSlot]]) -> list[str]:
    """Pending timers by due time and the fire-lateness histogram of each broker."""
    due = ["# HELP rocketmq_timer_pending_by_due Timer messages due within le seconds (cumulative)",
           "# TYPE rocketmq_timer_pending_by_due gauge"]
    late = ["# HELP rocketmq_timer_fire_lateness_ms How long after its due time a timer reached its real topic (ms)",
            "# TYPE rocketmq_timer_fire_lateness_ms histogram"]
    for ident, slot in slots:
        try:
            by_due = slot.broker.timers.pending_by_due()
            buckets, total_ms, count = slot.broker.timers.lateness_buckets()
        except Exception:  # noqa: BLE001 - a broken broker must not break the scrape of the others
            continue
        b = escape_label(ident)
        due += [f'rocketmq_timer_pending_by_due{{broker="{b}",le="{le}"}} {n}' for le, n in by_due]
        late += [f'rocketmq_timer_fire_lateness_ms_bucket{{broker="{b}",le="{le}"}} {n}' for le, n in buckets]
        late += [f'rocketmq_timer_fire_lateness_ms_sum{{broker="{b}"}} {total_ms}',
                 f'rocketmq_timer_fire_lateness_ms_count{{broker="{b}"}} {count}']
    return due + late


POP_COUNTERS = (("popped", "rocketmq_pop_messages_total", "counter", "Messages handed out by POP_MESSAGE"),
                ("acks", "rocketmq_pop_acks_total", "counter", "POP messages acknowledged"),
                ("refused_acks", "rocketmq_pop_refused_acks_total", "counter",
                 "ACK / CHANGE_MESSAGE_INVISIBLETIME refused: stale or expired receipt handle"),
                ("renews", "rocketmq_pop_invisible_time_changes_total", "counter", "Invisible times changed"),
                ("revived", "rocketmq_pop_revived_total", "counter",
                 "Unacknowledged POP messages put into their group's retry topic"),
                ("dead_lettered", "rocketmq_pop_dead_lettered_total", "counter",
                 "POP messages moved to the DLQ after retryMaxTimes"))
POP_GROUP_GAUGES = (("inflight", "rocketmq_pop_group_inflight", "Messages a POP group has in flight (not acked)"),
                    ("reviveBacklog", "rocketmq_pop_group_revive_backlog",
                     "In-flight messages of a POP group whose invisible time passed, not revived yet"),
                    ("retryBacklog", "rocketmq_pop_group_retry_backlog",
                     "Messages waiting in a POP group's retry topic"))


def _pop_lines(slots: list[tuple[str, HostedSlot]]) -> list[str]:
    """POP consumption per broker (counters, parked requests) and per group (in flight, revive backlog)."""
    stats = []
    for ident, slot in slots:
        try:
            stats.append((escape_label(ident), slot.broker.pop.stats()))
        except Exception:  # noqa: BLE001 - a broken broker must not break the scrape of the others
            continue
    lines: list[str] = []
    for key, name, kind, help_ in POP_COUNTERS:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        lines += [f'{name}{{broker="{b}"}} {st["counters"].get(key, 0)}' for b, st in stats]
    lines += ["# HELP rocketmq_pop_parked_requests POP and NOTIFICATION requests waiting (long polling)",
              "# TYPE rocketmq_pop_parked_requests gauge"]
    lines += [f'rocketmq_pop_parked_requests{{broker="{b}"}} {st["parked"]}' for b, st in stats]
    for key, name, help_ in POP_GROUP_GAUGES:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{broker="{b}",group="{escape_label(g)}"}} {f[key]}'
                  for b, st in stats for g, f in sorted(st["groups"].items())]
    return lines


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
    lines.append("# HELP rocketmq_store_batch_fallbacks_total Batch appends (timer firing, POP revive, client batches)"
                 " the store's C run left to Python, by reason")
    lines.append("# TYPE rocketmq_store_batch_fallbacks_total counter")
    for ident, slot in slots:
        try:
            fallbacks = slot.broker.store.batch_stats()["fallbacks"]
        except Exception:  # noqa: BLE001 - a broken broker must not break the scrape of the others
            continue
        for reason, n in sorted(fallbacks.items()):
            lines.append(f'rocketmq_store_batch_fallbacks_total{{broker="{escape_label(ident)}",reason="{reason}"}} {n}')
    lines += _timer_lines(slots)
    lines += _pop_lines(slots)
    lines.append("# HELP rocketmq_container_brokers Brokers hosted by this container")
    lines.append("# TYPE rocketmq_container_brokers gauge")
    lines.append(f"rocketmq_container_brokers {len(slots)}")
    monitor = loopmon.current()  # the process's event loop and collector (shared by its brokers)
    if monitor is not None:
        lines.append(monitor.render().rstrip("\n"))
        turns = loop_turns()  # reads past a loop turn's handling budget, kept for the next turns (turns.py)
        lines += ["# HELP rocketmq_loop_reads_kept_total Socket reads kept for a later loop turn (the turn's handling"
                  " budget was spent)", "# TYPE rocketmq_loop_reads_kept_total counter",
                  f"rocketmq_loop_reads_kept_total {turns.kept}",
                  "# HELP rocketmq_loop_kept_bytes Bytes read off the sockets and not handled yet",
                  "# TYPE rocketmq_loop_kept_bytes gauge", f"rocketmq_loop_kept_bytes {turns.kept_bytes}"]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """`/metrics` and `/health`; `extra_text` appends more series to a scrape, `setup_app` adds routes (the
    dashboard) to the same application."""

    def __init__(self, container: BrokerDirectory, port: int, host: str = "127.0.0.1", *,
                 extra_text: Callable[[], Awaitable[str]] | None = None,
                 setup_app: Callable[[web.Application], None] | None = None) -> None:
        self.container = container
        self.requested_port = port
        self.host = host
        self.extra_text = extra_text
        self.setup_app = setup_app
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.exporter = Exporter(container)  # rocketmq-exporter's families next to ours (container/exporter)

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
        await self.exporter.stop()

    async def _metrics(self, request: web.Request) -> web.Response:
        text = render(self.container)
        if self.extra_text is not None:
            text += await self.extra_text()
        text += await self.exporter.text()
        return web.Response(body=text.encode(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _health(self, request: web.Request) -> web.Response:
        brokers = {k: s.broker.health()[0] for k, s in self.container.brokers.items()}
        ok = all(v == "running" for v in brokers.values())
        return web.json_response({"status": "ok" if ok else "degraded", "brokers": brokers}, status=200 if ok else 503)


class GrpcCounters(Protocol):
    """The gRPC endpoint's counters (brokerd/proxy/stats.py), as `/metrics` reads them."""

    @property
    def requests(self) -> Mapping[tuple[str, str], int]:
        """(rpc, status code name) -> answered requests."""
        ...

    @property
    def messages_sent(self) -> int: ...

    @property
    def messages_received(self) -> int: ...

    @property
    def messages_acked(self) -> int: ...

    @property
    def auth_refused(self) -> int: ...


def render_grpc(stats: GrpcCounters, clients: Mapping[str, int]) -> str:
    """The gRPC endpoint's series: its clients by type, its requests by RPC and status code, its messages."""
    lines = ["# HELP rocketmq_grpc_clients gRPC (RocketMQ 5.x SDK) clients connected to the container, by type",
             "# TYPE rocketmq_grpc_clients gauge"]
    lines += [f'rocketmq_grpc_clients{{type="{escape_label(t)}"}} {n}' for t, n in sorted(clients.items())]
    lines += ["# HELP rocketmq_grpc_requests_total gRPC requests answered, by RPC and the proto's status code",
              "# TYPE rocketmq_grpc_requests_total counter"]
    lines += [f'rocketmq_grpc_requests_total{{rpc="{escape_label(rpc)}",code="{escape_label(code)}"}} {n}'
              for (rpc, code), n in sorted(stats.requests.items())]
    for name, help_, value in (
            ("rocketmq_grpc_messages_sent_total", "Messages gRPC clients sent (stored)", stats.messages_sent),
            ("rocketmq_grpc_messages_received_total", "Messages delivered to gRPC clients", stats.messages_received),
            ("rocketmq_grpc_messages_acked_total", "Messages gRPC clients acknowledged", stats.messages_acked),
            ("rocketmq_grpc_auth_refused_total", "gRPC requests refused by the ACL check", stats.auth_refused)):
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name} {value}"]
    return "\n".join(lines) + "\n"
