"""Controller config: RocketMQ properties files into a frozen, validated dataclass; errors name the key."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from controller.config import ConfigError, ControllerConfig, config_from_properties, load_config, parse_properties
from controller.main import main

BASE = {"controllerDLegerGroup": "g", "controllerDLegerPeers": "n0-127.0.0.1:9877;n1-127.0.0.1:9878",  # port-ok: data, nothing binds it
        "controllerDLegerSelfId": "n1", "controllerStorePath": "/tmp/x"}
REPO = pathlib.Path(__file__).resolve().parents[3]


def test_shipped_3n_configs_parse() -> None:
    ids = set()
    for i in range(3):
        cfg = load_config(str(REPO / f"conf/controller/3n/controller-n{i}.conf"))
        ids.add(cfg.self_id)
        assert cfg.peers == {"n0": "127.0.0.1:9877", "n1": "127.0.0.1:9878", "n2": "127.0.0.1:9879"}  # port-ok: data, nothing binds it
        assert cfg.raft_peers["n2"] == "127.0.0.1:10879"  # port-ok: data, nothing binds it
        assert cfg.listen_port == 9877 + i and cfg.broker_heartbeat_timeout_ms == 3000  # port-ok: a config value read back, nothing binds it
        assert cfg.namesrv_listen_port == 9876 + 10 * i  # port-ok: a config value read back, nothing binds it
    assert ids == {"n0", "n1", "n2"}


def test_properties_syntax() -> None:
    text = "# comment\n! also\na = 1\nb:2\nc=x\\\n  y\n\nd\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "xy", "d": ""}


def test_defaults_and_frozen() -> None:
    cfg = config_from_properties(BASE)
    assert cfg.self_addr == "127.0.0.1:9878" and cfg.read_mode == "read_index" and not cfg.legacy_mode  # port-ok: data, nothing binds it
    assert cfg.elect_master_max_retry_count == 3 and cfg.notify_broker_role_changed and cfg.namesrv_listen_port is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.group = "other"  # type: ignore[misc]


@pytest.mark.parametrize("key,value", [
    ("controllerDLegerPeers", "n0:127.0.0.1:9877"),  # port-ok: data, nothing binds it
    ("controllerDLegerPeers", "n0-127.0.0.1:99999"),  # port-ok: data, nothing binds it
    ("controllerDLegerPeers", "n0-127.0.0.1:1;n0-127.0.0.1:2"),
    ("controllerDLegerSelfId", "n7"),
    ("controllerDLegerGroup", ""),
    ("enableElectUncleanMaster", "yes"),
    ("electMasterMaxRetryCount", "three"),
    ("brokerHeartbeatTimeoutMs", "0"),
    ("controllerReadMode", "fast"),
    ("raftLeaseRatio", "1.5"),
    ("raftPortOffset", "70000"),
    ("raftHeartbeatIntervalMs", "900"),
])
def test_invalid_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_properties({**BASE, key: value})
    assert key in str(e.value)


def test_runtime_updates_only_for_updatable_keys() -> None:
    cfg = config_from_properties(BASE)
    new = cfg.with_updates({"enableElectUncleanMaster": "true", "controllerReadMode": "lease"}, runtime=True)
    assert new.enable_elect_unclean_master and new.read_mode == "lease" and not cfg.enable_elect_unclean_master
    with pytest.raises(ConfigError, match="controllerDLegerPeers.*runtime"):
        cfg.with_updates({"controllerDLegerPeers": "n0-1.1.1.1:1"}, runtime=True)
    assert isinstance(cfg.with_updates({"raftFsync": "false"}), ControllerConfig)


def test_mqcontroller_refuses_bad_config_naming_the_key(tmp_path: pathlib.Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in {**BASE, "scanNotActiveBrokerInterval": "-5"}.items()))
    assert main(["-c", str(conf)]) == 1
    assert "scanNotActiveBrokerInterval" in capsys.readouterr().err
    assert main(["-c", str(tmp_path / "missing.conf")]) == 1
    conf.write_text("".join(f"{k}={v}\n" for k, v in BASE.items()))
    assert main(["-c", str(conf), "-p"]) == 0
    assert "controllerDLegerSelfId=n1" in capsys.readouterr().out
