"""The linearizability checker on small hand-made histories (register model, per-key partitioning)."""

from __future__ import annotations

from controller.linearizability import UNKNOWN, Operation, RegisterModel, check


def w(c: int, v: int, call: float, ret: float | None, key: str = "k") -> Operation:
    return Operation(c, key, "write", v, None, call, ret)


def r(c: int, v: object, call: float, ret: float, key: str = "k") -> Operation:
    return Operation(c, key, "read", None, v, call, ret)


def test_sequential_history_is_linearizable() -> None:
    assert check([w(1, 1, 0, 1), r(2, 1, 2, 3), w(1, 2, 4, 5), r(2, 2, 6, 7)]).ok


def test_stale_read_after_acknowledged_write_is_rejected() -> None:
    result = check([w(1, 1, 0, 1), w(1, 2, 2, 3), r(2, 1, 4, 5)])
    assert result.ok is False
    assert "NOT linearizable" in result.describe()


def test_concurrent_write_may_be_seen_or_not() -> None:
    assert check([w(1, 1, 0, 1), w(1, 2, 2, 10), r(2, 1, 3, 4), r(3, 2, 5, 6)]).ok
    # ...but once a read saw the new value, a later read cannot see the old one.
    assert check([w(1, 1, 0, 1), w(1, 2, 2, 10), r(2, 2, 3, 4), r(3, 1, 5, 6)]).ok is False


def test_unknown_outcome_write_may_take_effect_late_or_never() -> None:
    lost = [w(1, 1, 0, 1), w(2, 2, 2, None), r(3, 1, 5, 6)]
    late = [w(1, 1, 0, 1), w(2, 2, 2, None), r(3, 1, 5, 6), r(3, 2, 7, 8)]
    assert check(lost).ok and check(late).ok
    assert check(late + [r(3, 1, 9, 10)]).ok is False


def test_keys_are_checked_independently() -> None:
    hist = [w(1, 1, 0, 1, "a"), w(1, 7, 0, 1, "b"), r(2, 1, 2, 3, "a"), r(2, 8, 2, 3, "b")]
    result = check(hist)
    assert result.ok is False
    assert [p.key for p in result.failures()] == ["b"]


def test_cas_model() -> None:
    ok = [w(1, 1, 0, 1), Operation(2, "k", "cas", (1, 2), True, 2, 3), r(3, 2, 4, 5)]
    bad = [w(1, 1, 0, 1), Operation(2, "k", "cas", (5, 2), True, 2, 3)]
    assert check(ok, RegisterModel()).ok
    assert check(bad, RegisterModel()).ok is False
    assert check([w(1, 1, 0, 1), Operation(2, "k", "cas", (1, 2), UNKNOWN, 2, None)]).ok


def test_many_concurrent_ops_stay_tractable() -> None:
    hist = [w(c, c, 0, 100) for c in range(12)] + [r(99, 11, 101, 102)]
    result = check(hist)
    assert result.ok and result.partitions[0].states_explored < 100_000
