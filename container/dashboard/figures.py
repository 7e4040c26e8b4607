"""The dashboard's figures, pure: brokers (role, HA state, the `/metrics` counters), topics with per-queue offsets,
consumer groups with lag, and the Prometheus lines for the figures `/metrics` did not have before (consumer lag,
topic offsets).

Every counter is read through `container.metrics.COUNTERS`, the table `/metrics` renders, and lag is computed
once here for both the JSON API and `/metrics`: the dashboard and a Prometheus scrape show the same numbers by
construction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from operator import itemgetter
from typing import Any

import orjson

from brokerd.loopwork import run_now, sorted_steps
from brokerd.metadata.names import is_retry_or_dlq_topic
from container.dashboard.context import DashboardBroker, DashboardDirectory, TopicView
from container.metrics import COUNTERS, escape_label

TOPIC_GROUP_SEPARATOR = "@"


def counters(broker: DashboardBroker, only: Collection[str] | None = None) -> dict[str, int]:
    """The broker's `/metrics` series by name, or just those `only` names (one broken getter leaves only its own
    series out, as there)."""
    out: dict[str, int] = {}
    for name, _kind, _help, get in COUNTERS:
        if only is not None and name not in only:
            continue
        try:
            out[name] = int(get(broker))
        except Exception:  # noqa: BLE001 - same rule as the scrape: a broken figure must not hide the others
            continue
    return out


def ha_view(status: dict[str, Any]) -> dict[str, Any]:
    """A broker's replication state as the dashboard shows it (from `HostedBroker.ha_status()`)."""
    max_offset = int(status.get("maxOffset", 0))
    slaves = [{"id": sid, "ack": int(s["ack"]), "state": str(s.get("state", "")),
               "lagBytes": max(0, max_offset - int(s["ack"]))}
              for sid, s in sorted(status.get("slaves", {}).items())]
    return {
        "role": str(status.get("role", "")), "controllerMode": bool(status.get("controllerMode", False)),
        "masterEpoch": int(status.get("masterEpoch", 0)), "maxOffset": max_offset,
        "confirmOffset": int(status.get("confirmOffset", 0)),
        "syncStateSet": [int(x) for x in status.get("syncStateSet", [])],
        "syncStateSetEpoch": int(status.get("syncStateSetEpoch", 0)), "slaves": slaves,
        "controllerLeader": status.get("controllerLeader") or "",
        "masterHaAddr": status.get("masterHaAddr") or "",
        "connected": bool(status.get("connected", False)),
        "metadataSnapshot": _snapshot_view(status),
    }


def _snapshot_view(status: dict[str, Any]) -> dict[str, int] | None:
    """The latest metadata snapshot's commit-log position and time (incremental metadata sync; None: off)."""
    snap = (status.get("incrementalSync") or {}).get("snapshot")
    if not snap:
        return None
    return {"logOffset": int(snap.get("metadataSnapshotLogOffset", -1)),
            "time": int(snap.get("metadataSnapshotTime", -1))}  # fmt: skip


def broker_row(identity: str, broker: DashboardBroker) -> dict[str, Any]:
    cfg = broker.cfg
    status, last_error = broker.health()
    try:
        ha = ha_view(broker.ha_status())
    except Exception as e:  # noqa: BLE001 - a broker whose HA state cannot be read still shows its counters
        ha = {"error": str(e)}
    return {"identity": identity, "cluster": cfg.broker_cluster_name, "name": cfg.broker_name,
            "brokerId": cfg.broker_id, "addr": cfg.broker_addr, "configuredRole": cfg.broker_role,
            "status": status, "lastError": last_error, "ha": ha, "metrics": counters(broker),
            "timers": timer_view(broker), "pop": pop_view(broker)}


def timer_view(broker: DashboardBroker) -> dict[str, Any] | None:
    """Timer messages (brokerd/timer): the counters, lateness quantiles and pending timers by due time."""
    try:
        return {**broker.timers.figures(), "pendingByDue": dict(broker.timers.pending_by_due())}
    except Exception:  # noqa: BLE001 - a broker without the figures still shows the rest
        return None


def pop_view(broker: DashboardBroker) -> dict[str, Any] | None:
    """POP consumption (brokerd/pop): whether it is served here, its counters and its groups (in flight, revive
    backlog: in flight past their invisible time, retry backlog: waiting in the retry topic)."""
    try:
        st = broker.pop.stats()
    except Exception:  # noqa: BLE001 - a broker without the figures still shows the rest
        return None
    groups = [{"group": g, **f} for g, f in sorted(st["groups"].items())]
    return {"active": st["active"], "checkpoints": st["checkpoints"], "parked": st["parked"], **st["counters"],
            "groups": groups}


def overview(directory: DashboardDirectory) -> dict[str, Any]:
    rows = [broker_row(ident, slot.broker) for ident, slot in sorted(directory.brokers.items())]
    leaders = sorted({r["ha"].get("controllerLeader", "") for r in rows} - {""})
    return {"brokers": rows, "brokerCount": len(rows), "controllerLeaders": leaders}


def _lag(broker_offset: int, committed: int) -> int:
    return max(0, broker_offset - committed)


def _queue_ids(tc: TopicView) -> range:
    """The queues a topic shows: as many as the larger of its read and write queue counts."""
    return range(max(tc.read_queue_nums, tc.write_queue_nums))


def topic_rows(broker: DashboardBroker) -> list[dict[str, Any]]:
    return list(iter_topic_rows(broker))


def iter_topic_rows(broker: DashboardBroker) -> Iterator[dict[str, Any]]:
    """``topic_rows`` one row at a time, by topic name (the table read from a copy: it may change between rows)."""
    store = broker.store
    table = broker.meta.topics
    for name, tc in sorted(table.all().items()):
        queues = []
        for q in _queue_ids(tc):
            queues.append({"queueId": q, "minOffset": store.min_offset_in_queue(name, q),
                           "maxOffset": store.max_offset_in_queue(name, q)})
        yield {"topic": name, "perm": tc.perm, "order": tc.order, "readQueueNums": tc.read_queue_nums,
               "writeQueueNums": tc.write_queue_nums, "system": table.is_system_topic(name),
               "retryOrDlq": is_retry_or_dlq_topic(name),
               "maxOffsetSum": sum(q["maxOffset"] for q in queues), "queues": queues}


def group_rows(broker: DashboardBroker) -> list[dict[str, Any]]:
    """One row per (group, topic) with committed offsets: per queue the broker's max offset, the committed
    offset and the lag (max - committed, never negative), plus the group's consumers online on this broker.
    A group online on a topic it has not committed on yet has a row without queues (`committed` false)."""
    return sorted(iter_group_rows(broker), key=group_row_key)


def group_row_key(row: dict[str, Any]) -> tuple[str, str]:
    return row["group"], row["topic"]


def iter_group_rows(broker: DashboardBroker) -> Iterator[dict[str, Any]]:
    """``group_rows`` one row at a time, unsorted: a caller may give the loop a turn between rows (the tables'
    entries are read from copies of their lists, so the tables may change meanwhile)."""
    store = broker.store
    online = broker.consumers.groups
    table = broker.meta.offsets.entries()
    for key, offsets in table.items():
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        queues = []
        for q, committed in sorted(offsets.items()):
            mx = store.max_offset_in_queue(topic, q)
            queues.append({"queueId": q, "brokerOffset": mx, "consumerOffset": committed, "lag": _lag(mx, committed)})
        info = online.get(group)
        yield {"group": group, "topic": topic, "online": len(info.client_ids()) if info is not None else 0,
               "committed": True, "lag": sum(q["lag"] for q in queues), "queues": queues}
    for group, info in list(online.items()):
        for topic in list(info.subscriptions):
            if topic + TOPIC_GROUP_SEPARATOR + group not in table:
                yield {"group": group, "topic": topic, "online": len(info.client_ids()), "committed": False,
                       "lag": 0, "queues": []}


def _lag_lines(broker: DashboardBroker, label: str) -> Generator[None, None, list[str]]:
    """``group_rows``' committed rows' lags, without the rows (a scrape's cost on the loop), a step per entry."""
    max_offset = broker.store.max_offset_in_queue
    lags = []
    for key, offsets in broker.meta.offsets.entries().items():
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        lags.append((group, topic, sum(_lag(max_offset(topic, q), c) for q, c in offsets.items())))
        yield
    lags.sort()
    lines = []
    for g, t, lag in lags:
        lines.append(f'rocketmq_consumer_lag_messages{{broker="{label}",group="{escape_label(g)}",'
                     f'topic="{escape_label(t)}"}} {lag}')
        yield
    return lines


def _topic_lines(broker: DashboardBroker, label: str) -> Generator[None, None, list[str]]:
    """``topic_rows``' maxOffsetSum, without the rows, a step per topic."""
    max_offset = broker.store.max_offset_in_queue
    lines = []
    for name, tc in sorted(broker.meta.topics.all().items()):
        lines.append(f'rocketmq_topic_max_offset_sum{{broker="{label}",topic="{escape_label(name)}"}} '
                     f"{sum(max_offset(name, q) for q in _queue_ids(tc))}")
        yield
    return lines


def page_json_steps(directory: DashboardDirectory, build: Callable[[DashboardBroker], Iterable[dict[str, Any]]],
                    key: Callable[[dict[str, Any]], Any] | None = None) -> Generator[None, None, bytearray]:
    """The JSON of a page listing ``build(broker)``'s rows for every hosted broker, ``{"brokers": [{identity, rows}
    ...]}`` (each broker's rows sorted by ``key`` when given; a broker that fails shows its error and no rows), a
    step per row (``brokerd.loopwork.run_in_turns``): each row is encoded as it is built and each encoding freed
    once copied out, so neither building nor freeing a page of 80,000 committed queues (~100k objects, ~7 MB)
    holds the loop at once."""
    out = bytearray(b'{"brokers":[')
    for i, (ident, slot) in enumerate(sorted(directory.brokers.items())):
        if i:
            out += b","
        rows: list[tuple[Any, bytes]] = []
        try:
            for n, row in enumerate(build(slot.broker)):
                rows.append((key(row) if key is not None else n, orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS)))
                yield
        except Exception as e:  # noqa: BLE001 - one broken broker must not blank the page for the others
            out += orjson.dumps({"identity": ident, "rows": [], "error": str(e)})
            continue
        if key is not None:
            rows = yield from sorted_steps(rows, itemgetter(0))
        rows.reverse()  # taken from the end: each row freed as it is copied out
        out += b'{"identity":' + orjson.dumps(ident) + b',"rows":['
        while rows:
            out += rows.pop()[1]
            if rows:
                out += b","
            yield
        out += b"]}"
    out += b"]}"
    return out


def prometheus_lines(directory: DashboardDirectory) -> list[str]:
    return run_now(prometheus_steps(directory))


def prometheus_steps(directory: DashboardDirectory) -> Generator[None, None, list[str]]:
    """`rocketmq_consumer_lag_messages{broker,group,topic}` and `rocketmq_topic_max_offset_sum{broker,topic}`: the
    figures of `group_rows` and `topic_rows`, without building their rows, a step per table entry (a scrape's time
    on the loop)."""
    lag = ["# HELP rocketmq_consumer_lag_messages Messages a group has not consumed on a topic (max - committed)",
           "# TYPE rocketmq_consumer_lag_messages gauge"]
    tops = ["# HELP rocketmq_topic_max_offset_sum Sum of the next queue offsets of a topic's queues",
            "# TYPE rocketmq_topic_max_offset_sum gauge"]
    for ident, slot in sorted(directory.brokers.items()):
        for lines, build in ((lag, _lag_lines), (tops, _topic_lines)):
            try:
                lines += yield from build(slot.broker, escape_label(ident))
            except Exception:  # noqa: BLE001 - one broken broker must not break the scrape of the others
                continue
    return lag + tops
