"""What a chaos run records: every send and its outcome, every delivery, offset commits and reads, metadata
operations, the final read-back of the store, role samples, faults and crashes, and the controller history.

Plain dataclasses, JSON round-trippable (``to_json`` / ``History.from_json``), so a result file can be
re-checked later. Times are seconds since the run started (``time.monotonic() - t0``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from controller.linearizability import UNKNOWN, Operation


@dataclass
class Send:
    """One message a producer tried to send (retries of the same id are one Send each)."""

    id: str
    bset: str  # broker set (brokerName)
    topic: str
    producer: str
    seq: int  # per producer and queue, increasing
    queue: int
    call: float
    ret: float | None = None  # None: no answer (timeout, connection lost): outcome unknown
    ok: bool = False  # acknowledged (SEND_OK)
    code: int | None = None
    offset: int | None = None  # queue offset the broker answered
    broker: str = ""  # the address it was sent to (the broker that answered, when it answered)


@dataclass
class Delivery:
    id: str
    bset: str
    topic: str
    queue: int
    offset: int
    t: float
    consumer: str = "c0"


@dataclass
class Commit:
    """An offset commit (UPDATE_CONSUMER_OFFSET) and whether the broker acknowledged it."""

    group: str
    bset: str
    topic: str
    queue: int
    offset: int
    call: float
    ret: float | None = None
    ok: bool = False
    broker: str = ""


@dataclass
class OffsetRead:
    """A committed offset the broker reported (QUERY_CONSUMER_OFFSET), -1 when it has none."""

    group: str
    bset: str
    topic: str
    queue: int
    offset: int
    t: float
    broker: str = ""
    call: float | None = None  # when the read was sent (``t`` is when its answer arrived)


@dataclass
class MetaOp:
    """A topic or subscription group created by an admin call."""

    kind: str  # "topic" | "group"
    name: str
    bset: str
    call: float
    ret: float | None = None
    ok: bool = False
    broker: str = ""


@dataclass
class StoredMessage:
    """One message found by the final read-back (every queue from offset 0)."""

    id: str
    bset: str
    topic: str
    queue: int
    offset: int
    producer: str = ""
    seq: int = -1


@dataclass
class RoleSample:
    """A broker's role as it answered a poll: ``call``/``ret`` bound when it was true."""

    bset: str
    broker: str
    master: bool
    writable: bool
    epoch: int | None
    call: float
    ret: float


@dataclass
class FaultEvent:
    """A fault as executed: ``start`` (decided) <= ``applied`` (in force) <= ``healing`` (heal begins) <= ``end``
    (healed) <= ``ready`` (the deployment was ready again). ``cut``: the directed node pairs whose packets were
    dropped; ``state``: the deployment's replica state when the fault was applied (HA: per broker set the
    master, its epoch and the sync state set, as the controller saw them)."""

    kind: str
    target: str
    start: float
    end: float | None = None
    detail: str = ""
    applied: float | None = None
    healing: float | None = None
    ready: float | None = None
    cut: list[list[str]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class Crash:
    """A process of a broker set stopped without a clean shutdown (kill) or lost its page cache (powerloss)."""

    node: str
    bset: str
    kind: str  # "kill" | "powerloss"
    t: float  # the process was dead (acknowledgements stamped later were sent before, and read late)
    restart: float | None = None  # its next incarnation was started


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    offset_reads: list[OffsetRead] = field(default_factory=list)
    meta: list[MetaOp] = field(default_factory=list)
    stored: list[StoredMessage] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)  # records the read-back could not decode or verify
    meta_present: dict[str, list[str]] = field(default_factory=dict)  # "topic"/"group" -> names found at the end
    roles: list[RoleSample] = field(default_factory=list)
    faults: list[FaultEvent] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)
    controller_ops: list[Operation] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # e.g. a pull moving the consumer ("offset-moved")
    brokers: dict[str, list[str]] = field(default_factory=dict)  # broker address -> [process, broker set]
    controllers: list[str] = field(default_factory=list)  # controller process names
    end: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "controller_ops":
                out[f.name] = [op_to_json(op) for op in v]
            elif isinstance(v, list):
                out[f.name] = [dataclasses.asdict(x) if dataclasses.is_dataclass(x) and not isinstance(x, type) else x
                               for x in v]
            else:
                out[f.name] = v
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> History:
        types: dict[str, Any] = {"sends": Send, "deliveries": Delivery, "commits": Commit, "offset_reads": OffsetRead,
                                 "meta": MetaOp, "stored": StoredMessage, "roles": RoleSample, "faults": FaultEvent,
                                 "crashes": Crash}
        h = cls()
        for name, typ in types.items():
            setattr(h, name, [typ(**x) for x in doc.get(name, [])])
        h.corrupt = list(doc.get("corrupt", []))
        h.meta_present = {k: list(v) for k, v in doc.get("meta_present", {}).items()}
        h.controller_ops = [op_from_json(x) for x in doc.get("controller_ops", [])]
        h.events = [dict(x) for x in doc.get("events", [])]
        h.brokers = {k: list(v) for k, v in doc.get("brokers", {}).items()}
        h.controllers = list(doc.get("controllers", []))
        h.end = float(doc.get("end", 0.0))
        return h


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def op_to_json(op: Operation) -> dict[str, Any]:
    out = "?" if op.output is UNKNOWN else op.output
    return {"client": op.client, "key": op.key, "kind": op.kind, "input": op.input, "output": out,
            "unknown": op.output is UNKNOWN, "call": op.call, "ret": op.ret}


def op_from_json(d: dict[str, Any]) -> Operation:
    output = UNKNOWN if d.get("unknown") else _freeze(d["output"])
    return Operation(d["client"], d["key"], d["kind"], _freeze(d["input"]), output, d["call"], d["ret"])
