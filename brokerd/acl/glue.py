"""Thin glue between the pure ACL core and the servers/clients that use it."""

from __future__ import annotations

from brokerd.acl.resources import CONTROLLER_ADMIN_CODES, NAMESRV_ADMIN_CODES
from brokerd.acl.sign import sign_request
from brokerd.acl.validator import AclValidator
from brokerd.acl.watch import AclFile
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection


class AclGuard:
    """A dispatcher guard (``Dispatcher.guard``) checking every request against a reloading plain_acl.yml."""

    def __init__(self, path: str, admin_codes: frozenset[int] = frozenset(), admin_only: bool = False,
                 reload_interval: float = 1.0, only: frozenset[int] | None = None) -> None:
        """``only``: check just these codes (the controller: its admin requests), serve the others as before."""
        self.file = AclFile(path, reload_interval)
        self.validator = AclValidator(self.file.current, admin_codes, admin_only)
        self.only = only

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> str | None:
        if self.only is not None and cmd.code not in self.only:
            return None
        return self.validator.check(cmd, conn.remote_addr[0])

    def is_admin(self, access_key: str, secret_key: str) -> bool:
        return self.file.is_admin(access_key, secret_key)


def namesrv_guard(path: str) -> AclGuard:
    """A name server's check: every request signed by an account, its write requests by an admin account."""
    return AclGuard(path, NAMESRV_ADMIN_CODES)


def controller_guard(path: str) -> AclGuard:
    """A controller's check: its admin requests need an admin account; brokers' requests are served as before."""
    return AclGuard(path, admin_only=True, only=CONTROLLER_ADMIN_CODES)


def signing_client(access_key: str, secret_key: str) -> RemotingClient:
    """A remoting client that signs every request it sends with this account (AclClientRPCHook)."""
    client = RemotingClient()

    def sign(cmd: RemotingCommand) -> None:
        sign_request(cmd, access_key, secret_key)

    client.before_request = sign
    return client
