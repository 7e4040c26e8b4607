"""The ACL decision for one request (RocketMQ's PlainPermissionManager.validate + checkPerm), pure.

Order, as RocketMQ: a global white address allows; then the AccessKey must name an account; the account's
white address allows; then the signature must match; then the account must be admin for admin codes and hold
the needed perm of every resource the request touches (its topicPerms/groupPerms entry, else the default perm
of the kind; an admin without entries may touch everything). A send to RMQ_SYS_TRACE_TOPIC needs no perm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from brokerd.acl.perm import ANY, PUB, check_permission, perm_text
from brokerd.acl.plain import Account, PlainAcl
from brokerd.acl.resources import is_group_resource, needed_perms
from brokerd.acl.sign import ACCESS_KEY, signature_matches
from brokerd.remoting.command import HeaderError, RemotingCommand

TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"


def _printable(resource: str) -> str:
    return f"group:{resource[7:]}" if is_group_resource(resource) else f"topic:{resource}"


def _owned(acct: Account, resource: str) -> int:
    if is_group_resource(resource):
        return acct.group_perms.get(resource[7:], acct.default_group_perm)
    return acct.topic_perms.get(resource, acct.default_topic_perm)


def check_perms(acct: Account, code: int, needed: dict[str, int], admin_codes: frozenset[int]) -> str | None:
    """checkPerm: the refusal text, None when allowed."""
    if code in admin_codes and not acct.admin:
        return f"Need admin permission for request code={code}, but accessKey={acct.access_key} is not"
    if acct.admin and not acct.topic_perms and not acct.group_perms:
        return None
    for resource, perm in needed.items():
        owned = _owned(acct, resource)
        if not check_permission(perm, owned):
            return (f"No permission for {_printable(resource)}: accessKey={acct.access_key} has "
                    f"{perm_text(owned)}, the request needs {'PUB or SUB' if perm == ANY else perm_text(perm)}")
    return None


def authenticate(acl: PlainAcl, cmd: RemotingCommand, remote_ip: str) -> tuple[Account | None, str | None, bool]:
    """(account, refusal, white): white=True when a white address allows the request without further checks
    (account None for a global one); else the signed account or the refusal."""
    for w in acl.global_white:
        if w.match(remote_ip):
            return None, None, True
    ak = cmd.ext.get(ACCESS_KEY)
    if not ak:
        return None, f"No accessKey is configured (request code={cmd.code})", False
    acct = acl.accounts.get(ak)
    if acct is None:
        return None, f"No acl config for {ak}", False
    if acct.white.match(remote_ip):
        return acct, None, True
    if not signature_matches(cmd, acct.secret_key):
        return None, f"Check signature failed for accessKey={ak}", False
    return acct, None, False


def decide(acl: PlainAcl, cmd: RemotingCommand, remote_ip: str, admin_codes: frozenset[int]) -> str | None:
    """None: allowed; else the NO_PERMISSION remark naming what was refused."""
    acct, refusal, white = authenticate(acl, cmd, remote_ip)
    if acct is None or white:
        return refusal
    try:
        needed = needed_perms(cmd)
    except (HeaderError, KeyError, TypeError, ValueError) as e:
        return f"cannot read the resources of request code={cmd.code}: {e}"
    if needed.get(TRACE_TOPIC) == PUB:  # PUB to the trace topic: RocketMQ skips the perm check
        return None
    return check_perms(acct, cmd.code, needed, admin_codes)


class AclValidator:
    """The check a server runs on every request while ACL is on. ``acl`` returns the current accounts (a
    reloading file: ``AclFile.current``); ``admin_only``: every code needs an admin account (admin ports)."""

    def __init__(self, acl: Callable[[], PlainAcl], admin_codes: frozenset[int] = frozenset(),
                 admin_only: bool = False) -> None:
        self.acl = acl
        self.admin_codes = admin_codes
        self.admin_only = admin_only
        self.denied = 0

    def check(self, cmd: RemotingCommand, remote_ip: str) -> str | None:
        acl = self.acl()
        if self.admin_only:
            refusal = self._admin(acl, cmd, remote_ip)
        else:
            refusal = decide(acl, cmd, remote_ip, self.admin_codes)
        if refusal is not None:
            self.denied += 1
        return refusal

    @staticmethod
    def _admin(acl: PlainAcl, cmd: RemotingCommand, remote_ip: str) -> str | None:
        acct, refusal, _ = authenticate(acl, cmd, remote_ip)
        if acct is None or acct.admin:  # a global white address, a refusal, or an admin (signed or white)
            return refusal
        return f"Need admin permission for request code={cmd.code}, but accessKey={acct.access_key} is not"

    def is_admin(self, access_key: str, secret_key: str) -> bool:
        return self.acl().is_admin(access_key, secret_key)
