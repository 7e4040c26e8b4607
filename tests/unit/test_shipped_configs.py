"""The configuration files we ship parse, and the cross-deployment examples are consistent."""

from __future__ import annotations

import collections
import os
import pathlib

import pytest

from brokerd.broker_config import load_broker_config
from brokerd.config_file import ConfigError, read_properties
from container.config import load_container_config

CONF = pathlib.Path(__file__).resolve().parents[2] / "conf"


def test_default_container_hosts_broker_a_and_b_with_embedded_namesrv() -> None:
    cfg = load_container_config(str(CONF / "broker-container.conf"))
    assert cfg.embedded_namesrv_enable and cfg.embedded_namesrv_port == 9876 and cfg.listen_port == 10811  # port-ok: a config value read back, nothing binds it
    brokers = {load_broker_config(p).broker_name: load_broker_config(p).listen_port for p in cfg.broker_paths}
    assert brokers == {"broker-a": 10911, "broker-b": 10921}


@pytest.mark.parametrize("topology,containers,replicas", [("2c-1m1s", 2, 2), ("3c-1m2s", 3, 3)])
def test_cross_deployment_examples(topology: str, containers: int, replicas: int) -> None:
    sets: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for i in range(1, containers + 1):
        cfg = load_container_config(str(CONF / "container" / topology / f"container-{i}.conf"))
        ports = []
        for p in cfg.broker_paths:
            b = load_broker_config(p)
            sets[b.broker_name].append((b.broker_id, b.broker_role))
            ports += [b.listen_port, b.listen_port - 2, b.listen_port + 1]
        assert len(ports) == len(set(ports)), f"port clash inside container {i}"
        masters = [p for p in cfg.broker_paths if load_broker_config(p).broker_id == 0]
        assert len(masters) == 1, "each container hosts exactly one master"
    for name, members in sets.items():
        assert len(members) == replicas
        assert sorted(i for i, _ in members) == list(range(replicas)), name
        assert [r for i, r in members if i == 0] == ["SYNC_MASTER"]


@pytest.mark.parametrize("topology,containers", [("2c-1m1s", 2), ("3c-1m2s", 3)])
def test_cross_deployments_run_in_controller_mode_with_the_shipped_controllers(topology: str, containers: int) -> None:
    """The HA deployments point at conf/controller/3n (controllers and their name-server role), acknowledge only
    what the whole sync state set holds, and prefer the configured master at elections."""
    peers, namesrvs = [], []
    for i in range(3):
        props = read_properties(str(CONF / "controller" / "3n" / f"controller-n{i}.conf"))
        peers = [p.split("-", 1)[1] for p in props["controllerDLegerPeers"].split(";")]
        namesrvs.append(f"127.0.0.1:{props['namesrvListenPort']}")
    for i in range(1, containers + 1):
        cfg = load_container_config(str(CONF / "container" / topology / f"container-{i}.conf"))
        assert cfg.namesrv_addrs == namesrvs and not cfg.embedded_namesrv_enable
        for p in cfg.broker_paths:
            b = load_broker_config(p)
            assert b.enable_controller_mode and b.controller_addrs == peers and b.all_ack_in_sync_state_set
            assert b.broker_election_priority == b.broker_id + 1


def test_invalid_value_names_the_key(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "b.conf"
    bad.write_text("brokerName=x\nlistenPort=eleven\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_broker_config(str(bad))
    bad.write_text("brokerName=x\nflushDiskType=NEVER\n")
    with pytest.raises(ConfigError, match="flushDiskType"):
        load_broker_config(str(bad))


def test_shipped_containers_keep_their_state_file_with_their_brokers_data() -> None:
    """Brokers added at runtime are restored from the container's state file: every shipped container keeps it in
    the data folder of its brokers' stores (relative to the working directory, like storePathRootDir), so deleting
    that folder resets the deployment."""
    containers = [p for p in sorted(CONF.rglob("*.conf")) if "brokerConfigPaths" in read_properties(str(p))]
    assert len(containers) == 7
    for path in containers:
        state = read_properties(str(path)).get("containerStateFile", "")
        cfg = load_container_config(str(path))
        assert state.startswith("./data/") and str(cfg.listen_port) in state, path
        stores = {os.path.dirname(load_broker_config(p).store_path_root_dir) for p in cfg.broker_paths}
        assert stores == {os.path.dirname(state)}, path
