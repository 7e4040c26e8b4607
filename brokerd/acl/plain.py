"""``plain_acl.yml`` (RocketMQ ACL 1.0's format) parsed into a frozen ``PlainAcl``; pure except ``load_plain_acl``.

    globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]   # any request from these is allowed
    accounts:
      - accessKey: RocketMQ          # longer than 6 characters, as RocketMQ requires
        secretKey: 12345678
        whiteRemoteAddress:          # requests of this account from here skip the signature and perm checks
        admin: false
        defaultTopicPerm: DENY       # PUB, SUB, PUB|SUB, DENY (absent: DENY)
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

import yaml

from brokerd.acl.address import AddressPattern, AddressPatternError, parse_address_pattern
from brokerd.acl.perm import DENY, parse_perm
from brokerd.config_file import ConfigError

KEY_MIN_LENGTH = 6  # AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: keys must be longer


class AclConfigError(ConfigError):
    """plain_acl.yml is malformed; the message names the file, the account and the key."""


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white: AddressPattern = field(default_factory=lambda: AddressPattern(""))
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)  # by group name (RocketMQ keys them %RETRY%group)


@dataclass(frozen=True)
class PlainAcl:
    accounts: dict[str, Account] = field(default_factory=dict)
    global_white: tuple[AddressPattern, ...] = ()

    def is_admin(self, access_key: str, secret_key: str) -> bool:
        """True when the account exists, ``secret_key`` is its secret and it is an admin (dashboard login)."""
        acct = self.accounts.get(access_key)
        return acct is not None and acct.admin and _same(acct.secret_key, secret_key)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def yaml_text(v: object) -> str:
    """YAML scalars as RocketMQ reads them into strings (``secretKey: 12345678`` is a number in YAML)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _perm_map(where: str, key: str, items: object) -> dict[str, int]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise AclConfigError(f"{where}: {key} must be a list of name=PERM")
    out: dict[str, int] = {}
    for item in items:
        name, eq, perm_s = yaml_text(item).partition("=")
        perm = parse_perm(perm_s)
        if not eq or not name.strip() or perm is None:
            raise AclConfigError(f"{where}: {key} entry {item!r} must be name=PUB|SUB|PUB|SUB|DENY")
        out[name.strip()] = perm
    return out


def _default_perm(where: str, key: str, v: object) -> int:
    if v is None or yaml_text(v).strip() == "":
        return DENY
    perm = parse_perm(yaml_text(v))
    if perm is None:
        raise AclConfigError(f"{where}: {key} must be PUB, SUB, PUB|SUB or DENY, got {v!r}")
    return perm


def _account(where: str, d: object) -> Account:
    if not isinstance(d, dict):
        raise AclConfigError(f"{where}: an account must be a mapping")
    ak, sk = yaml_text(d.get("accessKey")), yaml_text(d.get("secretKey"))
    if len(ak) <= KEY_MIN_LENGTH or len(sk) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"{where}: accessKey and secretKey must be longer than {KEY_MIN_LENGTH} characters")
    where = f"{where} ({ak})"
    try:
        white = parse_address_pattern(d.get("whiteRemoteAddress"))
    except AddressPatternError as e:
        raise AclConfigError(f"{where}: whiteRemoteAddress: {e}") from None
    admin = d.get("admin", False)
    if not isinstance(admin, bool) and yaml_text(admin).lower() not in ("true", "false", ""):
        raise AclConfigError(f"{where}: admin must be true or false, got {admin!r}")
    return Account(
        access_key=ak, secret_key=sk, white=white,
        admin=admin if isinstance(admin, bool) else yaml_text(admin).lower() == "true",
        default_topic_perm=_default_perm(where, "defaultTopicPerm", d.get("defaultTopicPerm")),
        default_group_perm=_default_perm(where, "defaultGroupPerm", d.get("defaultGroupPerm")),
        topic_perms=_perm_map(where, "topicPerms", d.get("topicPerms")),
        group_perms=_perm_map(where, "groupPerms", d.get("groupPerms")))  # fmt: skip


def parse_plain_acl(data: Any, source: str = "plain_acl.yml") -> PlainAcl:
    """The YAML document (already loaded) as a ``PlainAcl``; an empty document has no accounts."""
    if data is None:
        return PlainAcl()
    if not isinstance(data, dict):
        raise AclConfigError(f"{source}: the document must be a mapping")
    whites = data.get("globalWhiteRemoteAddresses") or []
    if not isinstance(whites, list):
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses must be a list")
    try:
        global_white = tuple(parse_address_pattern(yaml_text(w)) for w in whites)
    except AddressPatternError as e:
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {e}") from None
    accounts: dict[str, Account] = {}
    raw = data.get("accounts") or []
    if not isinstance(raw, list):
        raise AclConfigError(f"{source}: accounts must be a list")
    for i, d in enumerate(raw):
        acct = _account(f"{source}: accounts[{i}]", d)
        if acct.access_key in accounts:
            raise AclConfigError(f"{source}: accounts[{i}]: accessKey {acct.access_key!r} is defined twice")
        accounts[acct.access_key] = acct
    return PlainAcl(accounts, global_white)


def load_plain_acl(path: str) -> PlainAcl:
    """Read and parse a plain_acl.yml file (AclConfigError for a missing, unreadable or malformed file)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise AclConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise AclConfigError(f"{path}: not valid YAML: {e}") from None
    return parse_plain_acl(data, path)


def load_tools_credentials(path: str) -> tuple[str, str]:
    """(accessKey, secretKey) of a tools credentials file (RocketMQ's conf/tools.yml: ``accessKey: ...``,
    ``secretKey: ...``); AclConfigError when it is unreadable or lacks either."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise AclConfigError(f"{path}: cannot read credentials: {e}") from None
    if not isinstance(data, dict) or not data.get("accessKey") or not data.get("secretKey"):
        raise AclConfigError(f"{path}: accessKey and secretKey are required")
    return yaml_text(data["accessKey"]), yaml_text(data["secretKey"])
