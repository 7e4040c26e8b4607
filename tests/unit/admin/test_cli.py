"""mqadmin's command line without servers: help, unknown commands and options, malformed values (exit 1, one
line naming what is wrong, nothing sent)."""

from __future__ import annotations

import io

import pytest

from brokerd.admin.cli import commands, run_command, take_credentials

UNREACHABLE = "127.0.0.1:1"  # port-ok: nothing listens on port 1; a request would fail differently


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return run_command(list(argv), out), out.getvalue()


def test_overview_lists_every_command_in_rocketmqs_order() -> None:
    code, out = run()
    assert code == 0 and out.startswith("The most commonly used mqadmin commands are:\n   updateTopic ")
    names = [c.name for c in commands()]
    for name in ("consumerProgress", "resetOffsetByTime", "getSyncStateSet", "electMaster", "addBroker",
                 "exportMetrics", "getAclConfig", "listBrokers"):
        assert name in names and f"   {name} " in out


def test_help_of_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run("help", "updateTopic")
    assert code == 0 and out.startswith("usage: mqadmin updateTopic") and "-t,--topic <arg>" in out
    code, out = run("updatetopic", "-h")  # names are matched ignoring case, as RocketMQ does
    assert code == 0 and "usage: mqadmin updateTopic" in out
    assert run("help", "nope")[0] == 1
    assert "The sub command nope not exist." in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "needle"), [
    (["noSuchCommand"], "The sub command noSuchCommand not exist"),
    (["updateTopic", "-c", "C"], "Missing required option: t"),
    (["updateTopic", "-t", "T"], "Missing required option: [-b"),
    (["updateTopic", "-t", "T", "-c", "C", "-x", "1"], "Unrecognized option: -x"),
    (["updateTopic", "-t", "T", "-c", "C", "-r", "eight"], "'eight' is not a number"),
    (["updateTopic", "-t", "bad topic!", "-c", "C"], "contains illegal characters"),
    (["updateTopic", "-t", "T", "-c", "C", "-p", "9"], "topicPermission value: 9 is invalid."),
    (["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "2024-01-01 10:00:00"], "yyyy-MM-dd#HH:mm:ss:SSS"),
    (["printMsg", "-t", "T", "-b", "now"], "yyyy-MM-dd#HH:mm:ss:SSS"),
    (["removeBroker", "-c", UNREACHABLE, "-b", "not-an-identity"], "clusterName:brokerName:brokerId"),
    (["updateBrokerConfig", "-b", UNREACHABLE, "-k", "brokerPermission", "-v", "many"], "brokerPermission value"),
    (["electMaster", "-a", UNREACHABLE, "-b", "x", "-bn", "b", "-c", "c"], "brokerId 'x' is not a number"),
    (["cleanBrokerMetadata", "-a", UNREACHABLE, "-bn", "b"], "clusterName option can not be empty"),
    (["updateAclConfig", "-b", UNREACHABLE, "-a", "ak", "-s", "12345678", "-t", "T=ALL"], "DENY|PUB|SUB"),
    (["topicList"], "no name server address"),
])
def test_bad_input_is_one_line_and_exit_1(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    code, out = run(*argv)
    err = capsys.readouterr().err
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and needle in err, err


def test_credentials_are_taken_unless_the_command_owns_the_option() -> None:
    argv, creds = take_credentials(["topicList", "--accessKey", "ak", "--secretKey", "sk12345678"])
    assert argv == ["topicList"] and creds == ("ak", "sk12345678")
    argv, creds = take_credentials(["updateAclConfig", "--accessKey", "new"], frozenset({"accessKey", "secretKey"}))
    assert argv == ["updateAclConfig", "--accessKey", "new"] and creds is None
    with pytest.raises(ValueError, match="together"):
        take_credentials(["topicList", "--accessKey", "ak"])
