"""plain_acl.yml edits as RocketMQ's PlainPermissionManager makes them (brokerd.acl.edit): create/update merges the
given fields into the account, delete removes it, the global white list is replaced, every change bumps
`dataVersion`, a change the loader would refuse is refused, the write is atomic and the reloading file sees it."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from brokerd.acl import AclFile
from brokerd.acl.edit import (
    AccessConfig,
    acl_config,
    data_version,
    delete_account,
    read_document,
    set_global_white,
    split_list,
    update_account,
    write_document,
)
from brokerd.acl.perm import PUB, SUB
from brokerd.acl.plain import AclConfigError, parse_plain_acl

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "conf" / "acl" / "plain_acl.yml"


def sample() -> dict[str, object]:
    doc = yaml.safe_load(SAMPLE.read_text())
    assert isinstance(doc, dict)
    return doc


def test_create_then_update_merges_only_the_given_fields() -> None:
    doc = update_account(sample(), AccessConfig("newUser01", "secret-01", topic_perms=["topicX=PUB"],
                                                default_topic_perm="DENY"), now_ms=1000)
    acct = parse_plain_acl(doc).accounts["newUser01"]
    assert acct.secret_key == "secret-01" and acct.topic_perms == {"topicX": PUB} and not acct.admin
    assert data_version(doc) == {"counter": 1, "stateVersion": 0, "timestamp": 1000}
    # an update without topicPerms keeps them; admin is always set (the header always carries it)
    doc2 = update_account(doc, AccessConfig("newUser01", "secret-02", admin=True, group_perms=["g1=SUB"]), now_ms=2000)
    acct = parse_plain_acl(doc2).accounts["newUser01"]
    assert acct.secret_key == "secret-02" and acct.admin and acct.topic_perms == {"topicX": PUB}
    assert acct.group_perms == {"g1": SUB} and data_version(doc2)["counter"] == 2
    assert "RocketMQ" in parse_plain_acl(doc2).accounts  # the other accounts are untouched
    assert "newUser01" not in parse_plain_acl(sample()).accounts  # the input document is not modified


@pytest.mark.parametrize("cfg, word", [
    (AccessConfig("short", "12345678"), "longer than 6"),
    (AccessConfig("longEnough1", None), "cannot be null"),
    (AccessConfig("longEnough1", "12345678", topic_perms=["topicA"]), "Res=Perm"),
    (AccessConfig("longEnough1", "12345678", group_perms=["g=ALL"]), "permissions are"),
    (AccessConfig("longEnough1", "12345678", white_remote_address="10.0.0.300"), "whiteRemoteAddress"),
])
def test_bad_account_changes_are_refused(cfg: AccessConfig, word: str) -> None:
    with pytest.raises(AclConfigError, match=word):
        update_account(sample(), cfg, now_ms=1)


def test_delete_global_white_and_the_config_view() -> None:
    doc = delete_account(sample(), "RocketMQ", now_ms=5)
    assert doc is not None and "RocketMQ" not in parse_plain_acl(doc).accounts
    assert delete_account(sample(), "nobody-here", now_ms=5) is None
    doc = set_global_white(doc, split_list("10.10.103.*, 192.168.0.*") or [], now_ms=6)
    assert [w.text for w in parse_plain_acl(doc).global_white] == ["10.10.103.*", "192.168.0.*"]
    view = acl_config(doc)
    assert view["globalWhiteAddrs"] == ["10.10.103.*", "192.168.0.*"]
    admin = next(a for a in view["plainAccessConfigs"] if a["accessKey"] == "rocketmq2")
    assert admin["admin"] is True and admin["secretKey"] == "12345678"
    with pytest.raises(AclConfigError, match="globalWhiteRemoteAddresses"):
        set_global_white(doc, ["not-an-address"], now_ms=7)


def test_split_list_keeps_absent_apart_from_empty() -> None:
    assert split_list(None) is None and split_list("  ") == [] and split_list("a=PUB,b=SUB") == ["a=PUB", "b=SUB"]


def test_write_is_atomic_and_the_watcher_reloads(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(SAMPLE.read_text())
    watched = AclFile(str(path), interval=3600.0)
    assert "newUser01" not in watched.current().accounts
    write_document(str(path), update_account(read_document(str(path)), AccessConfig("newUser01", "secret-01"), 9))
    assert [p.name for p in tmp_path.iterdir()] == ["plain_acl.yml"]  # no temporary file left behind
    assert "newUser01" not in watched.current().accounts  # not re-checked before the interval ...
    watched.reload_now()  # ... unless the writer asks
    assert "newUser01" in watched.current().accounts and watched.reloads == 1
    assert read_document(str(path))["dataVersion"] == [{"counter": 1, "timestamp": 9}]
