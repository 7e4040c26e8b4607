"""Brokers added at runtime come back at every start from the container's state file, kept with the data as the
shipped configs do (``containerStateFile=./data/...``, relative to the working directory): forgotten after
``removeBroker``, when the file is deleted with the data (``rm -rf data`` resets the deployment), or when the
added broker's config file is gone."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from container.config import ContainerConfig
from container.host import BrokerContainer
from tests.support import broker_port, write_broker_conf

pytestmark = pytest.mark.integration

ADDED = "DefaultCluster:broker-c:0"


async def started(cfg: ContainerConfig) -> BrokerContainer:
    c = BrokerContainer(cfg)
    await c.start()
    return c


async def restart_hosts(cfg: ContainerConfig) -> set[str]:
    """Start the container, note what it hosts, stop it."""
    c = await started(cfg)
    try:
        return set(c.brokers)
    finally:
        await c.stop()


async def add_and_stop(cfg: ContainerConfig, conf: pathlib.Path) -> None:
    c = await started(cfg)
    try:
        await c.add_broker(str(conf))
    finally:
        await c.stop()


async def test_added_brokers_are_restored_from_the_state_file_until_forgotten(tmp_path: pathlib.Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the deployment's directory: its data in ./data
    base = write_broker_conf(tmp_path / "broker-a.conf", name="broker-a", port=broker_port(), store=pathlib.Path("data/a"),
                             mappedFileSizeCommitLog=1 << 20)  # fmt: skip
    added = write_broker_conf(tmp_path / "broker-c.conf", name="broker-c", port=broker_port(),
                              store=pathlib.Path("data/c"), mappedFileSizeCommitLog=1 << 20)  # fmt: skip
    cfg = ContainerConfig(listen_port=0, embedded_namesrv_port=0, metrics_port=-1, broker_config_paths=str(base),
                          container_state_file="./data/container-state.json")  # fmt: skip
    state = tmp_path / "data" / "container-state.json"
    assert cfg.state_file == str(state)  # resolved where the container starts, as storePathRootDir is

    await add_and_stop(cfg, added)
    assert json.loads(state.read_text()) == {"addedBrokerConfigPaths": [str(added)]}
    assert await restart_hosts(cfg) == {"DefaultCluster:broker-a:0", ADDED}  # restored at the next start

    c = await started(cfg)
    try:
        await c.remove_broker(ADDED)  # mqadmin removeBroker
    finally:
        await c.stop()
    assert json.loads(state.read_text()) == {"addedBrokerConfigPaths": []}
    assert ADDED not in await restart_hosts(cfg)

    await add_and_stop(cfg, added)
    shutil.rmtree(tmp_path / "data")  # the data folder gone: the deployment starts as configured
    assert await restart_hosts(cfg) == {"DefaultCluster:broker-a:0"}

    await add_and_stop(cfg, added)
    added.unlink()  # its config file deleted: not restored, and forgotten
    assert await restart_hosts(cfg) == {"DefaultCluster:broker-a:0"}
    assert json.loads(state.read_text()) == {"addedBrokerConfigPaths": []}
