"""NamesrvConfig validation, `mqnamesrv -p`, and the persisted KV config."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from brokerd.config_file import ConfigError, build_config, parse_properties
from brokerd.namesrv.kvconfig import KVConfigError, KVConfigTable
from brokerd.namesrv.main import load_config, main
from brokerd.namesrv.service import NamesrvConfig


def test_defaults_match_rocketmq() -> None:
    cfg = NamesrvConfig()
    assert (cfg.listen_port, cfg.scan_not_active_broker_interval_ms, cfg.broker_channel_expired_ms) == (
        9876, 5000, 120000)
    assert cfg.enable_all_topic_list and not cfg.order_message_enable


def test_properties_use_rocketmq_keys() -> None:
    cfg = build_config(NamesrvConfig, parse_properties(
        "# comment\nlistenPort = 19876\nscanNotActiveBrokerInterval: 1000\nenableAllTopicList=false\nrocketmqHome=/x\n"))  # port-ok: data, nothing binds it
    assert cfg.listen_port == 19876 and cfg.scan_not_active_broker_interval_ms == 1000  # port-ok: a config value read back, nothing binds it
    assert not cfg.enable_all_topic_list


@pytest.mark.parametrize("text,key", [
    ("listenPort=70000", "listenPort"),  # port-ok: data, nothing binds it
    ("listenPort=abc", "listenPort"),
    ("scanNotActiveBrokerInterval=0", "scanNotActiveBrokerInterval"),
    ("brokerChannelExpiredMs=-5", "brokerChannelExpiredMs"),
    ("enableAllTopicList=maybe", "enableAllTopicList"),
])
def test_invalid_values_name_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        build_config(NamesrvConfig, parse_properties(text))


def test_print_config_and_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=12345\n")  # port-ok: data, nothing binds it
    assert main(["-c", str(conf), "-p"]) == 0
    out = capsys.readouterr().out
    assert "listenPort=12345\n" in out and "scanNotActiveBrokerInterval=5000\n" in out  # port-ok: data, nothing binds it


def test_bad_config_file_exits_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-c", str(tmp_path / "missing.conf"), "-p"]) == 1
    assert "missing.conf" in capsys.readouterr().err
    conf = tmp_path / "bad.conf"
    conf.write_text("listenPort=-1\n")
    assert main(["-c", str(conf)]) == 1
    assert "listenPort" in capsys.readouterr().err


def test_shipped_conf_file_is_valid() -> None:
    cfg = load_config(str(Path(__file__).parents[3] / "conf" / "namesrv.conf"))
    assert cfg.listen_port == 9876  # port-ok: a config value read back, nothing binds it


def test_kv_config_persists_in_java_format(tmp_path: Path) -> None:
    path = tmp_path / "kv" / "kvConfig.json"
    kv = KVConfigTable(str(path))
    kv.put("ORDER_TOPIC_CONFIG", "T1", "broker-a:4")
    kv.put("ns2", "k", "v")
    assert kv.delete("ns2", "k") and not kv.delete("ns2", "k")
    assert orjson.loads(path.read_bytes()) == {"configTable": {"ORDER_TOPIC_CONFIG": {"T1": "broker-a:4"}}}
    again = KVConfigTable(str(path))
    assert again.get("ORDER_TOPIC_CONFIG", "T1") == "broker-a:4"
    assert again.namespace("ns2") is None


def test_corrupt_kv_file_is_reported_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_text("{oops")
    with pytest.raises(KVConfigError, match="kvConfigPath"):
        KVConfigTable(str(path))
    assert path.read_text() == "{oops"
