"""ElectMaster and AlterSyncStateSet: policy (spec 6.3), fencing at apply time, every error code in order."""

from __future__ import annotations

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.apply import apply_event
from controller.statemachine.decide_election import alter_sync_state_set, elect_master
from controller.statemachine.events import ElectMasterEvent
from controller.statemachine.image import ControllerImage
from tests.unit.controller.helpers import ScriptedLiveness, add_set, run

CTRL = -1


def _three(live: ScriptedLiveness) -> ControllerImage:
    """Set "b" with brokers 1..3, broker 1 elected first, sync state set {1,2,3} at epoch 2."""
    image = ControllerImage()
    add_set(image, "b", 3)
    assert run(image, elect_master(image, live, "b", 1, False, False)).code == RC.SUCCESS
    live.set_alive("b", 1, 2, 3)
    r = run(image, alter_sync_state_set(image, live, "b", 1, 1, frozenset({1, 2, 3}), 1))
    assert r.code == RC.SUCCESS and r.header == {"newSyncStateSetEpoch": "2"}
    assert r.body == {"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 2}
    return image


def test_first_election_requester_wins_without_liveness() -> None:
    image = ControllerImage()
    add_set(image, "b", 2)
    r = run(image, elect_master(image, ScriptedLiveness(), "b", 2, False, False))
    assert r.code == RC.SUCCESS
    assert r.header == {"masterBrokerId": "2", "masterAddress": "10.0.0.2:10911", "masterEpoch": "1",  # port-ok: address data, nothing binds it
                        "syncStateSetEpoch": "1"}
    assert r.body == {"brokerMemberGroup": {"cluster": "c1", "brokerName": "b",
                                            "brokerAddrs": {"1": "10.0.0.1:10911", "2": "10.0.0.2:10911"}},  # port-ok: address data, nothing binds it
                      "syncStateSet": [2]}


def test_unknown_set_or_broker_needs_registration() -> None:
    image = ControllerImage()
    live = ScriptedLiveness()
    assert run(image, elect_master(image, live, "x", 1, False, False)).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    add_set(image, "x", 1)
    assert run(image, elect_master(image, live, "x", 9, False, False)).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_alive_old_master_is_kept() -> None:
    live = ScriptedLiveness()
    image = _three(live)
    r = run(image, elect_master(image, live, "b", 2, False, False))
    assert r.code == RC.CONTROLLER_MASTER_STILL_EXIST
    assert r.header["masterBrokerId"] == "1" and r.header["masterEpoch"] == "1"
    assert r.body["syncStateSet"] == [1, 2, 3]


def test_dead_master_replaced_by_best_epoch_then_offset_then_priority() -> None:
    live = ScriptedLiveness()
    image = _three(live)
    live.kill("b", 1)
    live.set_alive("b", 2, epoch=1, max_offset=100, priority=5)
    live.set_alive("b", 3, epoch=1, max_offset=200, priority=9)
    r = run(image, elect_master(image, live, "b", CTRL, False, False))
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == "3" and r.header["masterEpoch"] == "2"
    assert image.sets["b"].sync_state_set == {3} and image.sets["b"].sync_state_set_epoch == 3
    # tie on epoch and offset: lower priority value wins
    live2 = ScriptedLiveness()
    image2 = _three(live2)
    live2.kill("b", 1)
    live2.set_alive("b", 2, epoch=1, max_offset=100, priority=5)
    live2.set_alive("b", 3, epoch=1, max_offset=100, priority=1)
    assert run(image2, elect_master(image2, live2, "b", 2, False, False)).header["masterBrokerId"] == "3"
    # a higher epoch beats a bigger offset
    live3 = ScriptedLiveness()
    image3 = _three(live3)
    live3.kill("b", 1)
    live3.set_alive("b", 2, epoch=2, max_offset=1)
    live3.set_alive("b", 3, epoch=1, max_offset=999)
    assert run(image3, elect_master(image3, live3, "b", CTRL, False, False)).header["masterBrokerId"] == "2"


def test_no_candidate_broker_request_fails_controller_trigger_clears_master() -> None:
    live = ScriptedLiveness()
    image = _three(live)
    live.kill("b", 1, 2, 3)
    d = elect_master(image, live, "b", 2, False, False)
    assert d.event is None and d.reply is not None and d.reply.code == RC.CONTROLLER_ELECT_MASTER_FAILED
    r = run(image, elect_master(image, live, "b", CTRL, False, False))
    assert r.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    bset = image.sets["b"]
    assert bset.master_broker_id is None and bset.master_epoch == 2 and bset.sync_state_set == {1, 2, 3}
    # asking again while masterless changes nothing
    again = elect_master(image, live, "b", CTRL, False, False)
    assert again.event is None and again.reply is not None and again.reply.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    # a replica of the sync state set comes back: it is elected
    live.set_alive("b", 2)
    r = run(image, elect_master(image, live, "b", 2, False, False))
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == "2" and r.header["masterEpoch"] == "3"


def test_controller_trigger_never_elects_nobody_on_a_never_elected_set() -> None:
    image = ControllerImage()
    add_set(image, "b", 2)
    d = elect_master(image, ScriptedLiveness(), "b", CTRL, False, False)
    assert d.event is None and d.reply is not None and d.reply.code == RC.CONTROLLER_ELECT_MASTER_FAILED
    assert image.sets["b"].master_epoch == 0


def test_unclean_election_reaches_outside_the_sync_state_set() -> None:
    live = ScriptedLiveness()
    image = ControllerImage()
    add_set(image, "b", 2)
    run(image, elect_master(image, live, "b", 1, False, False))  # sss = {1}
    live.set_alive("b", 2)
    assert run(image, elect_master(image, live, "b", 2, False, False)).code == RC.CONTROLLER_ELECT_MASTER_FAILED
    r = run(image, elect_master(image, live, "b", 2, False, True))
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == "2"


def test_designated_election() -> None:
    live = ScriptedLiveness()
    image = _three(live)
    r = run(image, elect_master(image, live, "b", 3, True, False))  # admin moves mastership to 3
    assert r.code == RC.SUCCESS and r.header["masterBrokerId"] == "3"
    live.kill("b", 2)
    # designated broker 2 is dead and not in the new sync state set {3}
    assert run(image, elect_master(image, live, "b", 2, True, False)).code == RC.CONTROLLER_ELECT_MASTER_FAILED
    assert run(image, elect_master(image, live, "b", CTRL, True, False)).code == RC.CONTROLLER_INVALID_REQUEST


def test_racing_elections_only_one_wins_and_apply_uses_carried_liveness() -> None:
    live = ScriptedLiveness()
    image = _three(live)
    live.kill("b", 1)
    live.set_alive("b", 2, epoch=1, max_offset=10)
    d1 = elect_master(image, live, "b", CTRL, False, False)
    live.kill("b", 2)
    live.set_alive("b", 3, epoch=1, max_offset=5)
    d2 = elect_master(image, live, "b", 3, False, False)
    assert isinstance(d1.event, ElectMasterEvent) and isinstance(d2.event, ElectMasterEvent)
    # apply sees only the liveness carried in the event, so the result does not depend on local heartbeats
    r1 = apply_event(image, d1.event)
    assert r1.ok and image.sets["b"].master_broker_id == 2 and image.sets["b"].master_epoch == 2
    r2 = apply_event(image, d2.event)
    assert not r2.ok and r2.code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    assert image.sets["b"].master_broker_id == 2


def test_alter_sync_state_set_checks_in_spec_order() -> None:
    live = ScriptedLiveness()
    image = _three(live)  # master 1, epoch 1, sss {1,2,3} epoch 2

    def code(name: str, master: int, m_epoch: int, new: set[int], epoch: int) -> int:
        return run(image, alter_sync_state_set(image, live, name, master, m_epoch, frozenset(new), epoch)).code

    assert code("nope", 1, 1, {1}, 2) == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert code("b", 1, 1, {1, 2, 3}, 2) == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # unchanged
    assert code("b", 2, 1, {1, 2}, 2) == RC.CONTROLLER_INVALID_MASTER
    assert code("b", 1, 0, {1, 2}, 2) == RC.CONTROLLER_FENCED_MASTER_EPOCH
    assert code("b", 1, 1, {1, 2}, 1) == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert code("b", 1, 1, {1, 7}, 2) == RC.CONTROLLER_INVALID_REPLICAS
    live.kill("b", 3)
    assert code("b", 1, 1, {1, 3}, 2) == RC.CONTROLLER_BROKER_NOT_ALIVE
    assert code("b", 1, 1, {2}, 2) == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # master missing
    assert code("b", 1, 1, {1, 2}, 2) == RC.SUCCESS
    assert image.sets["b"].sync_state_set == {1, 2} and image.sets["b"].sync_state_set_epoch == 3


def test_racing_alter_sync_state_set_second_is_fenced() -> None:
    live = ScriptedLiveness()
    image = _three(live)
    d1 = alter_sync_state_set(image, live, "b", 1, 1, frozenset({1, 2}), 2)
    d2 = alter_sync_state_set(image, live, "b", 1, 1, frozenset({1, 3}), 2)
    assert d1.event is not None and d2.event is not None
    assert apply_event(image, d1.event).ok
    r2 = apply_event(image, d2.event)
    assert not r2.ok and r2.code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert image.sets["b"].sync_state_set == {1, 2}
    # an election between decide and apply also fences it
    d3 = alter_sync_state_set(image, live, "b", 1, 1, frozenset({1, 2, 3}), 3)
    live.kill("b", 1)
    run(image, elect_master(image, live, "b", CTRL, False, False))
    assert d3.event is not None
    assert not apply_event(image, d3.event).ok
