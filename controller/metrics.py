"""`/metrics` of one controller member (Prometheus text on aiohttp, `controllerMetricsPort`, loopback by default):
Raft term, commit and applied index and the apply lag, leadership, requests by type with failures and a latency
histogram, broker heartbeats, live brokers, master elections and role-change pushes; the process's event-loop
stalls and garbage-collector pauses (``brokerd/loopmon.py``: ``controller_loop_stall_seconds``,
``controller_loop_stall_max_seconds``, ``controller_gc_pause_seconds``, ``controller_gc_collected_objects_total``,
``controller_gc_frozen_objects``).

`RequestStats` wraps each request handler (sync or async) to count and time it; `render` is pure over what it
reads of the Raft node and the controller role (`ServerView`). Label values are request names (`CONTROLLER_ELECT_MASTER`), never user input.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from brokerd import loopmon
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler, HandlerResult
from controller.raft_port import RaftLike

BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
REQUEST_NAMES = {v: k for k, v in vars(RequestCode).items() if isinstance(v, int) and not k.startswith("_")}


def request_name(code: int) -> str:
    return REQUEST_NAMES.get(code, str(code))


@dataclass
class RequestFamily:
    count: int = 0
    failures: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_S))

    def observe(self, seconds: float, failed: bool) -> None:
        self.count += 1
        self.failures += int(failed)
        self.seconds += seconds
        for i, le in enumerate(BUCKETS_S):
            if seconds <= le:
                self.buckets[i] += 1


class RequestStats:
    """Per request code: count, failures (an exception or a non-zero response code) and latency."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.by_code: dict[int, RequestFamily] = {}
        self.leadership_gained = 0
        self.leadership_lost = 0
        self.clock = clock

    def observe(self, code: int, seconds: float, reply: RemotingCommand | None, failed: bool = False) -> None:
        fam = self.by_code.get(code)
        if fam is None:
            fam = self.by_code[code] = RequestFamily()
        fam.observe(seconds, failed or (reply is not None and reply.code != 0))

    def on_leadership(self, leader: bool) -> None:
        if leader:
            self.leadership_gained += 1
        else:
            self.leadership_lost += 1

    def wrap(self, code: int, handler: Handler) -> Handler:
        """`handler`, counted and timed."""

        def timed(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            t0 = self.clock()
            try:
                result = handler(conn, cmd)
            except BaseException:
                self.observe(code, self.clock() - t0, None, failed=True)
                raise
            if inspect.isawaitable(result):
                return self._finish(code, t0, result)
            self.observe(code, self.clock() - t0, result)
            return result

        return timed

    async def _finish(self, code: int, t0: float, pending: Awaitable[RemotingCommand | None]) -> RemotingCommand | None:
        try:
            reply = await pending
        except BaseException:
            self.observe(code, self.clock() - t0, None, failed=True)
            raise
        self.observe(code, self.clock() - t0, reply)
        return reply

    def wrap_all(self, table: dict[int, Handler]) -> dict[int, Handler]:
        return {code: self.wrap(code, h) for code, h in table.items()}


class LiveCount(Protocol):
    @property
    def live_count(self) -> int: ...


class ElectionCounts(Protocol):
    @property
    def elections_tried(self) -> int: ...

    @property
    def elections_won(self) -> int: ...


class ServerView(Protocol):
    """What `/metrics` reads of the controller role (`controller.server.ControllerServer`)."""

    @property
    def live(self) -> LiveCount: ...

    @property
    def elector(self) -> ElectionCounts: ...

    @property
    def pushes_sent(self) -> int: ...

    @property
    def pushes_failed(self) -> int: ...


def _metric(lines: list[str], name: str, kind: str, help_: str, samples: list[tuple[str, float | int]]) -> None:
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        lines.append(f"{name}{labels} {value}")


def render(self_id: str, raft: RaftLike, server: ServerView, stats: RequestStats) -> str:
    node = f'node="{self_id}"'
    lines: list[str] = []
    gauges = [
        ("controller_raft_term", "gauge", "Current Raft term (it grows by one per election round)", raft.term),
        ("controller_raft_commit_index", "gauge", "Highest Raft log index known committed", raft.commit_index),
        ("controller_raft_applied_index", "gauge", "Highest Raft log index applied to the state machine",
         raft.applied_index),
        ("controller_raft_apply_lag", "gauge", "Committed entries not yet applied",
         max(0, raft.commit_index - raft.applied_index)),
        ("controller_raft_leader", "gauge", "1 while this member is the Raft leader", int(raft.is_leader)),
        ("controller_live_brokers", "gauge", "Brokers whose heartbeats this member tracks as alive",
         server.live.live_count),
        ("controller_master_elections_total", "counter", "Master elections this member ran as leader",
         server.elector.elections_tried),
        ("controller_master_elections_won_total", "counter", "Of those, elections that chose a master",
         server.elector.elections_won),
        ("controller_role_change_pushes_total", "counter", "NOTIFY_BROKER_ROLE_CHANGED pushes sent",
         server.pushes_sent),
        ("controller_role_change_push_failures_total", "counter", "Role-change pushes that failed",
         server.pushes_failed),
    ]
    for name, kind, help_, value in gauges:
        _metric(lines, name, kind, help_, [(f"{{{node}}}", value)])
    _metric(lines, "controller_raft_leadership_changes_total", "counter",
            "Times this member became leader (to=leader) or stopped being leader (to=follower)",
            [(f'{{{node},to="leader"}}', stats.leadership_gained), (f'{{{node},to="follower"}}', stats.leadership_lost)])
    fams = sorted(stats.by_code.items())
    hb = stats.by_code.get(RequestCode.BROKER_HEARTBEAT)
    _metric(lines, "controller_broker_heartbeats_total", "counter", "Broker heartbeats received (BROKER_HEARTBEAT)",
            [(f"{{{node}}}", hb.count if hb else 0)])
    _metric(lines, "controller_requests_total", "counter", "Requests served, by request type",
            [(f'{{{node},request="{request_name(c)}"}}', f.count) for c, f in fams])
    _metric(lines, "controller_request_failures_total", "counter",
            "Requests answered with a non-zero code or an exception, by request type",
            [(f'{{{node},request="{request_name(c)}"}}', f.failures) for c, f in fams])
    lines.append("# HELP controller_request_duration_seconds Time to answer a request, by request type")
    lines.append("# TYPE controller_request_duration_seconds histogram")
    for c, f in fams:
        labels = f'{node},request="{request_name(c)}"'
        for le, n in zip(BUCKETS_S, f.buckets, strict=True):
            lines.append(f'controller_request_duration_seconds_bucket{{{labels},le="{le}"}} {n}')
        lines.append(f'controller_request_duration_seconds_bucket{{{labels},le="+Inf"}} {f.count}')
        lines.append(f"controller_request_duration_seconds_sum{{{labels}}} {f.seconds:.6f}")
        lines.append(f"controller_request_duration_seconds_count{{{labels}}} {f.count}")
    monitor = loopmon.current()
    if monitor is not None:
        lines.append(monitor.render("controller", node).rstrip("\n"))
    return "\n".join(lines) + "\n"


class ControllerMetricsServer:
    def __init__(self, self_id: str, raft: RaftLike, server: ServerView, stats: RequestStats, host: str,
                 port: int) -> None:
        self.self_id = self_id
        self.raft = raft
        self.server = server
        self.stats = stats
        self.host = host
        self.requested_port = port
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.requested_port).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=render(self.self_id, self.raft, self.server, self.stats).encode(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
