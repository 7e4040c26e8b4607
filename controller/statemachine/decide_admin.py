"""Pure decisions for admin requests: 1006 CONTROLLER_GET_SYNC_STATE_DATA and 1011 CLEAN_BROKER_DATA."""

from __future__ import annotations

from typing import Any

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.events import CleanBrokerDataEvent
from controller.statemachine.image import BrokerSet, ControllerImage
from controller.statemachine.reply import Decision, LivenessView, Reply, error


def _replica_entries(bset: BrokerSet, live: LivenessView, ids: list[int]) -> list[dict[str, Any]]:
    return [{"brokerName": bset.name, "brokerId": bid, "brokerAddress": bset.address_of(bid),
             "alive": live.is_alive(bset.name, bid)} for bid in ids]


def replicas_info(bset: BrokerSet, live: LivenessView) -> dict[str, Any]:
    in_sync = sorted(bset.sync_state_set)
    not_in_sync = sorted(set(bset.brokers) - bset.sync_state_set)
    return {
        "masterBrokerId": bset.master_broker_id if bset.master_broker_id is not None else -1,
        "masterAddress": bset.master_address,
        "masterEpoch": bset.master_epoch,
        "syncStateSetEpoch": bset.sync_state_set_epoch,
        "inSyncReplicas": _replica_entries(bset, live, in_sync),
        "notInSyncReplicas": _replica_entries(bset, live, not_in_sync),
    }


def get_sync_state_data(image: ControllerImage, live: LivenessView, broker_names: list[str]) -> Reply:
    table = {name: replicas_info(bset, live) for name in broker_names if (bset := image.get(name)) is not None}
    return Reply(body={"replicasInfoTable": table})


def parse_broker_ids(raw: str | None) -> tuple[int, ...] | None:
    """"1;2;3" -> (1, 2, 3); None/"" -> None (the whole set). Raises ValueError on a bad format."""
    if raw is None or raw.strip() == "":
        return None
    ids = []
    for part in raw.split(";"):
        part = part.strip()
        if not part:
            continue
        ids.append(int(part))
    return tuple(sorted(set(ids))) if ids else None


def clean_broker_data(image: ControllerImage, live: LivenessView, broker_name: str, ids_to_clean: str | None,
                      clean_living: bool) -> Decision:
    bset = image.get(broker_name)
    if bset is None:
        return Decision.answer(error(RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                     f"broker set {broker_name} does not exist"))
    try:
        ids = parse_broker_ids(ids_to_clean)
    except ValueError:
        return Decision.answer(error(RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                     f"bad brokerControllerIdsToClean {ids_to_clean!r}; expected ids like 1;2;3"))
    targets = ids if ids is not None else tuple(sorted(bset.brokers))
    if not clean_living:
        alive = [bid for bid in targets if live.is_alive(broker_name, bid)]
        if alive:
            return Decision.answer(error(
                RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"brokers {alive} of {broker_name} are still alive; stop them or set isCleanLivingBroker=true"))
    return Decision.propose(CleanBrokerDataEvent(broker_name, ids), lambda _r: Reply())
