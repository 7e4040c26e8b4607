"""The dashboard's figures, pure: brokers (role, HA state, the `/metrics` counters), topics with per-queue offsets,
consumer groups with lag, and the Prometheus lines for the figures `/metrics` did not have before (consumer lag,
topic offsets).

Every counter is read through `container.metrics.COUNTERS`, the table `/metrics` renders, and lag is computed
once here for both the JSON API and `/metrics`: the dashboard and a Prometheus scrape show the same numbers by
construction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

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
    store = broker.store
    out = []
    table = broker.meta.topics
    for name, tc in sorted(table.all().items()):
        queues = []
        for q in _queue_ids(tc):
            queues.append({"queueId": q, "minOffset": store.min_offset_in_queue(name, q),
                           "maxOffset": store.max_offset_in_queue(name, q)})
        out.append({"topic": name, "perm": tc.perm, "order": tc.order, "readQueueNums": tc.read_queue_nums,
                    "writeQueueNums": tc.write_queue_nums, "system": table.is_system_topic(name),
                    "retryOrDlq": is_retry_or_dlq_topic(name),
                    "maxOffsetSum": sum(q["maxOffset"] for q in queues), "queues": queues})
    return out


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
    seen = set()
    for key, offsets in list(broker.meta.offsets.table().items()):
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        seen.add((group, topic))
        queues = []
        for q, committed in sorted(offsets.items()):
            mx = store.max_offset_in_queue(topic, q)
            queues.append({"queueId": q, "brokerOffset": mx, "consumerOffset": committed, "lag": _lag(mx, committed)})
        info = online.get(group)
        yield {"group": group, "topic": topic, "online": len(info.client_ids()) if info is not None else 0,
               "committed": True, "lag": sum(q["lag"] for q in queues), "queues": queues}
    for group, info in list(online.items()):
        for topic in list(info.subscriptions):
            if (group, topic) not in seen:
                yield {"group": group, "topic": topic, "online": len(info.client_ids()), "committed": False,
                       "lag": 0, "queues": []}


def _lag_lines(broker: DashboardBroker, label: str) -> list[str]:
    """``group_rows``' committed rows' lags, without the rows (a scrape's cost on the loop)."""
    max_offset = broker.store.max_offset_in_queue
    lags = []
    for key, offsets in broker.meta.offsets.table().items():
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        lags.append((group, topic, sum(_lag(max_offset(topic, q), c) for q, c in offsets.items())))
    lags.sort()
    return [f'rocketmq_consumer_lag_messages{{broker="{label}",group="{escape_label(g)}",topic="{escape_label(t)}"}}'
            f" {lag}" for g, t, lag in lags]


def _topic_lines(broker: DashboardBroker, label: str) -> list[str]:
    """``topic_rows``' maxOffsetSum, without the rows."""
    max_offset = broker.store.max_offset_in_queue
    return [f'rocketmq_topic_max_offset_sum{{broker="{label}",topic="{escape_label(name)}"}} '
            f"{sum(max_offset(name, q) for q in _queue_ids(tc))}"
            for name, tc in sorted(broker.meta.topics.all().items())]


def per_broker(directory: DashboardDirectory,
               build: Callable[[DashboardBroker], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """`build(broker)` for every hosted broker, as {identity, rows}; a broker that fails shows its error."""
    out = []
    for ident, slot in sorted(directory.brokers.items()):
        try:
            out.append({"identity": ident, "rows": build(slot.broker)})
        except Exception as e:  # noqa: BLE001 - one broken broker must not blank the page for the others
            out.append({"identity": ident, "rows": [], "error": str(e)})
    return out


def prometheus_lines(directory: DashboardDirectory) -> list[str]:
    """`rocketmq_consumer_lag_messages{broker,group,topic}` and `rocketmq_topic_max_offset_sum{broker,topic}`: the
    figures of `group_rows` and `topic_rows`, without building their rows (a scrape's time on the loop)."""
    lag = ["# HELP rocketmq_consumer_lag_messages Messages a group has not consumed on a topic (max - committed)",
           "# TYPE rocketmq_consumer_lag_messages gauge"]
    tops = ["# HELP rocketmq_topic_max_offset_sum Sum of the next queue offsets of a topic's queues",
            "# TYPE rocketmq_topic_max_offset_sum gauge"]
    for ident, slot in sorted(directory.brokers.items()):
        for lines, build in ((lag, _lag_lines), (tops, _topic_lines)):
            try:
                lines += build(slot.broker, escape_label(ident))
            except Exception:  # noqa: BLE001 - one broken broker must not break the scrape of the others
                continue
    return lag + tops
