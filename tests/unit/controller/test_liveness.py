"""Liveness bookkeeping: timer wheel correctness against a brute-force model, and incremental cost."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.liveness import LivenessTracker, TimerWheel


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_wheel_fires_at_or_after_deadline_never_early() -> None:
    w: TimerWheel[str] = TimerWheel(50, 0)
    w.schedule("a", 120)
    w.schedule("b", 150)
    w.schedule("c", 10_000)
    assert list(w.advance(100)) == []
    assert [k for _, k in w.advance(149)] == []  # slots are 50 ms: a deadline fires up to one tick late
    assert sorted(k for _, k in w.advance(150)) == ["a", "b"]
    assert [k for _, k in w.advance(10_000_000)] == ["c"]  # long jump visits only used slots
    assert len(w) == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(1, 400)), max_size=120))
def test_tracker_matches_a_brute_force_model(ops: list[tuple[int, int, int]]) -> None:
    """op (0..1)=heartbeat broker b, 2=advance time and expire, 3=mark channel closed; model = last-seen times."""
    clock = Clock()
    t = LivenessTracker(clock, timeout_ms=300, tick_ms=20)
    model: dict[int, float] = {}
    reported_dead: set[int] = set()
    for op, b, dt in ops:
        if op <= 1:
            t.heartbeat("c", "s", b, "h:1", 0, 0, 0, 1)
            model[b] = clock.now
            reported_dead.discard(b)
        elif op == 2:
            clock.now += dt
            for info in t.expire():
                reported_dead.add(info.broker_id)
            for bid, seen in model.items():
                if clock.now - seen > 300 + 20:  # expiry is at most one tick late
                    assert bid in reported_dead
                if clock.now - seen <= 300:
                    assert bid not in reported_dead
        else:
            if t.mark_dead("s", b) is not None:
                reported_dead.add(b)
                model.pop(b, None)
        for bid in range(6):
            expect = bid in model and clock.now - model[bid] <= 300 and bid not in reported_dead
            assert t.is_alive("s", bid) == expect


def test_heartbeats_cost_no_wheel_work_and_expiry_visits_only_due_slots() -> None:
    clock = Clock()
    t = LivenessTracker(clock, timeout_ms=3000, tick_ms=50)
    n = 5000
    for i in range(n):
        t.heartbeat("c", f"set-{i}", 1, "h:1", 0, 0, 0, 1)
    scheduled = sum(len(b) for b in t.wheel.slots.values())
    assert scheduled == n
    # 10 heartbeat rounds, 1 s apart: only the periodic re-slotting touches the wheel, about once per timeout
    slots_touched = 0
    for _ in range(10):
        clock.now += 1000
        for i in range(n):
            t.heartbeat("c", f"set-{i}", 1, "h:1", 0, 0, 0, 1)
        before = dict((k, len(v)) for k, v in t.wheel.slots.items())
        assert t.expire() == []
        slots_touched += sum(c for k, c in before.items() if k not in t.wheel.slots)
    assert slots_touched <= n * 4  # ~ n per 3 s, not n per heartbeat (that would be 10 n)
    assert t.live_count == n
    clock.now += 3100
    assert len(t.expire()) == n and t.live_count == 0


def test_heartbeat_data_updates_only_forward_and_revival_resets() -> None:
    clock = Clock()
    t = LivenessTracker(clock, timeout_ms=1000)
    assert t.heartbeat("c", "s", 1, "h:1", epoch=2, max_offset=100, confirm_offset=50, priority=3) is True
    assert t.heartbeat("c", "s", 1, "h:1", epoch=1, max_offset=500, confirm_offset=60, priority=3) is False
    assert t.liveness("s", 1).max_offset == 100  # older epoch ignored
    t.heartbeat("c", "s", 1, "h:1", epoch=2, max_offset=150, confirm_offset=70, priority=3)
    x = t.liveness("s", 1)
    assert (x.epoch, x.max_offset, x.confirm_offset, x.alive) == (2, 150, 70, True)
    clock.now += 1001
    assert [i.broker_id for i in t.expire()] == [1]
    assert not t.liveness("s", 1).alive
    assert t.heartbeat("c", "s", 1, "h:1", epoch=1, max_offset=7, confirm_offset=0, priority=3) is True
    assert t.liveness("s", 1).max_offset == 7  # a restarted broker starts fresh
    t.forget("s")
    assert not t.is_alive("s", 1) and t.live_count == 0


def test_heartbeat_after_the_deadline_is_a_revival_even_before_the_wheel_expires_it() -> None:
    """is_alive() is deadline-based, so an election may already have treated the broker as dead; the next
    heartbeat must then count as a revival (it triggers the election of a masterless set), not a refresh."""
    clock = Clock()
    t = LivenessTracker(clock, timeout_ms=1000)
    assert t.heartbeat("c", "s", 2, "h:2", epoch=1, max_offset=10, confirm_offset=0, priority=0) is True
    clock.now += 1001
    assert not t.is_alive("s", 2)  # dead by deadline; the wheel has not ticked yet
    assert t.heartbeat("c", "s", 2, "h:2", epoch=1, max_offset=11, confirm_offset=0, priority=0) is True
    assert t.is_alive("s", 2) and t.live_count == 1
    assert t.expire() == []  # the stale deadline was cancelled, the new one is in the future
