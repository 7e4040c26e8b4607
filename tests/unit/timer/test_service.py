"""The timer service in an in-process broker (real files): due times kept, restarts, rolls, recalls, transactions,
illegal deliveries and the figures. The service's own loop runs unless a test drives it step by step."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from brokerd import message as m
from brokerd.message import decode_record, encode_properties
from brokerd.timer.core import TIMER_TOPIC, delete_key
from tests.support import until
from tests.unit.timer.conftest import BrokerFactory, delivered, now_ms, send_timer, steps_until, timer_msg


async def test_timers_fire_at_their_time_never_before(make_broker: BrokerFactory) -> None:
    b = await make_broker(manual=False)
    start = now_ms()
    dues = [start + 200 + 17 * i for i in range(40)]
    for i, due in enumerate(dues):
        send_timer(b, timer_msg("Real", f"U{i}", due))
    await until(lambda: len(delivered(b, "Real")) == 40, "40 timers fired", timeout=10)
    got = delivered(b, "Real")
    assert sorted(u for u, _, _ in got) == sorted(f"U{i}" for i in range(40))
    late = [stored - due for _, stored, due in got]
    assert min(late) >= 0, late  # never early
    assert max(late) < 1000, late  # (a loaded machine: the benchmark measures the real figure)
    st = b.timers.status()
    assert st["fired"] == 40 and st["pending"] == 0 and st["parked"] == 40


async def test_a_consumer_sees_a_fired_timer_without_any_property_of_the_firing(make_broker: BrokerFactory) -> None:
    """What a consumer pulls is the message as sent plus RocketMQ's timer properties (its due time, enqueue and
    dequeue times): nothing of the batch it went out in (exactly-once needs no mark on a delivery)."""
    b = await make_broker()
    due = now_ms() + 200
    sent = [timer_msg("Real", f"U{i}", due, order=str(i)) for i in range(3)]
    own = [dict(x.properties) for x in sent]
    for x in sent:
        send_timer(b, x)
    await until(lambda: now_ms() > due, "the timers' due time")
    await steps_until(b, lambda: len(delivered(b, "Real")) == 3, "the timers fired")
    r = b.store.get_message("Real", 0, 0, 32)  # the consumer read (PULL_MESSAGE, POP)
    got = {p[m.UNIQ_KEY]: p for p in (decode_record(buf)[0].properties for buf in r.buffers)}
    timer_keys = {m.TIMER_OUT_MS, m.TIMER_ENQUEUE_MS, m.TIMER_DEQUEUE_MS}
    for props in own:
        seen = got[props[m.UNIQ_KEY]]
        assert set(seen) == set(props) | timer_keys and "__BATCH" not in seen, seen
        assert {k: seen[k] for k in props} == props


async def test_pending_timers_survive_a_restart_and_fire_once(make_broker: BrokerFactory, tmp_path: Path) -> None:
    b = await make_broker(tmp_path / "r")
    due = now_ms() + 400
    for i in range(30):
        send_timer(b, timer_msg("Real", f"U{i}", due + (1000 if i >= 20 else 0)))
    await until(lambda: now_ms() > due, "the first 20 due")
    await steps_until(b, lambda: len(delivered(b, "Real")) == 20, "the first 20 fired")
    await b.timers.snapshot()
    for i in range(30, 35):  # after the snapshot: found again from the timer topic
        send_timer(b, timer_msg("Real", f"U{i}", due + 1000))
    await b.shutdown()
    again = await make_broker(tmp_path / "r")
    assert again.timers.pending() == 15 and again.timers.index.next_q == 35
    await until(lambda: now_ms() > due + 1000, "the rest due")
    await steps_until(again, lambda: len(delivered(again, "Real")) == 35 and again.timers.pending() == 0, "all fired")
    assert Counter(u for u, _, _ in delivered(again, "Real")) == Counter({f"U{i}": 1 for i in range(35)})


async def test_a_timer_beyond_the_window_is_rolled_and_fires_once_at_its_time(make_broker: BrokerFactory) -> None:
    b = await make_broker(manual=False, timer_roll_window_slot=3)  # a 300 ms window
    due = now_ms() + 1500
    send_timer(b, timer_msg("Real", "FAR", due))
    await until(lambda: len(delivered(b, "Real")) == 1, "the far timer fired", timeout=10)
    [(uniq, stored, out)] = delivered(b, "Real")
    assert uniq == "FAR" and out == due and stored >= due
    assert b.timers.stats.rolled >= 3
    r = b.store.get_message("Real", 0, 0, 1)
    props = decode_record(r.buffers[0])[0].properties
    assert int(props[m.TIMER_ROLL_TIMES]) == b.timers.stats.rolled and m.REAL_TOPIC not in props


async def test_a_recalled_timer_never_fires_and_a_delete_key_send_recalls_too(make_broker: BrokerFactory) -> None:
    b = await make_broker()
    due = now_ms() + 300
    for i in range(4):
        send_timer(b, timer_msg("Real", f"U{i}", due))
    assert b.timers.find("Real", "U1") == [1] and b.timers.find("Other", "U1") == []
    assert b.timers.recall([1], "U1").ok
    delete = timer_msg("Real", "D", due)
    delete.properties[m.TIMER_DEL_UNIQKEY] = delete_key("Real", "U2")
    assert b.timers.park(delete) is None and delete.topic != TIMER_TOPIC  # a RECALL marker, not a timer
    res = b.store.append_message(delete)
    b.timers.parked(delete, res.queue_offset, res.wrote_offset, res.wrote_bytes)
    await until(lambda: now_ms() > due, "due")
    await steps_until(b, lambda: b.timers.pending() == 0, "resolved")
    assert sorted(u for u, _, _ in delivered(b, "Real")) == ["U0", "U3"]
    assert b.timers.stats.recalled == 2 and b.timers.find("Real", "U1") == []


async def test_a_committed_transactional_timer_waits_from_its_commit(make_broker: BrokerFactory) -> None:
    b = await make_broker(manual=False)
    half = timer_msg("Real", "TX", 0)
    half.properties = {m.UNIQ_KEY: "TX", m.TIMER_DELAY_MS: "300", m.TRAN_MSG: "true"}
    half.sys_flag = m.TRANSACTION_PREPARED_TYPE
    assert b.timers.park(half) is None and half.topic == "Real"  # a half message is left to the transactions
    committed = timer_msg("Real", "TX", 0)
    committed.properties = {m.UNIQ_KEY: "TX", m.TIMER_DELAY_MS: "300"}
    committed.sys_flag = m.TRANSACTION_COMMIT_TYPE
    at = now_ms()
    assert b.timers.park(committed) is None and committed.topic == TIMER_TOPIC
    assert (await b.store.put_message(committed)).ok  # as END_TRANSACTION stores it (the follower indexes it)
    await until(lambda: len(delivered(b, "Real")) == 1, "the committed timer fired")
    [(_, stored, due)] = delivered(b, "Real")
    assert due >= at + 300 and stored >= due


async def test_an_illegal_delivery_is_dropped_and_the_rest_of_its_batch_fires(make_broker: BrokerFactory) -> None:
    b = await make_broker()
    due = now_ms() + 200
    send_timer(b, timer_msg("Real", "OK1", due))
    big = timer_msg("Real", "BIG", due, pad="x")
    assert b.timers.park(big) is None
    grow = m.MAX_PROPERTIES_SIZE - 20 - len(encode_properties(big.properties))
    big.properties["pad"] += "x" * grow  # parked it fits; fired (TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS...) it does not
    res = b.store.append_message(big)
    assert res.ok
    b.timers.parked(big, res.queue_offset, res.wrote_offset, res.wrote_bytes)
    send_timer(b, timer_msg("Real", "OK2", due))
    await until(lambda: now_ms() > due, "due")
    await steps_until(b, lambda: b.timers.pending() == 0, "resolved")
    assert sorted(u for u, _, _ in delivered(b, "Real")) == ["OK1", "OK2"] and b.timers.stats.dropped == 1


async def test_figures_pending_by_due_time(make_broker: BrokerFactory) -> None:
    b = await make_broker()
    now = now_ms()
    for i, ahead in enumerate((500, 5_000, 30_000, 3_000_000)):
        send_timer(b, timer_msg("Real", f"U{i}", now + ahead))
    await b.timers.step()
    st = b.timers.status()
    assert st["pending"] == 4 and st["pendingByDue"]["+Inf"] == 4
    assert st["pendingByDue"]["1"] == 1 and st["pendingByDue"]["10"] == 2 and st["pendingByDue"]["60"] == 3




async def test_metrics_and_dashboard_show_timers(make_broker: BrokerFactory) -> None:
    from dataclasses import dataclass

    from container.dashboard.figures import broker_row
    from container.metrics import render

    b = await make_broker()
    due = now_ms() + 200
    for i in range(3):
        send_timer(b, timer_msg("Real", f"U{i}", due if i < 2 else due + 3_600_000))
    await until(lambda: now_ms() > due, "due")
    await steps_until(b, lambda: b.timers.stats.fired == 2, "2 fired")

    @dataclass
    class Slot:
        broker: object

    @dataclass
    class Directory:
        brokers: dict[str, Slot]

    text = render(Directory({"c:timer-test:0": Slot(b)}))  # type: ignore[arg-type]
    assert 'rocketmq_timer_pending{broker="c:timer-test:0"} 1' in text
    assert 'rocketmq_timer_fired_total{broker="c:timer-test:0"} 2' in text
    assert 'rocketmq_timer_pending_by_due{broker="c:timer-test:0",le="+Inf"} 1' in text
    assert 'rocketmq_timer_pending_by_due{broker="c:timer-test:0",le="86400"} 1' in text
    assert 'rocketmq_timer_fire_lateness_ms_count{broker="c:timer-test:0"} 2' in text
    row = broker_row("c:timer-test:0", b)
    assert row["timers"]["pending"] == 1 and row["timers"]["fired"] == 2 and row["metrics"]["rocketmq_timer_fired_total"] == 2


async def test_metrics_count_the_batch_appends_the_stores_c_run_left_to_python(make_broker: BrokerFactory) -> None:
    """``rocketmq_store_batch_fallbacks_total{broker,reason}``: every reason, from ``store.batch_stats()``."""
    from dataclasses import dataclass

    from brokerd.store.batch_append import FALLBACK_REASONS
    from container.metrics import render

    @dataclass
    class Slot:
        broker: object

    @dataclass
    class Directory:
        brokers: dict[str, Slot]

    b = await make_broker()
    odd = timer_msg("Real", "ODD", 0)
    odd.properties["N"] = 5  # type: ignore[assignment]  # not a string: the C run leaves the batch to Python
    assert b.store.append_messages([timer_msg("Real", "A", 0), odd]).ok
    native = b.store.batch_stats()["native"]
    text = render(Directory({"c:timer-test:0": Slot(b)}))  # type: ignore[arg-type]
    assert "# TYPE rocketmq_store_batch_fallbacks_total counter" in text
    for reason in FALLBACK_REASONS:
        n = 1 if native and reason == "properties" else 0
        assert f'rocketmq_store_batch_fallbacks_total{{broker="c:timer-test:0",reason="{reason}"}} {n}' in text
