"""Controller events: the only things written to the Raft log (spec 6.1 event table, ids kept).

Each Raft entry is one event, msgpack-encoded as ``[type_id, field, field, ...]``. Events carry the
preconditions the leader decided under (epochs), so `apply` can re-check them and two racing requests cannot
both win, and `ElectMasterEvent` carries the liveness data the leader decided with, so apply never reads local
heartbeat state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack


class EventType:
    ALTER_SYNC_STATE_SET = 1
    APPLY_BROKER_ID = 2
    ELECT_MASTER = 3
    READ = 4
    CLEAN_BROKER_DATA = 5
    UPDATE_BROKER_ADDRESS = 6


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetEvent:
    broker_name: str
    new_sync_state_set: tuple[int, ...]
    expected_master_broker_id: int
    expected_master_epoch: int
    expected_sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdEvent:
    cluster: str
    broker_name: str
    broker_address: str
    register_check_code: str
    new_broker_id: int


@dataclass(frozen=True, slots=True)
class BrokerLiveness:
    """One replica's heartbeat state as the leader saw it when it decided an election."""

    broker_id: int
    alive: bool
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ElectMasterEvent:
    broker_name: str
    requester_broker_id: int          # -1 = triggered by the controller itself
    designate_elect: bool              # admin forces `requester_broker_id`
    elect_unclean: bool                # enableElectUncleanMaster at decision time
    expected_master_epoch: int
    expected_sync_state_set_epoch: int
    liveness: tuple[BrokerLiveness, ...]


@dataclass(frozen=True, slots=True)
class CleanBrokerDataEvent:
    broker_name: str
    broker_ids: tuple[int, ...] | None   # None = the whole broker set


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddressEvent:
    cluster: str
    broker_name: str
    broker_id: int
    broker_address: str


@dataclass(frozen=True, slots=True)
class ReadEvent:
    """A no-op entry used by log reads (RocketMQ's isProcessReadEvent): answered when it is applied."""


Event = (AlterSyncStateSetEvent | ApplyBrokerIdEvent | ElectMasterEvent | CleanBrokerDataEvent
         | UpdateBrokerAddressEvent | ReadEvent)


class EventDecodeError(Exception):
    pass


def _to_fields(ev: Event) -> list[Any]:
    if isinstance(ev, AlterSyncStateSetEvent):
        return [EventType.ALTER_SYNC_STATE_SET, ev.broker_name, list(ev.new_sync_state_set),
                ev.expected_master_broker_id, ev.expected_master_epoch, ev.expected_sync_state_set_epoch]
    if isinstance(ev, ApplyBrokerIdEvent):
        return [EventType.APPLY_BROKER_ID, ev.cluster, ev.broker_name, ev.broker_address, ev.register_check_code,
                ev.new_broker_id]
    if isinstance(ev, ElectMasterEvent):
        live = [[x.broker_id, x.alive, x.epoch, x.max_offset, x.confirm_offset, x.election_priority]
                for x in ev.liveness]
        return [EventType.ELECT_MASTER, ev.broker_name, ev.requester_broker_id, ev.designate_elect, ev.elect_unclean,
                ev.expected_master_epoch, ev.expected_sync_state_set_epoch, live]
    if isinstance(ev, CleanBrokerDataEvent):
        return [EventType.CLEAN_BROKER_DATA, ev.broker_name, None if ev.broker_ids is None else list(ev.broker_ids)]
    if isinstance(ev, UpdateBrokerAddressEvent):
        return [EventType.UPDATE_BROKER_ADDRESS, ev.cluster, ev.broker_name, ev.broker_id, ev.broker_address]
    return [EventType.READ]


def encode_event(ev: Event) -> bytes:
    out: bytes = msgpack.packb(_to_fields(ev), use_bin_type=True)
    return out


def _from_fields(f: list[Any]) -> Event:
    t = f[0]
    if t == EventType.ALTER_SYNC_STATE_SET:
        return AlterSyncStateSetEvent(str(f[1]), tuple(int(i) for i in f[2]), int(f[3]), int(f[4]), int(f[5]))
    if t == EventType.APPLY_BROKER_ID:
        return ApplyBrokerIdEvent(str(f[1]), str(f[2]), str(f[3]), str(f[4]), int(f[5]))
    if t == EventType.ELECT_MASTER:
        live = tuple(BrokerLiveness(int(x[0]), bool(x[1]), int(x[2]), int(x[3]), int(x[4]), int(x[5])) for x in f[7])
        return ElectMasterEvent(str(f[1]), int(f[2]), bool(f[3]), bool(f[4]), int(f[5]), int(f[6]), live)
    if t == EventType.CLEAN_BROKER_DATA:
        return CleanBrokerDataEvent(str(f[1]), None if f[2] is None else tuple(int(i) for i in f[2]))
    if t == EventType.UPDATE_BROKER_ADDRESS:
        return UpdateBrokerAddressEvent(str(f[1]), str(f[2]), int(f[3]), str(f[4]))
    if t == EventType.READ:
        return ReadEvent()
    raise EventDecodeError(f"unknown controller event type {t!r}")


def decode_event(data: bytes) -> Event:
    try:
        fields = msgpack.unpackb(data, raw=False)
        if not isinstance(fields, list) or not fields:
            raise EventDecodeError(f"controller event is not a non-empty array: {type(fields).__name__}")
        return _from_fields(fields)
    except EventDecodeError:
        raise
    except Exception as e:  # noqa: BLE001 - malformed entry
        raise EventDecodeError(f"malformed controller event: {type(e).__name__}: {e}") from e
