"""The replicated-set checkers (``harness/ha_checks.py``) on synthetic histories: each passes a clean failover
and detects the violation it exists for."""

from __future__ import annotations

from tests.chaos.harness.checkers import CheckSettings, acked_lost, check_all, queue_order
from tests.chaos.harness.ha_checks import (
    EpochView,
    delay_windows,
    fault_unavailability,
    minority_acks,
    minority_side,
    replicated_metadata,
    replicated_offsets,
    two_masters,
)
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
from tests.chaos.harness.nemesis import CutRecorder
from tests.chaos.harness.net import partition

HA = CheckSettings(replicated=True, flush="ASYNC_FLUSH", metasync_s=0.1, incremental_metadata=True)
A, B = "10.0.0.5:1000", "10.0.0.6:2000"  # port-ok: history data, nothing binds; broker-a on c0 and c1


def poll(broker: str, epoch: int, t: float, master: bool | None = None) -> RoleSample:
    m = (broker == A) == (epoch % 2 == 1) if master is None else master  # A masters odd epochs, B even ones
    return RoleSample("broker-a", broker, m, m, epoch, t, t + 0.01)


def ack(i: int, broker: str, call: float, ret: float | None = None) -> Send:
    return Send(f"m{i}", "broker-a", "T", "p0", i, 0, call, ret if ret is not None else call + 0.01, True, 0, i,
                broker)


def failover_history() -> History:
    """A masters epoch 1 until ~2 s, B epoch 2 after (A is a slave from 2.5 s): a clean failover."""
    roles = [poll(A, 1, t) for t in (0.0, 0.5, 1.0, 1.5)] + [poll(B, 1, t) for t in (0.0, 0.5, 1.0, 1.5)]
    roles += [poll(B, 2, t) for t in (2.0, 2.5, 3.0)] + [poll(A, 2, t) for t in (2.5, 3.0)]
    sends = [ack(0, A, 0.6), ack(1, A, 1.2), ack(2, B, 2.1), ack(3, B, 2.6)]
    return History(sends=sends, roles=roles, brokers={A: ["c0", "broker-a"], B: ["c1", "broker-a"]},
                   controllers=["n0", "n1", "n2"], end=4.0)


def test_epoch_bounds_come_from_the_polls_around_an_operation() -> None:
    v = EpochView(failover_history().roles)
    assert (v.lo(A, 1.2), v.hi(A, 1.21)) == (1, 1)  # master at epoch 1 before and after
    assert v.hi(A, 1.6) == 1  # the next poll answered slave at epoch 2: deposed by 2, so at most 1
    assert v.newest("broker-a", 2.02) == 2 and v.deposed("broker-a", A, 2.6, 2.61)
    (epoch, lb, ub), = v.failovers("broker-a")
    assert epoch == 2 and lb == 1.5 and ub == 2.01  # B still answered epoch 1 at 1.5 s, epoch 2 by 2.01 s


def test_a_clean_failover_has_no_two_masters() -> None:
    r = two_masters(failover_history(), HA)
    assert r["ok"] and r["acks_checked"] == 4 and r["epochs"] == 2


def test_a_deposed_master_claiming_its_old_role_is_counted_not_failed() -> None:
    h = failover_history()
    h.roles += [poll(A, 1, 2.2, master=True)]  # cut off: it has not heard of epoch 2 yet
    r = two_masters(h, HA)
    assert r["ok"] and r["stale_master_claims"] == 1


def test_a_deposed_master_acknowledging_after_its_successor_did_is_two_masters() -> None:
    h = failover_history()
    h.roles = [x for x in h.roles if x.broker != A] + [poll(A, 1, t, master=True) for t in (0.0, 1.0, 2.2, 3.0)]
    h.sends.append(ack(9, A, 2.3))  # sent after B acknowledged m2 (2.11 s) at epoch 2; A still at epoch 1
    r = two_masters(h, HA)
    assert not r["ok"] and "acknowledged m9" in r["examples"][0] and "m2" in r["examples"][0]


def test_two_brokers_at_one_epoch_are_two_masters() -> None:
    h = failover_history()
    h.roles.append(poll(B, 1, 1.7, master=True))
    assert "both answered master at epoch 1" in two_masters(h, HA)["examples"][0]
    h = failover_history()
    h.roles = [poll(A, 1, t, master=True) for t in (0.0, 1.0)] + [poll(B, 1, t, master=True) for t in (0.0, 1.0)]
    h.sends = [ack(0, A, 0.5), ack(1, B, 0.6)]
    examples = two_masters(h, HA)["examples"]
    assert any("both acknowledged sends at epoch 1" in x for x in examples)


def isolate_c0(kind: str = "isolate") -> FaultEvent:
    f = FaultEvent(kind, "c0", 1.0, 3.0, applied=1.1, healing=2.9, ready=3.5,
                   state={"broker-a": {"master": A, "epoch": 1, "sss": sorted([A, B])}})
    others = ["n0", "n1", "n2"] if kind == "cut-ctl" else ["n0", "n1", "n2", "c1"]
    partition(CutRecorder(_NoNet(), f.cut), [["c0"], others])
    return f


class _NoNet:
    def block(self, src: str, dst: str) -> None:
        pass


def test_the_minority_side_never_acknowledges() -> None:
    h = failover_history()
    h.sends = [ack(0, A, 0.5), ack(1, A, 1.05, 1.2), ack(2, A, 1.5)]  # m1 was sent before the cut: not counted
    h.faults = [isolate_c0()]
    assert minority_side(h, h.faults[0], "broker-a") == [A]
    r = minority_acks(h, HA)
    assert not r["ok"] and r["violations"] == 1 and "m2" in r["examples"][0]
    h.faults[0].state["broker-a"]["sss"] = [A]  # A was alone in the sync state set: nobody else can be elected
    r = minority_acks(h, HA)
    assert r["ok"] and r["allowed_sole_replica"] == 1


def test_a_container_cut_from_the_controllers_only_is_no_minority() -> None:
    h = failover_history()
    h.faults = [isolate_c0("cut-ctl")]
    assert minority_side(h, h.faults[0], "broker-a") == []  # it still reaches its slave


def test_unavailability_per_fault_category_and_targets() -> None:
    h = History(sends=[ack(i, A, t) for i, t in enumerate([0.5, 1.0, 2.8, 3.0, 5.0, 8.5, 9.0])], end=10.0)
    h.faults = [FaultEvent("kill", "c0", 1.0, 1.5, applied=1.1, ready=2.0),
                FaultEvent("isolate", "c0", 5.1, 6.0, applied=5.1, healing=6.0, ready=6.5)]
    r = fault_unavailability(h, CheckSettings(targets_s={"kill": 2.0, "partition": 5.0}))
    cats = r["per_broker_set"]["broker-a"]
    assert cats["kill"]["max_s"] == 1.8 and cats["partition"]["p99_s"] == 3.5 and r["ok"]
    assert not fault_unavailability(h, CheckSettings(targets_s={"kill": 1.5}))["ok"]
    h.brokers = {B: ["c1", "broker-b"]}  # broker-a's sends are then of no broker set (the real client's "rc")
    assert fault_unavailability(h, CheckSettings(targets_s={"kill": 1.5}))["ok"]


def test_delay_faults_are_their_own_category_and_their_windows_are_reported() -> None:
    """Sends every 0.1 s answered in 10 ms, except during the delay (4-6 s): answered in 0.25 s, a 1.16 s gap (4.85-6.01 s)."""
    calls = [t / 10 for t in range(100) if not 40 <= t < 60] + [4.0, 4.3, 4.6, 5.8]
    sends = [ack(i, A, t, t + (0.25 if 4 <= t < 6 else 0.01)) for i, t in enumerate(calls)]
    h = History(sends=sends, brokers={A: ["c0", "broker-a"]}, end=10.0)
    h.faults = [FaultEvent("delay", "c0", 3.9, 6.0, "c0 delayed=900", applied=4.0, healing=6.0, ready=6.2)]
    cats = fault_unavailability(h, CheckSettings(targets_s={"partition": 1.0}))
    assert cats["ok"] and cats["per_broker_set"]["broker-a"] == {
        "delay": {"faults": 1, "p50_s": 1.16, "p99_s": 1.16, "max_s": 1.16}}
    r = delay_windows(h, CheckSettings())
    (w,) = r["windows"]
    assert r["ok"] and r["faults"] == 1 and r["baseline_p50_ms"] == {"broker-a": 10.0}
    assert w["sets"]["broker-a"] == {"acked": 3, "p50_ms": 250.0, "p99_ms": 250.0, "longest_gap_s": 1.16}
    assert (w["applied"], w["healing"], w["detail"]) == (4.0, 6.0, "c0 delayed=900")  # 5.8 s: answered after


def test_offsets_a_failover_may_lose_only_recent_commits() -> None:
    h = failover_history()
    h.commits = [Commit("g", "broker-a", "T", 0, 10, 0.2, 0.21, True, A),
                 Commit("g", "broker-a", "T", 0, 20, 1.45, 1.46, True, A)]
    h.offset_reads = [OffsetRead("g", "broker-a", "T", 0, 10, 3.01, B, 3.0)]
    r = replicated_offsets(h, HA)
    assert r["ok"] and r["not_yet_replicated"] == 1  # 20 was committed 0.04 s before the election could start
    h.offset_reads = [OffsetRead("g", "broker-a", "T", 0, 5, 3.01, B, 3.0)]
    assert not replicated_offsets(h, HA)["ok"]  # 10 was committed long before: the new master must have it
    h.roles = [x for x in h.roles if x.broker != A] + [poll(A, 1, t, master=True) for t in (0.0, 1.0, 2.2, 3.2)]
    h.offset_reads = [OffsetRead("g", "broker-a", "T", 0, 5, 3.01, A, 3.0)]  # answered by the deposed master
    assert replicated_offsets(h, HA)["reads_from_deposed_master"] == 1


def test_offsets_committed_just_before_the_master_froze_may_be_lost() -> None:
    """Seen in a chaos run: a commit acknowledged by the master 1 ms before it was paused (SIGSTOP) never left
    it (offsets are journaled every 100 ms); the slave elected 1.5 s later never had it."""
    h = failover_history()
    h.commits = [Commit("g", "broker-a", "T", 0, 10, 0.2, 0.21, True, A)]
    h.offset_reads = [OffsetRead("g", "broker-a", "T", 0, 0, 3.01, B, 3.0)]
    assert not replicated_offsets(h, HA)["ok"]  # the election (>= 1.5 s) came long after the commit
    h.faults = [FaultEvent("pause", "c0", 0.2, 1.9, applied=0.21, healing=1.9)]
    r = replicated_offsets(h, HA)
    assert r["ok"] and r["not_yet_replicated"] == 1


def test_metadata_with_incremental_sync_loses_nothing_the_full_pull_may_lose_at_a_failover() -> None:
    h = failover_history()
    h.meta = [MetaOp("topic", "T1", "broker-a", 1.4, 1.45, True, A)]
    h.meta_present = {"topic": []}
    assert not replicated_metadata(h, HA)["ok"]
    full = CheckSettings(replicated=True, metasync_s=3.0, incremental_metadata=False)
    r = replicated_metadata(h, full)
    assert r["ok"] and r["lost_at_failover"] == 1


def test_replicated_sets_excuse_no_loss_and_no_reused_position() -> None:
    h = History(sends=[ack(0, A, 0.1), ack(1, A, 0.2)], stored=[StoredMessage("m0", "broker-a", "T", 0, 0)],
                crashes=[Crash("c0", "broker-a", "powerloss", 0.3, 0.5)], end=2.0)
    assert not acked_lost(h, HA)["ok"]
    assert acked_lost(h, CheckSettings(flush="ASYNC_FLUSH"))["ok"]  # unreplicated: allowed, reported
    h.deliveries = [Delivery("ghost", "broker-a", "T", 0, 1, 0.25)]
    h.stored.append(StoredMessage("m1", "broker-a", "T", 0, 1))
    h.sends = [ack(0, A, 0.1)]
    assert not queue_order(h, HA)["ok"]
    assert queue_order(h, CheckSettings())["ok"]


def test_check_all_runs_the_replicated_checks() -> None:
    res = check_all(failover_history(), HA)
    assert {"two_masters", "minority_acks", "unavailability_by_fault", "delay_windows"} <= set(res["checks"])
    assert res["checks"]["offset_regressions"]["reads"] == 0 and "incremental_sync" in res["checks"]["metadata_lost"]
