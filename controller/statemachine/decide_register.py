"""Pure decisions for broker registration (spec 6.2: 1012 GET_NEXT_BROKER_ID, 1013 APPLY_BROKER_ID,
1003 REGISTER_BROKER) and 1004 GET_REPLICA_INFO."""

from __future__ import annotations

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.apply import ApplyResult
from controller.statemachine.events import ApplyBrokerIdEvent, UpdateBrokerAddressEvent
from controller.statemachine.image import FIRST_BROKER_ID, BrokerSet, ControllerImage
from controller.statemachine.reply import (
    Decision,
    LivenessView,
    Reply,
    error,
    header,
    master_header,
    sync_state_set_body,
)


def get_next_broker_id(image: ControllerImage, cluster: str, broker_name: str) -> Reply:
    bset = image.get(broker_name)
    next_id = bset.next_broker_id if bset is not None else FIRST_BROKER_ID
    return Reply(header=header(clusterName=cluster, brokerName=broker_name, nextBrokerId=next_id))


def check_code_address(register_check_code: str) -> str:
    """RocketMQ's registerCheckCode is "<brokerAddress>;<currentTimeMillis>"."""
    return register_check_code.split(";", 1)[0]


def apply_broker_id(image: ControllerImage, cluster: str, broker_name: str, applied_id: int,
                    register_check_code: str) -> Decision:
    ok = Reply(header=header(clusterName=cluster, brokerName=broker_name))
    bset = image.get(broker_name)
    if applied_id < FIRST_BROKER_ID:
        return Decision.answer(error(RC.CONTROLLER_BROKER_ID_INVALID, f"broker id {applied_id} is invalid"))
    if bset is None and applied_id != FIRST_BROKER_ID:
        return Decision.answer(error(
            RC.CONTROLLER_BROKER_ID_INVALID,
            f"broker set {broker_name} is new, so the first id must be {FIRST_BROKER_ID}, not {applied_id}"))
    if bset is not None:
        existing = bset.brokers.get(applied_id)
        if existing is not None:
            if existing.check_code == register_check_code:
                return Decision.answer(ok)
            return Decision.answer(error(
                RC.CONTROLLER_BROKER_ID_INVALID,
                f"broker id {applied_id} of {broker_name} is already taken; ask for the next broker id again"))
    ev = ApplyBrokerIdEvent(cluster, broker_name, check_code_address(register_check_code), register_check_code,
                            applied_id)
    return Decision.propose(ev, lambda _r: ok)


def _register_reply(cluster: str, broker_name: str, bset: BrokerSet, live: LivenessView) -> Reply:
    master = bset.master_broker_id
    master_alive = master is not None and live.is_alive(broker_name, master)
    hdr = header(clusterName=cluster, brokerName=broker_name,
                 masterEpoch=bset.master_epoch, syncStateSetEpoch=bset.sync_state_set_epoch)
    if master_alive:
        hdr.update(header(masterBrokerId=master, masterAddress=bset.master_address))
    return Reply(header=hdr, body=sync_state_set_body(bset))


def register_broker(image: ControllerImage, live: LivenessView, cluster: str, broker_name: str, broker_id: int,
                    broker_address: str) -> Decision:
    bset = image.get(broker_name)
    if bset is None or broker_id not in bset.brokers:
        return Decision.answer(error(
            RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            f"broker {broker_name}/{broker_id} has not applied for a broker id; apply first"))
    if bset.brokers[broker_id].address == broker_address:
        return Decision.answer(_register_reply(cluster, broker_name, bset, live))
    ev = UpdateBrokerAddressEvent(cluster, broker_name, broker_id, broker_address)

    def build(r: ApplyResult) -> Reply:
        assert r.set_after is not None
        return _register_reply(cluster, broker_name, r.set_after, live)

    return Decision.propose(ev, build)


def get_replica_info(image: ControllerImage, broker_name: str) -> Reply:
    bset = image.get(broker_name)
    if bset is None:
        return error(RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker set {broker_name} does not exist")
    return Reply(header=master_header(bset, with_sss_epoch=False), body=sync_state_set_body(bset))
