"""The dashboard of a real `mqbrokercontainer` process after the real RocketMQ client (C++ core) produced: its
JSON API shows exactly the figures `/metrics` shows, its pages are served with a strict CSP, and without a
credentials source it is read-only."""

from __future__ import annotations

import json
import pathlib
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import ClientRun, Cluster, rpc, wait_for

pytestmark = pytest.mark.integration

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(name, sorted labels): value}."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        pairs = [(k, re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v))
                 for k, v in LABEL.findall(labels)]
        out[(name, tuple(sorted(pairs)))] = float(value)
    return out


def metrics_port(c: Cluster) -> int:
    assert c.daemon is not None
    daemon = c.daemon
    line = wait_for(lambda: re.search(r"metrics port (\d+)", daemon.output()), 30, "the container's boot line")
    return int(line.group(1))


def get(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def api(base: str, path: str) -> Any:
    status, _, body = get(base + path)
    assert status == 200, body
    return json.loads(body)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, brokers=1).start()
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


def test_dashboard_figures_match_metrics_after_a_real_producer(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    base = f"http://127.0.0.1:{metrics_port(cluster)}"
    topic, group, count = "T_dash", "G_dash", 120
    assert rpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "4", "writeQueueNums": "4",
                                           "perm": "6"}).code == 0
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": topic}).code == 0, 10, "topic routable")
    code, rows = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=count), tmp_path / "p").wait(120)
    assert code == 0, rows[-3:]
    # a group that consumed 3 messages of queue 0 and nothing else
    assert rpc(cluster.broker_addr(), 15, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                           "commitOffset": "3"}).code == 0

    metrics = parse_metrics(get(base + "/metrics")[2].decode())
    overview = api(base, "/api/overview")
    [broker] = overview["brokers"]
    ident = broker["identity"]
    assert broker["ha"]["role"] == "MASTER" and broker["status"] == "running"
    assert broker["metrics"]["rocketmq_messages_in_total"] == count
    for name, value in broker["metrics"].items():  # every counter the dashboard shows is the scrape's figure
        assert metrics[(name, (("broker", ident),))] == value, name

    [topics] = api(base, "/api/topics")["brokers"]
    row = next(t for t in topics["rows"] if t["topic"] == topic)
    assert [q["queueId"] for q in row["queues"]] == [0, 1, 2, 3]
    assert row["maxOffsetSum"] == count == sum(q["maxOffset"] for q in row["queues"])
    assert metrics[("rocketmq_topic_max_offset_sum", (("broker", ident), ("topic", topic)))] == count

    [groups] = api(base, "/api/groups")["brokers"]
    g = next(r for r in groups["rows"] if r["group"] == group)
    q0 = row["queues"][0]["maxOffset"]
    assert g["queues"] == [{"queueId": 0, "brokerOffset": q0, "consumerOffset": 3, "lag": q0 - 3}]
    assert g["lag"] == q0 - 3
    assert metrics[("rocketmq_consumer_lag_messages", (("broker", ident), ("group", group), ("topic", topic)))] == g["lag"]

    # a malformed frame (closes only that connection, logged as a warning) shows under recent errors
    with socket.create_connection(("127.0.0.1", cluster.ports[0]), timeout=5) as sock:
        sock.sendall(b"\xff\xff\xff\xff garbage")
        assert sock.recv(1) == b""  # closed by the broker
    errors = wait_for(lambda: [e for e in api(base, "/api/errors")["entries"] if "frame_rejected" in e["message"]],
                      10, "the rejected frame under recent errors")
    assert errors[0]["level"] == "warning"

    # pages: served from the package, strict CSP, no inline script
    status, headers, body = get(base + "/dashboard/")
    assert status == 200 and b'<script src="/dashboard/static/app.js" defer></script>' in body
    assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"
    assert get(base + "/dashboard/static/app.js")[0] == 200
    assert get(base + "/dashboard/static/../server.py")[0] == 404
    assert get(base + "/")[0] == 200  # redirected to /dashboard/

    # no credentials source: read-only, said clearly, and admin actions refused
    session = api(base, "/api/session")
    assert session["adminEnabled"] is False and "read-only" in session["notice"]
    body_json = json.dumps({"broker": ident, "topic": "T_nope"}).encode()
    status, _, body = get(base + "/api/topic", body_json, {"Content-Type": "application/json"})
    assert status == 403 and b"disabled" in body
    assert rpc(cluster.broker_addr(), 351, {"topic": "T_nope"}).code != 0
