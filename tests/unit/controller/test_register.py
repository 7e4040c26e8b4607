"""Broker registration decisions and their apply: 1012, 1013, 1003, 1004 (spec 6.2)."""

from __future__ import annotations

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.apply import apply_event
from controller.statemachine.decide_election import elect_master
from controller.statemachine.decide_register import (
    apply_broker_id,
    get_next_broker_id,
    get_replica_info,
    register_broker,
)
from controller.statemachine.events import UpdateBrokerAddressEvent
from controller.statemachine.image import ControllerImage
from tests.unit.controller.helpers import ScriptedLiveness, add_set, run


def test_unknown_set_next_id_is_one_and_first_apply_must_be_one() -> None:
    image = ControllerImage()
    assert get_next_broker_id(image, "c1", "b").header["nextBrokerId"] == "1"
    r = run(image, apply_broker_id(image, "c1", "b", 2, "10.0.0.2:1;5"))
    assert r.code == RC.CONTROLLER_BROKER_ID_INVALID
    assert "b" not in image.sets
    r = run(image, apply_broker_id(image, "c1", "b", 1, "10.0.0.1:1;5"))
    assert r.code == RC.SUCCESS and r.header == {"clusterName": "c1", "brokerName": "b"}
    bset = image.sets["b"]
    assert bset.brokers[1].address == "10.0.0.1:1" and bset.brokers[1].check_code == "10.0.0.1:1;5"
    assert get_next_broker_id(image, "c1", "b").header["nextBrokerId"] == "2"


def test_taken_id_is_refused_unless_same_check_code() -> None:
    image = ControllerImage()
    add_set(image, "b", 2)
    same = apply_broker_id(image, "c1", "b", 2, "10.0.0.2:10911;2")  # port-ok: address data, nothing binds it
    assert same.event is None and same.reply is not None and same.reply.code == RC.SUCCESS  # idempotent retry
    other = apply_broker_id(image, "c1", "b", 2, "10.0.0.9:10911;9")  # port-ok: address data, nothing binds it
    assert other.reply is not None and other.reply.code == RC.CONTROLLER_BROKER_ID_INVALID
    assert image.sets["b"].brokers[2].address == "10.0.0.2:10911"  # port-ok: address data, nothing binds it


def test_racing_applications_for_one_id_only_one_wins() -> None:
    image = ControllerImage()
    add_set(image, "b", 1)
    d1 = apply_broker_id(image, "c1", "b", 2, "10.0.0.2:1;1")
    d2 = apply_broker_id(image, "c1", "b", 2, "10.0.0.3:1;2")  # decided against the same image
    assert d1.event is not None and d2.event is not None
    assert apply_event(image, d1.event).ok
    second = apply_event(image, d2.event)
    assert not second.ok and second.code == RC.CONTROLLER_BROKER_ID_INVALID
    assert image.sets["b"].brokers[2].address == "10.0.0.2:1"
    # the loser re-decides against the new image and gets the spec's answer
    assert run(image, apply_broker_id(image, "c1", "b", 2, "10.0.0.3:1;2")).code == RC.CONTROLLER_BROKER_ID_INVALID


def test_next_id_skips_past_an_explicitly_applied_high_id() -> None:
    image = ControllerImage()
    add_set(image, "b", 1)
    assert run(image, apply_broker_id(image, "c1", "b", 7, "a;7")).code == RC.SUCCESS
    assert get_next_broker_id(image, "c1", "b").header["nextBrokerId"] == "8"


def test_register_unknown_broker_needs_registration() -> None:
    image = ControllerImage()
    live = ScriptedLiveness()
    assert run(image, register_broker(image, live, "c1", "b", 1, "x:1")).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    add_set(image, "b", 1)
    assert run(image, register_broker(image, live, "c1", "b", 5, "x:1")).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_register_reports_master_only_when_alive_and_updates_address() -> None:
    image = ControllerImage()
    live = ScriptedLiveness()
    add_set(image, "b", 2)
    assert run(image, elect_master(image, live, "b", 1, False, False)).code == RC.SUCCESS  # first election
    live.set_alive("b", 1, 2)
    d = register_broker(image, live, "c1", "b", 2, "10.0.0.2:10911")  # port-ok: address data, nothing binds it
    assert d.event is None and d.reply is not None
    assert d.reply.header["masterBrokerId"] == "1" and d.reply.header["masterAddress"] == "10.0.0.1:10911"  # port-ok: address data, nothing binds it
    assert d.reply.header["masterEpoch"] == "1" and d.reply.body == {"syncStateSet": [1], "syncStateSetEpoch": 1}
    live.kill("b", 1)
    r = run(image, register_broker(image, live, "c1", "b", 2, "10.0.0.2:10911"))  # port-ok: address data, nothing binds it
    assert "masterBrokerId" not in r.header and "masterAddress" not in r.header
    # the master restarts on a new address: the event carries it and the reply shows it
    live.set_alive("b", 1)
    d = register_broker(image, live, "c1", "b", 1, "10.0.0.1:20000")
    assert isinstance(d.event, UpdateBrokerAddressEvent)
    r = run(image, d)
    assert r.header["masterAddress"] == "10.0.0.1:20000"
    assert image.sets["b"].brokers[1].check_code == "10.0.0.1:10911;1"  # check code kept  # port-ok: address data, nothing binds it


def test_replica_info() -> None:
    image = ControllerImage()
    assert get_replica_info(image, "nope").code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    add_set(image, "b", 2)
    r = get_replica_info(image, "b")
    assert r.code == RC.SUCCESS and r.header == {"masterEpoch": "0"}
    run(image, elect_master(image, ScriptedLiveness(), "b", 2, False, False))
    r = get_replica_info(image, "b")
    assert r.header == {"masterBrokerId": "2", "masterAddress": "10.0.0.2:10911", "masterEpoch": "1"}  # port-ok: address data, nothing binds it
    assert r.body == {"syncStateSet": [2], "syncStateSetEpoch": 1}
