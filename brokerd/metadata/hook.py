"""The one change hook every metadata mutation goes through (RIP-81 style change notifications).

Every manager mutation (topic config, subscription group, consumer offset, delay offset) calls
`MetadataHub.emit(...)` exactly once per changed table entry, after the in-memory table and the manager's
DataVersion were updated; the one caller is `ConfigManager._commit` (manager.py). The hub stamps the change with a per-broker `seq` (one counter shared by all four
managers) and the hub's `stream` id, then hands the frozen `MetadataChange` to every observer.

Design for master -> slave delta replication (a later issue):
* A change record is self-contained: the new value (JSON-able; consumer offsets use `{queueId: offset}`
  with int keys) and the manager's DataVersion *after* the change, so a slave can adopt it verbatim.
* `(stream, seq)` orders records. `stream` is fixed for the life of one hub (one broker incarnation): a
  restarted or newly promoted master gets a new stream, so a slave that sees a foreign stream, or a gap in
  `seq`, knows it missed records and must re-bootstrap from a snapshot (`BrokerMetadata.apply_change`).
* `to_wire()`/`from_wire()` encode a record as msgpack for the replication channel.
* Applying a replicated record on a slave does NOT go through `emit` (it is not a local mutation); the hub's
  separate "applied" observers (`add_applied_observer`) learn about it instead.

Observers must treat a change (including its `value` and `data_version` dicts, shared by all observers)
as read-only. They run synchronously inside the mutation and must be cheap and must not raise: the mutation is
already committed when they run. An exception is logged (`metadata_observer_failed`) and counted, and the
other observers still run. A replication observer that loses a record is detected by the slave's gap check.

Not thread-safe: call only from the owning event loop thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import msgpack
import structlog

from .version import wall_clock_ms

KIND_TOPIC: Final = "topic"
KIND_SUBSCRIPTION_GROUP: Final = "subscription_group"
KIND_CONSUMER_OFFSET: Final = "consumer_offset"
KIND_DELAY_OFFSET: Final = "delay_offset"
KIND_MESSAGE_REQUEST_MODE: Final = "message_request_mode"  # POP/PULL per topic and group (request_mode.py)
KINDS: Final = frozenset({KIND_TOPIC, KIND_SUBSCRIPTION_GROUP, KIND_CONSUMER_OFFSET, KIND_DELAY_OFFSET,
                          KIND_MESSAGE_REQUEST_MODE})

OP_PUT: Final = "put"
OP_DELETE: Final = "delete"
OPS: Final = frozenset({OP_PUT, OP_DELETE})

WIRE_FORMAT_VERSION: Final = 1

ChangeValue = dict[Any, Any] | int | None

log = structlog.get_logger().bind(component="metadata_hub")


@dataclass(frozen=True, slots=True)
class MetadataChange:
    """One committed metadata mutation.

    kind: "topic" | "subscription_group" | "consumer_offset" | "delay_offset" | "message_request_mode"
    op: "put" | "delete"
    key: topic name / group name / "group@topic" (consumer offsets) / str(level) (delay offsets) /
        "topic@group" (message request modes)
    value: topic/group JSON (RocketMQ camelCase), `{queueId: offset}` of the changed queues for consumer
        offsets, an int offset for delay offsets, None for delete
    data_version: the manager's DataVersion JSON after the change
    seq: per-broker, strictly increasing by 1 per emitted change (shared by all managers)
    stream: id of the emitting hub; a new stream means "positions from the old stream are meaningless"
    """

    kind: str
    op: str
    key: str
    value: ChangeValue
    data_version: dict[str, int]
    seq: int
    stream: str = ""

    def to_wire(self) -> bytes:
        """msgpack encoding for the replication channel (int map keys preserved)."""
        body = [WIRE_FORMAT_VERSION, self.kind, self.op, self.key, self.value, self.data_version, self.seq,
                self.stream]
        out: bytes = msgpack.packb(body, use_bin_type=True)
        return out

    @classmethod
    def from_wire(cls, data: bytes) -> MetadataChange:
        """Decode and validate a record from `to_wire`; malformed input raises ValueError."""
        try:
            body = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several unrelated exception types
            raise ValueError(f"metadata change record is not valid msgpack: {e}") from e
        if not isinstance(body, list) or len(body) != 8 or body[0] != WIRE_FORMAT_VERSION:
            raise ValueError("metadata change record: unknown layout or format version")
        _, kind, op, key, value, dv, seq, stream = body
        change = cls(kind, op, key, value, dv, seq, stream)
        change.validate()
        return change

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"metadata change: unknown kind {self.kind!r}")
        if self.op not in OPS:
            raise ValueError(f"metadata change: unknown op {self.op!r}")
        if not isinstance(self.key, str) or not self.key:
            raise ValueError("metadata change: key must be a non-empty string")
        if not isinstance(self.seq, int) or isinstance(self.seq, bool) or self.seq < 1:
            raise ValueError(f"metadata change: bad seq {self.seq!r}")
        if not isinstance(self.stream, str):
            raise ValueError("metadata change: stream must be a string")
        if not isinstance(self.data_version, dict):
            raise ValueError("metadata change: data_version must be an object")
        if self.op == OP_DELETE and self.value is not None:
            raise ValueError("metadata change: delete carries no value")
        if self.op == OP_PUT and self.value is None:
            raise ValueError("metadata change: put needs a value")


class MetadataObserver(Protocol):
    def on_change(self, change: MetadataChange) -> None: ...


class ChangeJournal(Protocol):
    """Where a master writes each local change before it takes effect (RIP-81: ``brokerd/sync/journal.py``
    appends it to the commit log). ``write`` raises to refuse the change: the manager then changes nothing."""

    def write(self, kind: str, op: str, key: str, value: ChangeValue, data_version: dict[str, int],
              created: bool) -> None: ...

    @property
    def last_end(self) -> int:
        """Commit-log end of the last record written (what a caller waits on before answering)."""


class NoopObserver:
    def on_change(self, change: MetadataChange) -> None:
        return None


@dataclass(eq=False)
class RecordingObserver:
    """Keeps every change it sees (tests, and a simple in-memory replication log)."""

    changes: list[MetadataChange] = field(default_factory=list)

    def on_change(self, change: MetadataChange) -> None:
        self.changes.append(change)

    def of_kind(self, kind: str) -> list[MetadataChange]:
        return [c for c in self.changes if c.kind == kind]

    def clear(self) -> None:
        self.changes.clear()


def new_stream_id() -> str:
    """A random stream id for one hub incarnation (identity only, never used for decisions)."""
    return os.urandom(8).hex()


class MetadataHub:
    """One per broker: owns the seq counter, the stream id, the clock and the observer lists.

    `state_version` is stamped into every DataVersion bump (RocketMQ uses the store's state-machine
    version; the broker sets it, e.g. to the master epoch in controller mode).
    """

    def __init__(self, *, stream_id: str | None = None, clock_ms: Callable[[], int] = wall_clock_ms,
                 state_version: int = 0) -> None:
        self._stream = stream_id if stream_id is not None else new_stream_id()
        self._clock_ms = clock_ms
        self._seq = 0
        self._observers: list[MetadataObserver] = []
        self._applied_observers: list[MetadataObserver] = []
        self.state_version = state_version
        self.observer_errors = 0
        self.journal: ChangeJournal | None = None  # set while this broker is a master with incremental sync

    @property
    def seq(self) -> int:
        """The seq of the last emitted change (0 before the first)."""
        return self._seq

    @property
    def stream_id(self) -> str:
        return self._stream

    def now_ms(self) -> int:
        return self._clock_ms()

    def add_observer(self, observer: MetadataObserver) -> None:
        self._observers.append(observer)

    def remove_observer(self, observer: MetadataObserver) -> None:
        """Remove by identity (observers may define value equality). Unknown observers are ignored."""
        self._observers[:] = [o for o in self._observers if o is not observer]

    def add_applied_observer(self, observer: MetadataObserver) -> None:
        """Observers of changes *replicated into* this broker (slave side), not of local mutations."""
        self._applied_observers.append(observer)

    def remove_applied_observer(self, observer: MetadataObserver) -> None:
        self._applied_observers[:] = [o for o in self._applied_observers if o is not observer]

    def emit(self, kind: str, op: str, key: str, value: ChangeValue, data_version: dict[str, int]) -> MetadataChange:
        """Stamp and publish one committed local mutation. Called only by the managers."""
        if kind not in KINDS or op not in OPS:
            raise ValueError(f"metadata change: unknown kind/op {kind!r}/{op!r}")
        self._seq += 1
        change = MetadataChange(kind, op, key, value, data_version, self._seq, self._stream)
        self._deliver(self._observers, change)
        return change

    def notify_applied(self, change: MetadataChange) -> None:
        """Tell the applied-observers that a replicated change was applied (no seq is consumed)."""
        self._deliver(self._applied_observers, change)

    def _deliver(self, observers: list[MetadataObserver], change: MetadataChange) -> None:
        for observer in tuple(observers):
            try:
                observer.on_change(change)
            except Exception:
                self.observer_errors += 1
                log.exception("metadata_observer_failed", kind=change.kind, key=change.key, seq=change.seq,
                              observer=type(observer).__name__)
