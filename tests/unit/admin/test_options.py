"""mqadmin's option parsing follows commons-cli's DefaultParser, as RocketMQ's mqadmin does."""

from __future__ import annotations

import pytest

from brokerd.admin.options import Group, Opt, UsageError, help_text, parse

SPEC = (
    Group((Opt("b", "brokerAddr", True, "create topic to which broker"),
           Opt("c", "clusterName", True, "create topic to which cluster")), required=True),
    Opt("t", "topic", True, "topic name", required=True),
    Opt("r", "readQueueNums", True, "set read queue nums"),
    Opt("o", "order", False, "a flag"),
    Opt("bn", "brokerName", True, "a two-letter option"),
)


def test_values_in_every_spelling() -> None:
    for argv in (["-c", "C", "-t", "T"], ["-cC", "-tT"], ["--clusterName", "C", "--topic=T"],
                 ["-clusterName", "C", "-t", "T"], ["--cluster", "C", "--top", "T"]):
        p = parse(SPEC, argv)
        assert p.get("c") == "C" and p.get("t") == "T", argv


def test_multi_letter_short_option_and_flags() -> None:
    p = parse(SPEC, ["-c", "C", "-t", "T", "-bn", "broker-a", "-o", "-n", "127.0.0.1:9876"])  # port-ok: data, nothing binds it
    assert p.get("bn") == "broker-a" and p.has("o") and p.get("n") == "127.0.0.1:9876" and not p.has("b")  # port-ok: data, nothing binds it


def test_first_value_of_a_repeated_option_and_negative_numbers() -> None:
    p = parse(SPEC, ["-c", "C", "-t", "T", "-t", "U", "-r", "-1"])
    assert p.get("t") == "T" and p.get("r") == "-1"


def test_missing_required_option() -> None:
    with pytest.raises(UsageError, match="^Missing required option: t$"):
        parse(SPEC, ["-c", "C"])


def test_missing_required_group_names_its_options() -> None:
    with pytest.raises(UsageError, match=r"Missing required option: \[-b create topic to which broker, -c "):
        parse(SPEC, ["-t", "T"])


def test_group_members_are_exclusive() -> None:
    with pytest.raises(UsageError, match="'c' was specified but an option from this group has already been"):
        parse(SPEC, ["-b", "B", "-c", "C", "-t", "T"])


def test_unknown_option_and_missing_value() -> None:
    with pytest.raises(UsageError, match="^Unrecognized option: -x$"):
        parse(SPEC, ["-c", "C", "-t", "T", "-x"])
    with pytest.raises(UsageError, match="^Missing argument for option: t$"):
        parse(SPEC, ["-c", "C", "-t"])
    with pytest.raises(UsageError, match="^Missing argument for option: t$"):
        parse(SPEC, ["-t", "-c", "C"])


def test_help_lists_every_option_with_the_usage_line() -> None:
    text = help_text("updateTopic", SPEC)
    assert text.startswith("usage: mqadmin updateTopic -b <arg> | -c <arg>")
    assert " -t,--topic <arg>" in text and " -h,--help" in text and " -n,--namesrvAddr <arg>" in text
    assert " -bn,--brokerName <arg>" in text and "-t <arg>" in text.splitlines()[0] + text.splitlines()[1]
