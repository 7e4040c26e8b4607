"""RocketMQ ACL 1.0 (plain_acl.yml accounts, signed requests): pure parsing, signing and decisions, plus
``AclFile`` (the file, reloaded when it changes). Servers run ``AclValidator.check`` before dispatching a
request (``brokerd.remoting.connection.Dispatcher.guard``); clients sign with ``sign_request``."""

from brokerd.acl.address import AddressPattern, AddressPatternError, normalize_ip, parse_address_pattern
from brokerd.acl.perm import ANY, DENY, PUB, SUB, check_permission, parse_perm
from brokerd.acl.plain import Account, AclConfigError, PlainAcl, load_plain_acl, parse_plain_acl
from brokerd.acl.resources import BROKER_ADMIN_CODES, NAMESRV_ADMIN_CODES, group_resource, needed_perms
from brokerd.acl.sign import sign_request, signature_matches, signature_of, signed_content
from brokerd.acl.validator import AclValidator, decide
from brokerd.acl.watch import AclFile

__all__ = [
    "ANY", "BROKER_ADMIN_CODES", "DENY", "NAMESRV_ADMIN_CODES", "PUB", "SUB", "Account", "AclConfigError", "AclFile",
    "AclValidator", "AddressPattern", "AddressPatternError", "PlainAcl", "check_permission", "decide",
    "group_resource", "load_plain_acl", "needed_perms", "normalize_ip", "parse_address_pattern", "parse_perm",
    "parse_plain_acl", "sign_request", "signature_matches", "signature_of", "signed_content",
]
