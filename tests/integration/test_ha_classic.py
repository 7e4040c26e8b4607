"""Classic master/slave roles (no controller): SYNC_MASTER waits for a slave, a slave follows the master the name
server names, and an admin's role change moves replication with it. Two containers in this process, real sockets.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from brokerd.broker import Broker
from container.config import ContainerConfig
from container.host import BrokerContainer
from tests.support import arpc, broker_port, free_port, write_broker_conf

pytestmark = pytest.mark.integration

SEND = {"a": "pg", "b": "T_classic", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}


async def until(cond: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)  # sleep-ok: polling interval of a deadline-bounded wait


@asynccontextmanager
async def container(tmp: pathlib.Path, name: str, conf: pathlib.Path, namesrv: int | None) -> AsyncIterator[Broker]:
    cfg = ContainerConfig(listen_port=0, embedded_namesrv_enable=namesrv is None,
                          embedded_namesrv_port=free_port() if namesrv is None else 0,
                          namesrv_addr=None if namesrv is None else f"127.0.0.1:{namesrv}", metrics_port=-1,
                          container_state_file=str(tmp / f"{name}.json"), broker_config_paths=str(conf))  # fmt: skip
    c = BrokerContainer(cfg)
    await c.start()
    try:
        yield next(iter(c.brokers.values())).broker
    finally:
        await c.stop()


async def test_sync_master_answers_slave_not_available_until_a_slave_caught_up(tmp_path: pathlib.Path) -> None:
    mport, sport = broker_port(), broker_port()
    mconf = write_broker_conf(tmp_path / "m.conf", name="bc", port=mport, store=tmp_path / "m", brokerRole="SYNC_MASTER")
    sconf = write_broker_conf(tmp_path / "s.conf", name="bc", port=sport, store=tmp_path / "s", brokerRole="SLAVE",
                              brokerId=1)  # no haMasterAddress: the name server's answer names the master
    maddr = f"127.0.0.1:{mport}"
    async with container(tmp_path, "a", mconf, None) as master:
        r = await arpc(maddr, 310, SEND, b"alone")
        assert r.code == 11 and r.remark == "SLAVE_NOT_AVAILABLE" and r.ext["msgId"]  # stored, not replicated
        nport = int(master.namesrv_addrs[0].rsplit(":", 1)[1])
        async with container(tmp_path, "b", sconf, nport) as slave:
            await until(lambda: slave.store.max_phy_offset == master.store.max_phy_offset, "the slave caught up")
            for i in range(20):
                r = await arpc(maddr, 310, {**SEND, "e": str(i % 4)}, b"replicated-%d" % i)
                assert r.code == 0, r.remark
                assert slave.store.max_phy_offset >= master.store.max_phy_offset  # acknowledged once the slave held it
            assert slave.master_addr == maddr and not slave.is_writeable()
            assert slave.store.max_phy_offset == master.store.max_phy_offset
            r = await arpc(f"127.0.0.1:{sport}", 310, SEND, b"to the slave")
            assert r.code in (14, 16)  # a slave takes no writes
        r = await arpc(maddr, 310, SEND, b"slave gone", timeout=8.0)
        assert r.code in (11, 12)  # SLAVE_NOT_AVAILABLE at once, or FLUSH_SLAVE_TIMEOUT while it looked alive


async def test_an_admin_role_swap_moves_replication_with_it(tmp_path: pathlib.Path) -> None:
    """Master ⇄ slave swapped by admin (change_role) on both brokers: the new master starts a new epoch and the
    old one follows it, so both logs stay identical."""
    aport, bport = broker_port(), broker_port()
    aconf = write_broker_conf(tmp_path / "a.conf", name="bs", port=aport, store=tmp_path / "a",
                              brokerRole="ASYNC_MASTER")  # fmt: skip
    bconf = write_broker_conf(tmp_path / "b.conf", name="bs", port=bport, store=tmp_path / "b", brokerRole="SLAVE",
                              brokerId=1, haMasterAddress=f"127.0.0.1:{aport + 1}")  # fmt: skip
    async with container(tmp_path, "a", aconf, None) as a:
        nport = int(a.namesrv_addrs[0].rsplit(":", 1)[1])
        async with container(tmp_path, "b", bconf, nport) as b:
            for i in range(10):
                assert (await arpc(a.cfg.broker_addr, 310, SEND, b"first-%d" % i)).code == 0
            await until(lambda: b.store.max_phy_offset == a.store.max_phy_offset, "b caught up with a")
            await a.change_role("SLAVE", 1)
            await b.change_role("ASYNC_MASTER", 0)
            a.replication.ha.set_master_address(f"127.0.0.1:{bport + 1}")
            for i in range(10):
                r = await arpc(b.cfg.broker_addr, 310, SEND, b"second-%d" % i)
                assert r.code == 0 and r.ext["queueOffset"] == str(10 + i)
            await until(lambda: a.store.max_phy_offset == b.store.max_phy_offset, "a caught up with b")
            assert [e.epoch for e in a.store.epoch_entries()] == [e.epoch for e in b.store.epoch_entries()] == [1, 2]
