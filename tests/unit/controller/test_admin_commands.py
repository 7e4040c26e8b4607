"""mqadmin controller commands (RocketMQ 5's syntax and output) against a controller on the fake Raft."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from brokerd.admin.cli import arun_command
from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from tests.unit.controller.harness import Harness, make_config


async def run(argv: list[str]) -> int:
    return await arun_command(argv)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness(make_config())
    await harness.start()
    for i in (1, 2):
        r = await harness.call(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "c1", "brokerName": "b",
                                                              "appliedBrokerId": str(i), "registerCheckCode": f"h{i}:1;1"})
        assert r.code == RC.SUCCESS
    await harness.call(Q.CONTROLLER_ELECT_MASTER, {"clusterName": "c1", "brokerName": "b", "brokerId": "1"})
    yield harness
    await harness.stop()


async def test_metadata_and_sync_state_set(h: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["getControllerMetaData", "-a", h.addr]) == 0
    out = capsys.readouterr().out
    assert "\n#ControllerGroup\tg\n#ControllerLeaderId\tn0\n" in out and "\n#Peer:\tn1:127.0.0.1:19002" in out  # port-ok: data, nothing binds it
    assert await run(["getSyncStateSet", "-a", h.addr, "-b", "b,zz"]) == 0
    out = capsys.readouterr().out
    assert "#MasterBrokerId\t1" in out and "#MasterEpoch\t1" in out and "brokerId=1, brokerAddress='h1:1'" in out
    assert "zz\t(unknown to the controller)" in out
    assert await run(["getSyncStateSet", "-a", h.addr]) == 1


async def test_elect_and_clean(h: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    # broker 2 is neither alive nor in the sync state set: a designated election must fail clearly
    assert await run(["electMaster", "-a", h.addr, "-b", "2", "-bn", "b", "-c", "c1"]) == 1
    assert "2012" in capsys.readouterr().err
    h.srv.live.heartbeat("c1", "b", 2, "h2:1", 0, 0, 0, 1)
    h.srv.update_config({"enableElectUncleanMaster": "true"})
    assert await run(["electMaster", "-a", h.addr, "-b", "2", "-bn", "b", "-c", "c1"]) == 0
    out = capsys.readouterr().out
    assert "\n#ClusterName\tc1\n#BrokerName\tb\n#BrokerMasterAddr\th2:1\n#MasterEpoch\t" in out
    assert await run(["cleanBrokerMetadata", "-a", h.addr, "-bn", "b", "-b", "2", "-c", "c1"]) == 1  # alive
    assert await run(["cleanBrokerMetadata", "-a", h.addr, "-bn", "b", "-b", "1", "-c", "c1"]) == 0
    assert "clear broker b metadata from controller success!" in capsys.readouterr().out
    assert set(h.sm.image.sets["b"].brokers) == {2}
    assert await run(["cleanBrokerMetadata", "-a", h.addr, "-bn", "b", "-l"]) == 0
    assert "b" not in h.sm.image.sets


async def test_config_commands(h: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["updateControllerConfig", "-a", h.addr, "-k", "electMasterMaxRetryCount", "-v", "5"]) == 0
    assert h.srv.cfg.elect_master_max_retry_count == 5
    assert f"update controller config success![{h.addr}]\nelectMasterMaxRetryCount : 5" in capsys.readouterr().out
    assert await run(["updateControllerConfig", "-a", h.addr, "-k", "controllerDLegerGroup", "-v", "x"]) == 1
    assert "controllerDLegerGroup" in capsys.readouterr().err
    assert await run(["getControllerConfig", "-a", h.addr]) == 0
    out = capsys.readouterr().out
    assert f"============{h.addr}============" in out and "electMasterMaxRetryCount" in out


async def test_unreachable_controller_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["getControllerMetaData", "-a", "127.0.0.1:1"]) == 1
    assert "cannot reach" in capsys.readouterr().err
