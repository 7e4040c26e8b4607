"""A slave follows the master's timers and markers from the replicated log bytes and, promoted, fires exactly what
its log says is due and not resolved: in-process brokers, the master's log copied into the slave's store as
replication appends it (``append_raw``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from brokerd.broker import Broker
from tests.support import until
from tests.unit.timer.conftest import BrokerFactory, delivered, now_ms, send_timer, steps_until, timer_msg


def replicate(master: Broker, slave: Broker, upto: int | None = None) -> None:
    """Append the master's log from the slave's end (to ``upto``) to the slave, as the HA slave does."""
    end = master.store.max_phy_offset if upto is None else upto
    at = slave.store.max_phy_offset
    while at < end:
        with master.store.read_range(at, end - at) as view:
            chunk = bytes(view)
        at = slave.store.append_raw(at, chunk)


async def test_a_promoted_slave_fires_the_rest_exactly_once(make_broker: BrokerFactory, tmp_path: Path) -> None:
    master = await make_broker(tmp_path / "m")
    slave = await make_broker(tmp_path / "s", broker_role="SLAVE", broker_id=1)
    due = now_ms() + 400
    for i in range(30):
        send_timer(master, timer_msg("Real", f"U{i}", due if i < 20 else due + 60_000))
    await until(lambda: now_ms() > due, "the first 20 due")
    await steps_until(master, lambda: len(delivered(master, "Real")) == 20, "the master fired 20")
    late = now_ms() + 150
    send_timer(master, timer_msg("Real", "LATE", late))  # the master does not fire it: it stops stepping
    await until(lambda: now_ms() > late, "LATE due before the slave indexes it")
    replicate(master, slave)
    slave.store.request_flush()
    await until(lambda: slave.store.flushed_offset >= slave.store.max_phy_offset, "the slave's log flushed")
    await steps_until(slave, lambda: slave.timers.progress.fired.pending(31) == 11, "the slave followed")
    assert not slave.timers.master and len(delivered(slave, "Real")) == 20
    await master.shutdown()  # the master is gone
    await slave.change_role("ASYNC_MASTER", 0)  # an admin's role change: the slave takes writes
    await steps_until(slave, lambda: len(delivered(slave, "Real")) == 21, "the promoted slave fired LATE")
    got = Counter(u for u, _, _ in delivered(slave, "Real"))
    assert got == Counter({f"U{i}": 1 for i in range(20)} | {"LATE": 1}) and slave.timers.pending() == 10
