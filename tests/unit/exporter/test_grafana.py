"""docs/grafana/rocketmq-exporter-dashboard.json: every PromQL expression (panels and variables) names only metric
families the container's /metrics serves (rocketmq-exporter's, container/exporter/families.py; the integration
test checks a real scrape serves them), and the dashboard is well formed for Grafana's import."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any

from container.exporter.families import NAMES

DASHBOARD = pathlib.Path(__file__).resolve().parents[3] / "docs" / "grafana" / "rocketmq-exporter-dashboard.json"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, keywords or label names)."""
    expr = re.sub(r"label_values\((.*),\s*\w+\s*\)", r"\1", expr)  # Grafana's label_values(selector, label)
    expr = _STRINGS.sub("", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = _LABEL_LISTS.sub("", expr)
    out = set()
    for m in _IDENT.finditer(expr):
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or m.group() in KEYWORDS or (m.start() and expr[m.start() - 1] in "$."):
            continue
        if re.fullmatch(r"\d.*|e\d*", m.group()):
            continue
        out.add(m.group())
    return out


def test_the_extractor_skips_functions_keywords_and_labels() -> None:
    assert metric_names('sum by (topic) (rate(a_b{x="y,z"}[5m])) - on(topic) group_right b') == {"a_b", "b"}
    assert metric_names('label_values(rocketmq_broker_tps{cluster=~"$c"}, broker)') == {"rocketmq_broker_tps"}
    assert metric_names("rocketmq_x * 100 > 0.5") == {"rocketmq_x"}


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in doc["panels"]:
        yield p
        yield from p.get("panels", [])


def expressions(doc: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in panels(doc) for t in p.get("targets", [])]
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


def test_every_expression_names_only_families_the_metrics_endpoint_serves() -> None:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = expressions(doc)
    assert len(exprs) > 40
    used = set().union(*(metric_names(e) for e in exprs))
    assert used <= NAMES, f"not served: {sorted(used - NAMES)}"
    # the dashboard shows the exporter's headline families
    assert {"rocketmq_broker_tps", "rocketmq_producer_tps", "rocketmq_consumer_tps", "rocketmq_group_diff",
            "rocketmq_group_retrydiff", "rocketmq_group_dlqdiff", "rocketmq_brokeruntime_pmdt_0ms",
            "rocketmq_client_consume_ok_msg_tps", "rocketmq_group_get_latency_by_storetime"} <= used


def test_the_dashboard_is_well_formed_for_import() -> None:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "cluster", "broker", "topic", "group"} <= variables
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids))
    for p in panels(doc):
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs))
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and refs
