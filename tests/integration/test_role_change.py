"""A broker changes role at runtime without restarting: master <-> slave, with the name server told at once."""

from __future__ import annotations

import pathlib

import orjson
import pytest

from brokerd.message import decode_records
from container.config import ContainerConfig
from container.host import BrokerContainer, ContainerError
from tests.support import arpc, broker_port, write_broker_conf

pytestmark = pytest.mark.integration

SEND = {"a": "pg", "b": "T_role", "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0", "h": "0"}
PULL = {"consumerGroup": "g", "topic": "T_role", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}


async def route_ids(c: BrokerContainer) -> dict[str, str]:
    r = await arpc(c.namesrv_addrs[0], 105, {"topic": "T_role"})
    return orjson.loads(r.body)["brokerDatas"][0]["brokerAddrs"] if r.code == 0 else {}


async def test_master_becomes_slave_and_back_without_restart(tmp_path: pathlib.Path) -> None:
    port = broker_port()
    conf = write_broker_conf(tmp_path / "b.conf", name="broker-r", port=port, store=tmp_path / "store")
    c = BrokerContainer(ContainerConfig(listen_port=0, embedded_namesrv_port=0, metrics_port=-1,
                                        container_state_file=str(tmp_path / "state.json"),
                                        broker_config_paths=str(conf)))
    await c.start()
    addr = f"127.0.0.1:{port}"
    try:
        assert (await arpc(addr, 310, SEND, b"one")).code == 0
        assert await route_ids(c) == {"0": addr}
        ident = await c.change_role("DefaultCluster:broker-r:0", "SLAVE", 1)
        assert ident == "DefaultCluster:broker-r:1" and ident in c.brokers
        r = await arpc(addr, 310, SEND, b"refused")
        assert r.code == 14 and "slave" in (r.remark or "")
        assert await route_ids(c) == {"1": addr}
        assert [m.body for m in decode_records((await arpc(addr, 11, PULL)).body)] == [b"one"]  # still serves reads
        with pytest.raises(ContainerError):
            await c.change_role(ident, "SLAVE", 0)  # invalid: a slave needs brokerId > 0
        assert await c.change_role(ident, "ASYNC_MASTER", 0) == "DefaultCluster:broker-r:0"
        r = await arpc(addr, 310, SEND, b"two")
        assert r.code == 0 and r.ext["queueOffset"] == "1"  # same store, offsets continue
        assert await route_ids(c) == {"0": addr}
    finally:
        await c.stop()
