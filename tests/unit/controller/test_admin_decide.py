"""CLEAN_BROKER_DATA (1011) and GET_SYNC_STATE_DATA (1006) decisions."""

from __future__ import annotations

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.decide_admin import clean_broker_data, get_sync_state_data
from controller.statemachine.decide_election import alter_sync_state_set, elect_master
from controller.statemachine.image import ControllerImage
from tests.unit.controller.helpers import ScriptedLiveness, add_set, run


def _image(live: ScriptedLiveness) -> ControllerImage:
    image = ControllerImage()
    add_set(image, "b", 3)
    run(image, elect_master(image, live, "b", 1, False, False))
    live.set_alive("b", 1, 2, 3)
    run(image, alter_sync_state_set(image, live, "b", 1, 1, frozenset({1, 2}), 1))
    return image


def test_clean_refuses_unknown_set_bad_ids_and_living_brokers() -> None:
    live = ScriptedLiveness()
    image = _image(live)
    assert run(image, clean_broker_data(image, live, "nope", None, False)).code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    r = run(image, clean_broker_data(image, live, "b", "1;x", False))
    assert r.code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA and "1;x" in (r.remark or "")
    r = run(image, clean_broker_data(image, live, "b", "3", False))
    assert r.code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA and "alive" in (r.remark or "")
    assert set(image.sets["b"].brokers) == {1, 2, 3}


def test_clean_some_ids_updates_sync_state_set_and_master() -> None:
    live = ScriptedLiveness()
    image = _image(live)
    live.kill("b", 1, 3)
    assert run(image, clean_broker_data(image, live, "b", "3", False)).code == RC.SUCCESS
    bset = image.sets["b"]
    assert set(bset.brokers) == {1, 2} and bset.sync_state_set == {1, 2} and bset.sync_state_set_epoch == 2
    assert run(image, clean_broker_data(image, live, "b", "1", False)).code == RC.SUCCESS
    assert bset.master_broker_id is None and bset.master_epoch == 2
    assert bset.sync_state_set == {2} and bset.sync_state_set_epoch == 3


def test_clean_living_broker_and_whole_set() -> None:
    live = ScriptedLiveness()
    image = _image(live)
    assert run(image, clean_broker_data(image, live, "b", None, True)).code == RC.SUCCESS
    assert "b" not in image.sets
    image = _image(live)
    live.kill("b", 1, 2, 3)
    assert run(image, clean_broker_data(image, live, "b", "1;2;3", False)).code == RC.SUCCESS
    assert "b" not in image.sets  # last broker removed -> set removed


def test_sync_state_data_body_shape() -> None:
    live = ScriptedLiveness()
    image = _image(live)
    live.kill("b", 2)
    r = get_sync_state_data(image, live, ["b", "unknown"])
    assert r.code == RC.SUCCESS
    assert r.body == {"replicasInfoTable": {"b": {
        "masterBrokerId": 1, "masterAddress": "10.0.0.1:10911", "masterEpoch": 1, "syncStateSetEpoch": 2,  # port-ok: address data, nothing binds it
        "inSyncReplicas": [
            {"brokerName": "b", "brokerId": 1, "brokerAddress": "10.0.0.1:10911", "alive": True},  # port-ok: address data, nothing binds it
            {"brokerName": "b", "brokerId": 2, "brokerAddress": "10.0.0.2:10911", "alive": False}],  # port-ok: address data, nothing binds it
        "notInSyncReplicas": [
            {"brokerName": "b", "brokerId": 3, "brokerAddress": "10.0.0.3:10911", "alive": True}],  # port-ok: address data, nothing binds it
    }}}
