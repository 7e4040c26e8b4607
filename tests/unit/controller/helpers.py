"""Test helpers for the pure controller state machine: a scripted liveness view and decide-then-apply."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.statemachine.apply import apply_event
from controller.statemachine.decide_register import apply_broker_id
from controller.statemachine.events import BrokerLiveness
from controller.statemachine.image import ControllerImage
from controller.statemachine.reply import Decision, Reply


@dataclass
class ScriptedLiveness:
    """LivenessView whose answers the test sets: alive ids per set, plus optional heartbeat data."""

    alive: set[tuple[str, int]] = field(default_factory=set)
    data: dict[tuple[str, int], BrokerLiveness] = field(default_factory=dict)

    def set_alive(self, name: str, *ids: int, epoch: int = 0, max_offset: int = 0, priority: int = 2**31 - 1) -> None:
        for i in ids:
            self.alive.add((name, i))
            self.data[(name, i)] = BrokerLiveness(i, True, epoch, max_offset, 0, priority)

    def kill(self, name: str, *ids: int) -> None:
        for i in ids:
            self.alive.discard((name, i))

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        return (broker_name, broker_id) in self.alive

    def liveness(self, broker_name: str, broker_id: int) -> BrokerLiveness:
        alive = self.is_alive(broker_name, broker_id)
        d = self.data.get((broker_name, broker_id))
        if d is None:
            return BrokerLiveness(broker_id, alive)
        return BrokerLiveness(broker_id, alive, d.epoch, d.max_offset, d.confirm_offset, d.election_priority)


def run(image: ControllerImage, decision: Decision) -> Reply:
    """What the server does: answer directly, or apply the event and build the reply from the apply result."""
    if decision.event is None:
        assert decision.reply is not None
        return decision.reply
    result = apply_event(image, decision.event)
    assert result.ok, f"apply rejected: {result.code} {result.remark}"
    assert decision.build is not None
    return decision.build(result)


def add_set(image: ControllerImage, name: str, n: int, cluster: str = "c1") -> None:
    """Register brokers 1..n of `name` at addresses 10.0.0.<id>:10911."""  # port-ok: address data, nothing binds it
    for i in range(1, n + 1):
        r = run(image, apply_broker_id(image, cluster, name, i, f"10.0.0.{i}:10911;{i}"))  # port-ok: address data, nothing binds it
        assert r.code == 0, r
