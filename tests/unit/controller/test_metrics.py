"""Controller `/metrics`, pure: request counting and timing around sync and async handlers, the Prometheus text
(Raft figures, apply lag, leadership changes, heartbeats, a well-formed histogram) and the config keys."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection
from controller.config import ConfigError, config_from_properties
from controller.metrics import RequestStats, render

BASE = {"controllerDLegerGroup": "g", "controllerDLegerPeers": "n0-127.0.0.1:9877", "controllerDLegerSelfId": "n0",  # port-ok: data, nothing binds it
        "controllerStorePath": "/tmp/x"}
CONN = cast(Connection, None)


@dataclass
class Raft:
    term: int = 7
    commit_index: int = 120
    applied_index: int = 117
    is_leader: bool = True


@dataclass
class Live:
    live_count: int = 4


@dataclass
class Elector:
    elections_tried: int = 2
    elections_won: int = 1


@dataclass
class Server:
    live: Live = field(default_factory=Live)
    elector: Elector = field(default_factory=Elector)
    pushes_sent: int = 5
    pushes_failed: int = 1


def scrape(stats: RequestStats) -> str:
    return render("n0", cast(Any, Raft()), Server(), stats)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def lines_of(text: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


async def test_sync_async_and_failing_handlers_are_counted_and_timed() -> None:
    clock = Clock()
    stats = RequestStats(clock)

    def ok(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        clock.t += 0.002
        return cmd.response()

    async def slow_refusal(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        clock.t += 0.3
        return cmd.response(2007, "not leader")

    def broken(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("bug")

    table = stats.wrap_all({RequestCode.BROKER_HEARTBEAT: ok, RequestCode.CONTROLLER_ELECT_MASTER: slow_refusal,
                            RequestCode.CONTROLLER_GET_REPLICA_INFO: broken})
    for _ in range(3):
        table[RequestCode.BROKER_HEARTBEAT](CONN, request(RequestCode.BROKER_HEARTBEAT))
    reply = table[RequestCode.CONTROLLER_ELECT_MASTER](CONN, request(RequestCode.CONTROLLER_ELECT_MASTER))
    assert asyncio.iscoroutine(reply)
    assert (await reply).code == 2007
    with pytest.raises(RuntimeError):
        table[RequestCode.CONTROLLER_GET_REPLICA_INFO](CONN, request(RequestCode.CONTROLLER_GET_REPLICA_INFO))
    stats.on_leadership(True)
    stats.on_leadership(False)
    stats.on_leadership(True)

    m = lines_of(scrape(stats))
    node = 'node="n0"'
    assert m[f"controller_raft_term{{{node}}}"] == "7" and m[f"controller_raft_apply_lag{{{node}}}"] == "3"
    assert m[f"controller_raft_leader{{{node}}}"] == "1" and m[f"controller_live_brokers{{{node}}}"] == "4"
    assert m[f"controller_broker_heartbeats_total{{{node}}}"] == "3"
    assert m[f'controller_raft_leadership_changes_total{{{node},to="leader"}}'] == "2"
    assert m[f'controller_raft_leadership_changes_total{{{node},to="follower"}}'] == "1"
    elect = f'{node},request="CONTROLLER_ELECT_MASTER"'
    assert m[f"controller_requests_total{{{elect}}}"] == "1" and m[f"controller_request_failures_total{{{elect}}}"] == "1"
    assert m[f'controller_request_duration_seconds_bucket{{{elect},le="0.25"}}'] == "0"
    assert m[f'controller_request_duration_seconds_bucket{{{elect},le="0.5"}}'] == "1"
    hb = f'{node},request="BROKER_HEARTBEAT"'
    assert m[f'controller_request_duration_seconds_bucket{{{hb},le="0.001"}}'] == "0"
    assert m[f'controller_request_duration_seconds_bucket{{{hb},le="0.0025"}}'] == "3"
    assert m[f'controller_request_duration_seconds_bucket{{{hb},le="+Inf"}}'] == "3"
    assert float(m[f"controller_request_duration_seconds_sum{{{hb}}}"]) == pytest.approx(0.006)
    assert m[f'controller_request_failures_total{{{node},request="CONTROLLER_GET_REPLICA_INFO"}}'] == "1"


def test_histogram_buckets_are_cumulative() -> None:
    stats = RequestStats()
    for s in (0.0001, 0.003, 0.003, 0.2, 9.0):
        stats.observe(1004, s, None)
    buckets = [int(v) for k, v in lines_of(scrape(stats)).items() if "_bucket" in k]
    assert buckets == sorted(buckets) and buckets[-1] == 5 and buckets[-2] == 4


def test_metrics_config_keys() -> None:
    cfg = config_from_properties(BASE)
    assert cfg.metrics_port == 0 and cfg.metrics_listen_host == "127.0.0.1"
    assert config_from_properties({**BASE, "controllerMetricsPort": "-1"}).metrics_port == -1
    for bad in ("-2", "70000"):
        with pytest.raises(ConfigError, match="controllerMetricsPort"):
            config_from_properties({**BASE, "controllerMetricsPort": bad})
    with pytest.raises(ConfigError, match="controllerMetricsListenHost"):
        config_from_properties({**BASE, "controllerMetricsListenHost": " "})


def test_label_values_are_request_names() -> None:
    text = scrape(RequestStats())
    assert "request=" not in text  # nothing served yet: no per-request series
    stats: Any = RequestStats()
    stats.observe(4242, 0.001, None)  # a code without a name is labelled by its number
    assert 'request="4242"' in scrape(stats)


async def test_the_loop_monitors_stalls_and_collector_pauses_are_on_the_members_metrics() -> None:
    from brokerd import loopmon
    from controller.gcpolicy import GcPolicy

    policy = GcPolicy(freeze_interval_s=60, full_interval_s=0)
    policy.start()
    try:
        assert policy.monitor is loopmon.current() and policy.monitor is not None
        bucket = 'controller_loop_stall_seconds_bucket{node="n0",le="+Inf"}'
        before = int(lines_of(scrape(RequestStats()))[bucket])
        policy.monitor.observe_stall(0.012)
        got = lines_of(scrape(RequestStats()))
        assert int(got[bucket]) == before + 1
        assert float(got['controller_loop_stall_max_seconds{node="n0"}']) >= 0.012
        assert 'controller_gc_pause_seconds_count{node="n0",generation="2"}' in got
        assert int(got['controller_gc_frozen_objects{node="n0"}']) > 0
    finally:
        await policy.stop()
    assert loopmon.current() is None  # the policy's stop ends the monitor it started
