"""Deterministic `apply`: the only code that mutates the controller image, identical on every replica.

Every event re-checks the preconditions the leader decided under (epochs, membership); a failed check rejects
the event without touching the image (`ApplyResult.ok == False`), and the proposer re-decides against the newer
image. Nothing here reads a clock, a random source or local heartbeat state.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.elect import CONTROLLER_TRIGGER, choose_master
from controller.statemachine.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    ReadEvent,
    UpdateBrokerAddressEvent,
)
from controller.statemachine.image import FIRST_BROKER_ID, BrokerEntry, BrokerSet, ControllerImage


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What applying one event did. `ok` False = rejected, image untouched. `set_after` is a private copy."""

    ok: bool
    code: int = RC.SUCCESS
    remark: str | None = None
    set_after: BrokerSet | None = None


def _copy(bset: BrokerSet) -> BrokerSet:
    return BrokerSet(bset.cluster, bset.name, bset.next_broker_id, dict(bset.brokers), bset.master_broker_id,
                     bset.master_epoch, bset.sync_state_set, bset.sync_state_set_epoch)


def _reject(code: int, remark: str) -> ApplyResult:
    return ApplyResult(ok=False, code=code, remark=remark)


def _done(bset: BrokerSet | None, code: int = RC.SUCCESS, remark: str | None = None) -> ApplyResult:
    return ApplyResult(ok=True, code=code, remark=remark, set_after=None if bset is None else _copy(bset))


def apply_alter_sync_state_set(image: ControllerImage, ev: AlterSyncStateSetEvent) -> ApplyResult:
    bset = image.get(ev.broker_name)
    if bset is None:
        return _reject(RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"broker set {ev.broker_name} does not exist")
    if bset.master_broker_id != ev.expected_master_broker_id:
        return _reject(RC.CONTROLLER_INVALID_MASTER, "master changed since the request was decided")
    if bset.master_epoch != ev.expected_master_epoch:
        return _reject(RC.CONTROLLER_FENCED_MASTER_EPOCH, "master epoch changed since the request was decided")
    if bset.sync_state_set_epoch != ev.expected_sync_state_set_epoch:
        return _reject(RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, "sync state set epoch changed")
    new = frozenset(ev.new_sync_state_set)
    if not new <= bset.brokers.keys():
        return _reject(RC.CONTROLLER_INVALID_REPLICAS, "sync state set contains an unknown replica")
    if ev.expected_master_broker_id not in new:
        return _reject(RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "sync state set does not contain the master")
    bset.sync_state_set = new
    bset.sync_state_set_epoch += 1
    return _done(bset)


def apply_apply_broker_id(image: ControllerImage, ev: ApplyBrokerIdEvent) -> ApplyResult:
    bset = image.get(ev.broker_name)
    if bset is None:
        if ev.new_broker_id != FIRST_BROKER_ID:
            return _reject(RC.CONTROLLER_BROKER_ID_INVALID, f"the first broker of a set must apply id {FIRST_BROKER_ID}")
        bset = BrokerSet(cluster=ev.cluster, name=ev.broker_name)
        image.sets[ev.broker_name] = bset
    existing = bset.brokers.get(ev.new_broker_id)
    if existing is not None:
        if existing.check_code == ev.register_check_code:
            return _done(bset)  # the same broker retrying: idempotent
        return _reject(RC.CONTROLLER_BROKER_ID_INVALID, f"broker id {ev.new_broker_id} is taken by another broker")
    if ev.new_broker_id < FIRST_BROKER_ID:
        return _reject(RC.CONTROLLER_BROKER_ID_INVALID, f"broker id {ev.new_broker_id} is below {FIRST_BROKER_ID}")
    bset.brokers[ev.new_broker_id] = BrokerEntry(ev.broker_address, ev.register_check_code)
    bset.next_broker_id = max(bset.next_broker_id + 1, ev.new_broker_id + 1)
    return _done(bset)


def apply_elect_master(image: ControllerImage, ev: ElectMasterEvent) -> ApplyResult:
    bset = image.get(ev.broker_name)
    if bset is None:
        return _reject(RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker set {ev.broker_name} does not exist")
    if bset.master_epoch != ev.expected_master_epoch:
        return _reject(RC.CONTROLLER_FENCED_MASTER_EPOCH, "master epoch changed since the election was decided")
    if bset.sync_state_set_epoch != ev.expected_sync_state_set_epoch:
        return _reject(RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, "sync state set changed since the election was decided")
    live = {x.broker_id: x for x in ev.liveness}
    winner = choose_master(bset, live, ev.requester_broker_id, ev.designate_elect, ev.elect_unclean)
    if winner is not None and winner == bset.master_broker_id:
        return _reject(RC.CONTROLLER_MASTER_STILL_EXIST, "the old master is still the best candidate")
    if winner is not None:
        bset.master_broker_id = winner
        bset.master_epoch += 1
        bset.sync_state_set = frozenset((winner,))
        bset.sync_state_set_epoch += 1
        return _done(bset)
    if ev.requester_broker_id != CONTROLLER_TRIGGER or bset.first_time_for_elect:
        # a broker's or admin's failed election changes nothing; nor does the controller on a never-elected set
        return _reject(RC.CONTROLLER_ELECT_MASTER_FAILED, "no broker can become master")
    bset.master_broker_id = None
    bset.master_epoch += 1
    return _done(bset, RC.CONTROLLER_MASTER_NOT_AVAILABLE, "no broker can become master; the set has none now")


def apply_clean_broker_data(image: ControllerImage, ev: CleanBrokerDataEvent) -> ApplyResult:
    bset = image.get(ev.broker_name)
    if bset is None:
        return _reject(RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"broker set {ev.broker_name} does not exist")
    if not ev.broker_ids:
        del image.sets[ev.broker_name]
        return _done(None)
    ids = frozenset(ev.broker_ids)
    for bid in ids:
        bset.brokers.pop(bid, None)
    if not bset.brokers:
        del image.sets[ev.broker_name]
        return _done(None)
    if bset.sync_state_set & ids:
        bset.sync_state_set = bset.sync_state_set - ids
        bset.sync_state_set_epoch += 1
    if bset.master_broker_id is not None and bset.master_broker_id in ids:
        bset.master_broker_id = None
        bset.master_epoch += 1
    return _done(bset)


def apply_update_broker_address(image: ControllerImage, ev: UpdateBrokerAddressEvent) -> ApplyResult:
    bset = image.get(ev.broker_name)
    entry = bset.brokers.get(ev.broker_id) if bset is not None else None
    if bset is None or entry is None:
        return _reject(RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                       f"broker {ev.broker_name}/{ev.broker_id} is not registered")
    bset.brokers[ev.broker_id] = BrokerEntry(ev.broker_address, entry.check_code)
    return _done(bset)


def apply_event(image: ControllerImage, ev: Event) -> ApplyResult:
    if isinstance(ev, ReadEvent):
        return ApplyResult(ok=True)
    if isinstance(ev, AlterSyncStateSetEvent):
        result = apply_alter_sync_state_set(image, ev)
    elif isinstance(ev, ApplyBrokerIdEvent):
        result = apply_apply_broker_id(image, ev)
    elif isinstance(ev, ElectMasterEvent):
        result = apply_elect_master(image, ev)
    elif isinstance(ev, CleanBrokerDataEvent):
        result = apply_clean_broker_data(image, ev)
    else:
        result = apply_update_broker_address(image, ev)
    if result.ok:
        image.touch(ev.broker_name)  # the set changed (or vanished): its cached snapshot encoding is stale
    return result
