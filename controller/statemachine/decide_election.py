"""Pure decisions for 1002 CONTROLLER_ELECT_MASTER and 1001 CONTROLLER_ALTER_SYNC_STATE_SET (spec 6.2, 6.3)."""

from __future__ import annotations

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.apply import ApplyResult
from controller.statemachine.elect import CONTROLLER_TRIGGER, choose_master
from controller.statemachine.events import AlterSyncStateSetEvent, BrokerLiveness, ElectMasterEvent
from controller.statemachine.image import BrokerSet, ControllerImage
from controller.statemachine.reply import (
    Decision,
    LivenessView,
    Reply,
    elect_master_body,
    error,
    header,
    master_header,
    sync_state_set_body,
)


def liveness_of(bset: BrokerSet, live: LivenessView) -> tuple[BrokerLiveness, ...]:
    """The heartbeat data an ElectMasterEvent carries: one record per replica, sorted by id."""
    return tuple(live.liveness(bset.name, bid) for bid in sorted(bset.brokers))


def _elected_reply(r: ApplyResult) -> Reply:
    assert r.set_after is not None
    bset = r.set_after
    if r.code != RC.SUCCESS:  # controller-triggered election that found nobody: the set has no master now
        return Reply(code=r.code, remark=r.remark, header=master_header(bset))
    return Reply(header=master_header(bset), body=elect_master_body(bset))


def elect_master(image: ControllerImage, live: LivenessView, broker_name: str, broker_id: int, designate: bool,
                 unclean: bool) -> Decision:
    bset = image.get(broker_name)
    if bset is None:
        return Decision.answer(error(RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                                     f"broker set {broker_name} is not registered"))
    if broker_id != CONTROLLER_TRIGGER and broker_id not in bset.brokers:
        return Decision.answer(error(RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                                     f"broker {broker_name}/{broker_id} is not registered"))
    if designate and broker_id == CONTROLLER_TRIGGER:
        return Decision.answer(error(RC.CONTROLLER_INVALID_REQUEST, "designateElect needs a brokerId"))
    liveness = liveness_of(bset, live)
    winner = choose_master(bset, {x.broker_id: x for x in liveness}, broker_id, designate, unclean)
    if winner is not None and winner == bset.master_broker_id:
        return Decision.answer(Reply(code=RC.CONTROLLER_MASTER_STILL_EXIST,
                                     remark=f"broker {winner} is still the master of {broker_name}",
                                     header=master_header(bset), body=elect_master_body(bset)))
    if winner is None and (broker_id != CONTROLLER_TRIGGER or bset.first_time_for_elect):
        return Decision.answer(error(RC.CONTROLLER_ELECT_MASTER_FAILED,
                                     f"no replica of {broker_name} can become master"))
    if winner is None and bset.master_broker_id is None and not bset.first_time_for_elect:
        # already masterless: another "not elected" event would only bump the epoch
        return Decision.answer(Reply(code=RC.CONTROLLER_MASTER_NOT_AVAILABLE,
                                     remark=f"no replica of {broker_name} can become master",
                                     header=master_header(bset)))
    ev = ElectMasterEvent(broker_name, broker_id, designate, unclean, bset.master_epoch, bset.sync_state_set_epoch,
                          liveness)
    return Decision.propose(ev, _elected_reply)


def alter_sync_state_set(image: ControllerImage, live: LivenessView, broker_name: str, master_id: int,
                         master_epoch: int, new_set: frozenset[int], new_set_epoch: int) -> Decision:
    def fail(code: int, remark: str) -> Decision:
        return Decision.answer(error(code, remark))

    bset = image.get(broker_name)
    if bset is None:
        return fail(RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"broker set {broker_name} does not exist")
    if new_set == bset.sync_state_set:
        return fail(RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the new sync state set equals the current one")
    if bset.master_broker_id != master_id:
        return fail(RC.CONTROLLER_INVALID_MASTER,
                    f"broker {master_id} is not the master of {broker_name} (master: {bset.master_broker_id})")
    if bset.master_epoch != master_epoch:
        return fail(RC.CONTROLLER_FENCED_MASTER_EPOCH,
                    f"master epoch {master_epoch} is stale (current {bset.master_epoch})")
    if bset.sync_state_set_epoch != new_set_epoch:
        return fail(RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                    f"sync state set epoch {new_set_epoch} is stale (current {bset.sync_state_set_epoch})")
    unknown = sorted(new_set - bset.brokers.keys())
    if unknown:
        return fail(RC.CONTROLLER_INVALID_REPLICAS, f"unknown replicas {unknown} in the new sync state set")
    dead = [bid for bid in sorted(new_set) if not live.is_alive(broker_name, bid)]
    if dead:
        return fail(RC.CONTROLLER_BROKER_NOT_ALIVE, f"replicas {dead} of {broker_name} are not alive")
    if master_id not in new_set:
        return fail(RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the new sync state set does not contain the master")
    ev = AlterSyncStateSetEvent(broker_name, tuple(sorted(new_set)), master_id, master_epoch, new_set_epoch)

    def build(r: ApplyResult) -> Reply:
        assert r.set_after is not None
        return Reply(header=header(newSyncStateSetEpoch=r.set_after.sync_state_set_epoch),
                     body=sync_state_set_body(r.set_after))

    return Decision.propose(ev, build)
