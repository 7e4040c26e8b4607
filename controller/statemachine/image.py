"""The controller's replicated image: every broker set's replicas, master and sync state set (spec 6.1).

The image is mutated only by `controller.statemachine.apply`; everything else reads it. It serialises to
msgpack for Raft snapshots (`encode_image` / `decode_image`), the whole image, not a stub.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

FIRST_BROKER_ID = 1
SNAPSHOT_FORMAT = 1


@dataclass(frozen=True, slots=True)
class BrokerEntry:
    address: str
    check_code: str


@dataclass(slots=True)
class BrokerSet:
    """One broker set (key = brokerName): RocketMQ's BrokerReplicaInfo and SyncStateInfo together."""

    cluster: str
    name: str
    next_broker_id: int = FIRST_BROKER_ID
    brokers: dict[int, BrokerEntry] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def first_time_for_elect(self) -> bool:
        return self.master_epoch == 0

    @property
    def master_address(self) -> str:
        if self.master_broker_id is None:
            return ""
        entry = self.brokers.get(self.master_broker_id)
        return entry.address if entry is not None else ""

    def address_of(self, broker_id: int) -> str:
        entry = self.brokers.get(broker_id)
        return entry.address if entry is not None else ""

    def to_wire(self) -> list[Any]:
        return [
            self.cluster, self.name, self.next_broker_id,
            [[bid, e.address, e.check_code] for bid, e in sorted(self.brokers.items())],
            self.master_broker_id, self.master_epoch, sorted(self.sync_state_set), self.sync_state_set_epoch,
        ]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> BrokerSet:
        cluster, name, next_id, brokers, master, m_epoch, sss, sss_epoch = raw
        return cls(
            cluster=str(cluster), name=str(name), next_broker_id=int(next_id),
            brokers={int(b[0]): BrokerEntry(str(b[1]), str(b[2])) for b in brokers},
            master_broker_id=None if master is None else int(master), master_epoch=int(m_epoch),
            sync_state_set=frozenset(int(i) for i in sss), sync_state_set_epoch=int(sss_epoch),
        )


@dataclass(slots=True)
class ControllerImage:
    sets: dict[str, BrokerSet] = field(default_factory=dict)
    applied_index: int = 0  # last Raft index applied to this image (0 = none)
    # msgpack of each set as of its last snapshot; `apply` drops a set's entry when it changes the set, so a
    # snapshot re-encodes only what changed since the previous one
    packed: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def get(self, broker_name: str) -> BrokerSet | None:
        return self.sets.get(broker_name)

    def touch(self, broker_name: str) -> None:
        self.packed.pop(broker_name, None)


class SnapshotError(Exception):
    """A snapshot blob could not be decoded; the image is left untouched."""


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 2**16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_image(image: ControllerImage) -> bytes:
    """msgpack map {format, applied_index, sets: [set, ...]}; per-set encodings are reused when unchanged."""
    cache = image.packed
    blobs = []
    # insertion order, not sorted: it is the same on every replica (same applies, and a restore keeps the
    # snapshot's order), and sorting 100k names would cost ~10 ms per snapshot
    for name, bset in image.sets.items():
        blob = cache.get(name)
        if blob is None:
            blob = cache[name] = msgpack.packb(bset.to_wire(), use_bin_type=True)
        blobs.append(blob)
    head: bytes = msgpack.packb({"format": SNAPSHOT_FORMAT, "applied_index": image.applied_index}, use_bin_type=True)
    # extend the 2-entry map to 3 entries and append "sets" with the pre-encoded array elements
    assert head[0] == 0x82
    return b"".join([b"\x83", head[1:], msgpack.packb("sets"), _array_header(len(blobs)), *blobs])


def decode_image(data: bytes) -> ControllerImage:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
        if not isinstance(raw, dict) or raw.get("format") != SNAPSHOT_FORMAT:
            raise SnapshotError(f"unknown controller snapshot format: {raw.get('format') if isinstance(raw, dict) else type(raw)}")
        sets = [BrokerSet.from_wire(s) for s in raw["sets"]]
        return ControllerImage(sets={s.name: s for s in sets}, applied_index=int(raw["applied_index"]))
    except SnapshotError:
        raise
    except Exception as e:  # noqa: BLE001 - any decoding problem is a corrupt snapshot
        raise SnapshotError(f"corrupt controller snapshot: {type(e).__name__}: {e}") from e
