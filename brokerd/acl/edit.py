"""Changes to a plain_acl.yml document as RocketMQ's PlainPermissionManager makes them (UPDATE_AND_CREATE_ACL_CONFIG,
DELETE_ACL_CONFIG, UPDATE_GLOBAL_WHITE_ADDRS_CONFIG), what GET_BROKER_CLUSTER_ACL_INFO / _CONFIG report of it, and
the file write (atomic; the reloading ``AclFile`` picks it up).

Pure except ``read_document`` / ``write_document``. Every change bumps the document's ``dataVersion`` entry
(`[{counter, timestamp}]`, RocketMQ's shape) and is checked by the loader (``parse_plain_acl``) before it is
written, so the file never holds what the broker would refuse to load. Keys of the document and of an account that
this code does not know are kept.
"""

from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Final

import yaml

from brokerd.acl.perm import parse_perm
from brokerd.acl.plain import KEY_MIN_LENGTH, AclConfigError, parse_plain_acl, yaml_text
from brokerd.fsutil import fsync_path

ACCOUNT_ORDER: Final = ("accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
                        "defaultGroupPerm", "topicPerms", "groupPerms")


@dataclass(frozen=True)
class AccessConfig:
    """RocketMQ's PlainAccessConfig as CreateAccessConfigRequestHeader carries it: None = not given (kept)."""

    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"accessKey": self.access_key, "secretKey": self.secret_key,
                "whiteRemoteAddress": self.white_remote_address, "admin": self.admin,
                "defaultTopicPerm": self.default_topic_perm, "defaultGroupPerm": self.default_group_perm,
                "topicPerms": self.topic_perms, "groupPerms": self.group_perms}


def split_list(value: str | None) -> list[str] | None:
    """UtilAll.split(value, ","): None stays None (not given), blank is an empty list."""
    if value is None:
        return None
    return [x for x in value.split(",")] if value.strip() else []


def _check_perms(resources: list[str] | None) -> None:
    """Permission.checkResourcePerms."""
    for res in resources or []:
        name, eq, perm = res.partition("=")
        if not eq or not name.strip() or "=" in perm:
            raise AclConfigError(f"Parse Resource format error for {res}. The expected resource format is "
                                 "'Res=Perm'. For example: topicA=SUB")
        if parse_perm(perm.strip()) is None:
            raise AclConfigError(f"Parse resource permission error for {res}. The expected permissions are 'SUB' "
                                 "or 'PUB' or 'SUB|PUB' or 'PUB|SUB' or 'DENY'.")


def _check_keys(access_key: str, secret_key: str | None) -> None:
    """PlainPermissionManager.checkPlainAccessConfig: both keys given and longer than 6 characters."""
    if secret_key is None or len(access_key) <= KEY_MIN_LENGTH or len(secret_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"The accessKey={access_key} and secretKey={secret_key} cannot be null and length "
                             "should longer than 6")


def _accounts(doc: dict[str, Any]) -> list[Any]:
    accounts = doc.get("accounts")
    if accounts is None:
        accounts = doc["accounts"] = []
    if not isinstance(accounts, list):
        raise AclConfigError("accounts must be a list")
    return accounts


def _merge(existing: dict[str, Any], cfg: AccessConfig) -> dict[str, Any]:
    """createAclAccessConfigMap: given fields replace the account's, the others stay."""
    out = dict(existing)
    out["accessKey"] = cfg.access_key
    if cfg.secret_key:
        out["secretKey"] = cfg.secret_key
    if cfg.white_remote_address is not None:
        out["whiteRemoteAddress"] = cfg.white_remote_address
    out["admin"] = cfg.admin
    if cfg.default_topic_perm:
        out["defaultTopicPerm"] = cfg.default_topic_perm
    if cfg.default_group_perm:
        out["defaultGroupPerm"] = cfg.default_group_perm
    if cfg.topic_perms is not None:
        out["topicPerms"] = list(cfg.topic_perms)
    if cfg.group_perms is not None:
        out["groupPerms"] = list(cfg.group_perms)
    ordered: dict[str, Any] = {k: out[k] for k in ACCOUNT_ORDER if k in out}
    ordered.update({k: v for k, v in out.items() if k not in ordered})
    return ordered


def _bump(doc: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """updateAclConfigFileVersion: counter + 1, timestamp now (as the file's one-element `dataVersion` list)."""
    counter = data_version(doc)["counter"]
    doc["dataVersion"] = [{"counter": counter + 1, "timestamp": now_ms}]
    parse_plain_acl(doc)  # what the loader would refuse is never written
    return doc


def update_account(doc: dict[str, Any], cfg: AccessConfig, now_ms: int) -> dict[str, Any]:
    """The document with ``cfg``'s account created or updated; AclConfigError names what is wrong."""
    _check_keys(cfg.access_key, cfg.secret_key)
    _check_perms(cfg.topic_perms)
    _check_perms(cfg.group_perms)
    out = copy.deepcopy(doc)
    accounts = _accounts(out)
    for i, acct in enumerate(accounts):
        if isinstance(acct, dict) and yaml_text(acct.get("accessKey")) == cfg.access_key:
            accounts[i] = _merge(acct, cfg)
            break
    else:
        accounts.append(_merge({}, cfg))
    return _bump(out, now_ms)


def delete_account(doc: dict[str, Any], access_key: str, now_ms: int) -> dict[str, Any] | None:
    """The document without the account; None when there is no such account."""
    out = copy.deepcopy(doc)
    accounts = _accounts(out)
    kept = [a for a in accounts if not (isinstance(a, dict) and yaml_text(a.get("accessKey")) == access_key)]
    if len(kept) == len(accounts):
        return None
    out["accounts"] = kept
    return _bump(out, now_ms)


def set_global_white(doc: dict[str, Any], addrs: list[str], now_ms: int) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["globalWhiteRemoteAddresses"] = [a.strip() for a in addrs if a.strip()]
    return _bump(out, now_ms)


def data_version(doc: dict[str, Any]) -> dict[str, int]:
    """RocketMQ's DataVersion of the document (counter 0, timestamp 0 when it has none yet)."""
    raw = doc.get("dataVersion")
    first = raw[0] if isinstance(raw, list) and raw and isinstance(raw[0], dict) else {}
    try:
        return {"counter": int(first.get("counter", 0)), "stateVersion": 0,
                "timestamp": int(first.get("timestamp", 0))}
    except (TypeError, ValueError):
        return {"counter": 0, "stateVersion": 0, "timestamp": 0}


def acl_config(doc: dict[str, Any]) -> dict[str, Any]:
    """GetBrokerClusterAclConfigResponseBody: the global white addresses and every account (PlainAccessConfig)."""
    plain = parse_plain_acl(doc)
    accounts = []
    for raw in _accounts(copy.deepcopy(doc)):
        if not isinstance(raw, dict):
            continue
        ak = yaml_text(raw.get("accessKey"))
        if ak not in plain.accounts:
            continue
        accounts.append({"accessKey": ak, "secretKey": yaml_text(raw.get("secretKey")), "admin": plain.accounts[ak].admin,
                         "whiteRemoteAddress": yaml_text(raw.get("whiteRemoteAddress")) or None,
                         "defaultTopicPerm": yaml_text(raw.get("defaultTopicPerm")) or None,
                         "defaultGroupPerm": yaml_text(raw.get("defaultGroupPerm")) or None,
                         "topicPerms": [yaml_text(x) for x in raw.get("topicPerms") or []],
                         "groupPerms": [yaml_text(x) for x in raw.get("groupPerms") or []]})
    whites = [yaml_text(w) for w in doc.get("globalWhiteRemoteAddresses") or []]
    return {"globalWhiteAddrs": whites, "plainAccessConfigs": accounts}


def read_document(path: str) -> dict[str, Any]:
    """The file's YAML document ({} for an empty file); AclConfigError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise AclConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise AclConfigError(f"{path}: not valid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise AclConfigError(f"{path}: the document must be a mapping")
    return doc


def write_document(path: str, doc: dict[str, Any]) -> None:
    """Replace the file atomically (temporary file, fsync, rename, directory fsync)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".plain_acl.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(doc, f, sort_keys=False, default_flow_style=False, allow_unicode=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_path(folder)
