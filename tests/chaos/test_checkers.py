"""The checkers on synthetic histories: each must pass a clean history and detect the violation it exists for."""

from __future__ import annotations

from typing import Any

from controller.linearizability import Operation
from tests.chaos.harness.checkers import (
    CheckSettings,
    acked_lost,
    check_all,
    duplicates,
    linearizable,
    metadata_lost,
    offset_regressions,
    processes,
    queue_order,
    unavailability,
)
from tests.chaos.harness.controller_workload import SyncStateSetModel
from tests.chaos.harness.ha_checks import two_masters
from tests.chaos.harness.history import (
    Commit,
    Crash,
    Delivery,
    FaultEvent,
    History,
    MetaOp,
    OffsetRead,
    RoleSample,
    Send,
    StoredMessage,
)

SYNC, ASYNC = CheckSettings(flush="SYNC_FLUSH"), CheckSettings(flush="ASYNC_FLUSH", flush_interval_s=0.5)


def send(i: int, *, ok: bool = True, ret: float | None = None, offset: int | None = None, seq: int | None = None,
         queue: int = 0) -> Send:
    t = i * 0.1
    return Send(f"m{i}", "b", "T", "p0", i if seq is None else seq, queue, t,
                (t + 0.01 if ret is None else ret) if ok else None, ok, 0 if ok else None, i if offset is None else offset)


def stored(i: int, *, offset: int | None = None, seq: int | None = None, ident: str | None = None) -> StoredMessage:
    return StoredMessage(ident or f"m{i}", "b", "T", 0, i if offset is None else offset, "p0", i if seq is None else seq)


def history(n: int = 5, **kw: Any) -> History:
    h = History(sends=[send(i) for i in range(n)], stored=[stored(i) for i in range(n)], end=10.0)
    for k, v in kw.items():
        setattr(h, k, v)
    return h


def test_a_clean_history_passes_every_check() -> None:
    h = history(deliveries=[Delivery(f"m{i}", "b", "T", 0, i, 1.0) for i in range(5)])
    res = check_all(h, SYNC, model=SyncStateSetModel())
    assert res["ok"], res


def test_acked_but_lost_is_a_violation_with_sync_flush_and_after_a_mere_kill() -> None:
    h = history()
    h.stored = h.stored[:3]
    h.crashes = [Crash("c0", "b", "kill", 1.0, 1.5)]
    assert acked_lost(h, SYNC)["lost"] == 2
    assert acked_lost(h, ASYNC)["ok"] is False  # SIGKILL keeps the page cache: nothing may be lost


def test_async_flush_loss_at_a_power_loss_is_reported_not_failed() -> None:
    h = history()
    h.stored = h.stored[:3]
    h.crashes = [Crash("c0", "b", "powerloss", 0.45, 1.0)]
    r = acked_lost(h, ASYNC)
    assert r["ok"] and r["lost_allowed_async"] == 2 and r["allowed_within_flush_interval"]
    assert r["allowed_window_s"] == [0.04, 0.14]
    assert acked_lost(h, SYNC)["ok"] is False
    h.crashes = [Crash("c0", "b", "powerloss", 0.2, 0.25)]  # restarted before m3 and m4 were acknowledged
    assert acked_lost(h, ASYNC)["lost"] == 2


def test_duplicates_are_counted_never_failed() -> None:
    h = history(deliveries=[Delivery("m1", "b", "T", 0, 1, 1.0), Delivery("m1", "b", "T", 0, 1, 2.0)])
    h.stored.append(stored(1, offset=7))
    r = duplicates(h, SYNC)
    assert r["ok"] and r["stored_extra_copies"] == 1 and r["delivered_extra"] == 1


def test_queue_order_detects_a_sequence_going_back() -> None:
    h = history()
    h.stored[3], h.stored[4] = stored(3, seq=4, ident="m4"), stored(4, seq=3, ident="m3")
    h.sends = []
    r = queue_order(h, SYNC)
    assert not r["ok"] and "seq 3 stored at 4 after seq 4" in r["examples"][0]


def test_one_position_two_messages_is_a_violation_unless_a_power_loss_explains_it() -> None:
    h = history(deliveries=[Delivery("ghost", "b", "T", 0, 2, 0.15)])
    assert not queue_order(h, SYNC)["ok"]
    h.crashes = [Crash("c0", "b", "powerloss", 0.18, 0.19)]  # ghost was read before it was durable, then lost
    r = queue_order(h, SYNC)
    assert r["ok"] and r["positions_reused_after_power_loss"] >= 1
    h.sends.append(Send("ghost", "b", "T", "p1", 0, 0, 0.1, 0.12, True, 0, 2))  # acknowledged at that position
    assert not queue_order(h, SYNC)["ok"]  # SYNC_FLUSH: an acknowledged position must never be reused
    assert queue_order(h, ASYNC)["ok"]


def test_offset_regressions_respect_the_persist_interval() -> None:
    commit = Commit("g", "b", "T", 0, 50, 1.0, 1.01, True)
    h = History(commits=[commit], offset_reads=[OffsetRead("g", "b", "T", 0, 40, 2.0)])
    assert not offset_regressions(h, SYNC)["ok"]  # no crash in between: a plain regression
    h.crashes = [Crash("c0", "b", "kill", 1.5, 1.6)]
    r = offset_regressions(h, SYNC)
    assert r["ok"] and r["not_yet_persisted"] == 1  # crashed before the periodic persist could run
    h.offset_reads = [OffsetRead("g", "b", "T", 0, 40, 9.0)]
    h.crashes = [Crash("c0", "b", "kill", 8.0, 8.1)]
    assert not offset_regressions(h, SYNC)["ok"]  # 7 s after the commit it had to be on disk


def test_metadata_lost() -> None:
    h = History(meta=[MetaOp("topic", "T1", "b", 0, 0.1, True), MetaOp("group", "G1", "b", 0, None, False)],
                meta_present={"topic": ["T1"], "group": []})
    assert metadata_lost(h, SYNC)["ok"]
    h.meta_present["topic"] = []
    assert metadata_lost(h, SYNC)["lost"] == 1


def test_unavailability_windows_and_the_faults_in_them() -> None:
    h = History(sends=[send(0, ret=0.5), send(1, ret=3.0), send(2, ret=3.2)], end=4.0,
                faults=[FaultEvent("kill", "c0", 1.0, 1.5)])
    h.sends.append(Send("x", "b", "T", "p0", 9, 0, 3.5))  # last attempt (no answer)
    u = unavailability(h, CheckSettings(gap_s=1.0))["per_broker_set"]["b"]
    assert u["longest_s"] == 2.5 and u["windows"][0]["faults"] == ["kill:c0"]


def test_two_writable_masters() -> None:
    a1 = RoleSample("b", "A", True, True, 1, 0.0, 0.1)
    b2 = RoleSample("b", "B", True, True, 2, 1.0, 1.1)
    a_slave = RoleSample("b", "A", False, False, 2, 1.2, 1.3)
    assert two_masters(History(roles=[a1, b2, a_slave]), SYNC)["ok"]
    stale = RoleSample("b", "A", True, True, 1, 1.5, 1.6)  # A still claims epoch 1 after B answered at epoch 2
    r = two_masters(History(roles=[a1, b2, stale]), SYNC)
    assert r["ok"] and r["stale_master_claims"] == 1  # a claim alone writes nothing (tests/chaos/test_ha_checks.py)
    same_epoch = RoleSample("b", "B", True, True, 1, 0.0, 0.1)
    assert not two_masters(History(roles=[a1, same_epoch]), SYNC)["ok"]


def test_a_consumer_moving_its_offset_back_is_no_regression() -> None:
    """Seen in a chaos run (single, seed 21): after a power loss the consumer was sent back to offset 0 and
    committed 0; the broker then rightly answered 0, below an older commit it had to keep."""
    kept = Commit("g", "b", "T", 0, 2378, 4.37, 4.38, True)
    later = [Commit("g", "b", "T", 0, 3591, 10.16, 10.17, True), Commit("g", "b", "T", 0, 0, 12.14, 12.15, True)]
    h = History(commits=[kept, *later], offset_reads=[OffsetRead("g", "b", "T", 0, 0, 12.19, "", 12.18)],
                crashes=[Crash("c0", "b", "powerloss", 10.41, 11.42)])
    r = offset_regressions(h, SYNC)
    assert r["ok"] and r["violations"] == 0
    h.commits = [kept, later[0]]  # without the consumer's own commit of 0, the read is a regression
    assert not offset_regressions(h, SYNC)["ok"]


def test_linearizability_of_a_controller_history() -> None:
    ok = [Operation(0, "s", "cas", (1, (1, 2)), "ok", 0.0, 0.1), Operation(1, "s", "read", None, ((1, 2), 2), 0.2, 0.3)]
    assert linearizable(ok, SyncStateSetModel(), SYNC)["ok"]
    stale = ok + [Operation(2, "s", "read", None, ((1,), 1), 0.4, 0.5)]
    r = linearizable(stale, SyncStateSetModel(), SYNC)
    assert not r["ok"] and "NOT linearizable" in r["verdict"]


def test_a_process_that_exits_on_its_own_fails_the_run() -> None:
    h = History(faults=[FaultEvent("unexpected-exit", "n1", 3.0, 3.0, "exit code 1")])
    assert not processes(h, SYNC)["ok"]


def test_history_round_trips_through_json() -> None:
    h = history(crashes=[Crash("c0", "b", "powerloss", 1.0, 2.0)],
                controller_ops=[Operation(0, "s", "cas", (1, (1, 2)), "ok", 0.0, None)])
    again = History.from_json(h.to_json())
    assert again.to_json() == h.to_json()
    assert again.controller_ops[0].input == (1, (1, 2))
