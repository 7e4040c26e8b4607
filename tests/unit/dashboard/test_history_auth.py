"""Pure parts of the dashboard: the throughput history's rates, signed sessions, CSRF and the login throttle."""

from __future__ import annotations

import pytest

from container.dashboard.auth import LoginThrottle, SessionSigner, csrf_ok
from container.dashboard.history import History


def sample(n_in: int, n_out: int = 0) -> dict[str, int]:
    return {"rocketmq_messages_in_total": n_in, "rocketmq_messages_out_total": n_out, "rocketmq_bytes_in_total": 0,
            "rocketmq_bytes_out_total": 0, "rocketmq_errors_total": 0}


def test_rates_per_second_between_samples() -> None:
    h = History(10)
    h.add(100.0, {"a": sample(0)})
    h.add(102.0, {"a": sample(50, 10)})
    h.add(104.0, {"a": sample(150, 10)})
    r = h.rates()
    assert r["t"] == [102.0, 104.0]
    assert r["brokers"]["a"]["rocketmq_messages_in_total"] == [25.0, 50.0]
    assert r["brokers"]["a"]["rocketmq_messages_out_total"] == [5.0, 0.0]


def test_a_restarted_counter_and_a_new_broker() -> None:
    h = History(10)
    h.add(1.0, {"a": sample(100)})
    h.add(2.0, {"a": sample(5), "b": sample(0)})  # a restarted (counter went down), b appeared
    h.add(3.0, {"a": sample(15), "b": sample(4)})
    r = h.rates()["brokers"]
    assert r["a"]["rocketmq_messages_in_total"] == [0.0, 10.0]
    assert r["b"]["rocketmq_messages_in_total"] == [None, 4.0]


def test_history_keeps_the_last_samples_and_ignores_time_going_back() -> None:
    h = History(3)
    for t in range(5):
        h.add(float(t), {"a": sample(t)})
    h.add(1.0, {"a": sample(99)})
    assert len(h) == 3 and h.rates()["t"] == [3.0, 4.0]
    with pytest.raises(ValueError):
        History(1)


def test_session_round_trip_and_expiry() -> None:
    s = SessionSigner(ttl_s=60)
    cookie, session = s.issue("admin", now=1000.0)
    got = s.verify(cookie, now=1059.0)
    assert got is not None and got.user == "admin" and got.csrf == session.csrf
    assert s.verify(cookie, now=1061.0) is None


def test_tampered_or_foreign_cookies_are_refused() -> None:
    s, other = SessionSigner(), SessionSigner()
    cookie, _ = s.issue("admin", now=0.0)
    user, exp, csrf, mac = cookie.split(".")
    forged_user = "cm9vdA"  # "root"
    assert s.verify(".".join((forged_user, exp, csrf, mac)), now=1.0) is None
    assert s.verify(".".join((user, str(int(exp) + 9999), csrf, mac)), now=1.0) is None
    assert other.verify(cookie, now=1.0) is None  # another process's key (a restart logs everyone out)
    for junk in (None, "", "a.b", "a.b.c.d.e", "!!.1.x.y"):
        assert s.verify(junk, now=1.0) is None


def test_csrf_token_must_match_the_session() -> None:
    _, session = SessionSigner().issue("admin", now=0.0)
    assert csrf_ok(session, session.csrf)
    other = ("y" if session.csrf[0] == "x" else "x") + session.csrf[1:]  # one character off
    assert not csrf_ok(session, None) and not csrf_ok(session, other)


def test_login_throttle_per_client_and_window() -> None:
    t = LoginThrottle(limit=2, window_s=10)
    t.failed("1.2.3.4", 0.0)
    t.failed("1.2.3.4", 1.0)
    assert not t.allowed("1.2.3.4", 5.0) and t.allowed("5.6.7.8", 5.0)
    assert t.allowed("1.2.3.4", 10.5)  # the first failure left the window: one try again
    t.failed("1.2.3.4", 10.6)
    assert not t.allowed("1.2.3.4", 10.7)
    assert t.allowed("1.2.3.4", 20.7)


def test_recent_errors_keep_the_newest_warnings_first() -> None:
    import logging

    from container.dashboard.errors import RecentErrors

    rec = RecentErrors(capacity=2)
    rec.install()
    try:
        log = logging.getLogger("test.dashboard")
        log.info("not kept")
        for i in range(3):
            log.warning("disk %d almost full", i)
        log.error("broker_start_failed broker=x")
    finally:
        rec.uninstall()
    logging.getLogger("test.dashboard").error("after uninstall")
    assert rec.total == 4
    assert [(e["level"], e["message"]) for e in rec.entries()] == [
        ("error", "broker_start_failed broker=x"), ("warning", "disk 2 almost full")]
