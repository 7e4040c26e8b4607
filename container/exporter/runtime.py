"""The ``rocketmq_brokeruntime_*`` families from a broker's GET_BROKER_RUNTIME_INFO table, read as rocketmq-exporter's
BrokerRuntimeStats reads it (pure): numbers as they are, the rate lines "<10 s> <60 s> <600 s>", the
putMessageDistributeTime buckets "[<=0ms]:n [0~10ms]:n ...", commitLogDirCapacity "Total : 100.0 GiB, Free : ..."
in bytes, and remainHowManyDataToFlush as the number before its unit ("1.5 KiB" -> 1.5, as the exporter reports
it). A key the table lacks reads as 0 (putLatency99/999: -1, the exporter's default)."""

from __future__ import annotations

from collections.abc import Mapping

from container.exporter.families import (
    CAPACITY,
    PMDT,
    RUNTIME_SCALARS,
    RUNTIME_SCALARS_2,
    RUNTIME_SCALARS_3,
    RUNTIME_TPS,
    TPS_WINDOWS,
    Labels,
)

_UNITS = "KMGTPE"
_DEFAULTS = {"putLatency99": -1.0, "putLatency999": -1.0}


def _num(text: str | None, default: float = 0.0) -> float:
    if text is None:
        return default
    try:
        return float(text.strip().split(" ")[0])
    except (ValueError, IndexError):
        return default


def machine_bytes(human: str) -> float:
    """The exporter's Utils.machineReadableByteCount: "100.0 GiB" -> 100.0 * 1024**3, "512 B" -> 512."""
    parts = human.split(" ")
    if len(parts) < 2:
        return 0.0
    base = _num(parts[0])
    unit = parts[1]
    if unit == "B" or not unit:
        return base
    return base * 1024.0 ** (_UNITS.find(unit[0]) + 1)


def capacity(text: str | None) -> tuple[float, float]:
    """(free, total) bytes of commitLogDirCapacity."""
    if not text:
        return 0.0, 0.0
    arr = text.split(" ")
    if len(arr) < 8:
        return 0.0, 0.0
    total = machine_bytes(f"{arr[2]} {arr[3][:-1]}")
    free = machine_bytes(f"{arr[6]} {arr[7][:-1]}")
    return free, total


def distribute(text: str | None) -> dict[str, float]:
    """putMessageDistributeTime's buckets by description ("<=0ms" -> n); {} when the broker has none yet."""
    out: dict[str, float] = {}
    if not text or text == "null":
        return out
    for token in text.split(" "):
        key, sep, value = token.partition(":")
        if sep:
            out[key.replace("[", "").replace("]", "")] = _num(value)
    return out


def rates(text: str | None) -> tuple[float, float, float]:
    vals = [_num(t) for t in (text or "").split(" ") if t]
    vals += [0.0] * (3 - len(vals))
    return vals[0], vals[1], vals[2]


def runtime_labels(cluster: str, broker_addr: str, table: Mapping[str, str]) -> Labels:
    """(cluster, brokerIP, brokerHost, des, boottime, broker_version) of a broker's runtime families."""
    return (cluster, broker_addr, "", table.get("brokerVersionDesc", ""), table.get("bootTimestamp", "0"),
            table.get("brokerVersion", "0"))


def runtime_samples(table: Mapping[str, str]) -> list[tuple[str, float]]:
    """(family, value) of every runtime family the table yields (the pmdt ones only when it has the buckets)."""
    out: list[tuple[str, float]] = []
    dist = distribute(table.get("putMessageDistributeTime"))
    if dist:
        out += [(name, dist.get(key, 0.0)) for name, _, key in PMDT]
    out += [(name, _num(table.get(key))) for name, _, key in RUNTIME_SCALARS]
    for name, _, key in RUNTIME_TPS:
        line = table.get(key) if key != "getTransferredTps" else table.get(key, table.get("getTransferedTps"))
        r = rates(line)
        out += [(name + suffix, r[at]) for suffix, at in TPS_WINDOWS]
    out += [(name, _num(table.get(key))) for name, _, key in RUNTIME_SCALARS_2]
    free, total = capacity(table.get("commitLogDirCapacity"))
    out += [(CAPACITY[0][0], free), (CAPACITY[1][0], total)]
    out += [(name, _num(table.get(key), _DEFAULTS.get(key, 0.0))) for name, _, key in RUNTIME_SCALARS_3]
    return out
