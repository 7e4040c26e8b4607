"""The endpoint's small tables: transactions it can end (newest first, expiring), receipts it keeps renewing
(due ahead of expiry, the newest handle to the ack, released when the client goes)."""

from __future__ import annotations

import time

import pytest

from brokerd.proxy.codes import Code, ProxyError
from brokerd.proxy.renew import RENEW_STEPS_MS, Renewing, RenewTable
from brokerd.proxy.route import parse_route
from brokerd.proxy.transactions import TransactionTable


def test_transactions_are_ended_newest_first_and_expire() -> None:
    now = [0.0]
    t = TransactionTable(expire_ms=1000, max_per_key=2, clock=lambda: now[0])
    t.add("T", "tx1", "broker-a", "T", 5, 500)
    t.add("T", "tx1", "broker-a", "T", 9, 900)  # a check-back's newer copy
    assert t.poll("T", "tx1").commit_log_offset == 900  # type: ignore[union-attr]
    now[0] = 2.0
    assert t.poll("T", "tx1") is None and len(t) == 0
    route = parse_route("T", b'{"queueDatas":[],"brokerDatas":[{"brokerName":"broker-a","brokerAddrs":{"0":"h:1"}}]}')
    assert TransactionTable.broker_of(route, "h:1") == "broker-a" and TransactionTable.broker_of(None, "h:1") == "h:1"


def handle(pop_ms: int, invisible_ms: int) -> str:
    return f"0 {pop_ms} {invisible_ms} 0 0 broker-a 0 0 100"


async def test_renewals_extend_due_handles_and_give_the_newest_to_the_ack() -> None:
    table = RenewTable(ahead_ms=10_000, max_ms=3_600_000, max_retries=2)
    now = int(time.time() * 1000)
    e = Renewing("c1", "G", "T", "m1", handle(0, 5_000), 0, since_ms=now)
    far = Renewing("c1", "G", "T", "m2", handle(10**13, 60_000), 0, since_ms=now)
    table.add(e)
    table.add(far)
    assert table.due(1_000) == [e]
    asked: list[int] = []

    async def change(r: Renewing, ms: int) -> str:
        asked.append(ms)
        return handle(1_000, ms)

    await table.renew(e, change, lambda n: 1000)
    assert asked == [RENEW_STEPS_MS[0]] and e.renew_times == 1
    assert table.take("c1", "G", "m1", "old") == handle(1_000, RENEW_STEPS_MS[0])
    assert table.take("c1", "G", "m1", "old") == "old"  # gone once acked
    assert [r.msg_id for r in table.of_client("c1")] == ["m2"] and not table.entries


async def test_a_refused_renewal_stops_and_a_long_one_is_handed_back_with_the_retry_delay() -> None:
    table = RenewTable(ahead_ms=10_000, max_ms=1_000, max_retries=2)

    async def refuse(r: Renewing, ms: int) -> str:
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "gone")

    bad = Renewing("c", "G", "T", "m", handle(0, 1), 0, since_ms=10**13)
    table.add(bad)
    await table.renew(bad, refuse, lambda n: 1)
    assert not table.entries
    old = Renewing("c", "G", "T", "m2", handle(0, 1), 3, since_ms=0)  # consumed for longer than max_ms
    table.add(old)
    asked: list[int] = []

    async def change(r: Renewing, ms: int) -> str:
        asked.append(ms)
        return "x"

    await table.renew(old, change, lambda n: n * 1000)
    assert asked == [3000] and not table.entries


@pytest.mark.parametrize("n", [0, 1])
def test_renew_steps_grow(n: int) -> None:
    assert RENEW_STEPS_MS[n] < RENEW_STEPS_MS[n + 1]
