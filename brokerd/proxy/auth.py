"""ACL for gRPC clients: RocketMQ's v2 authentication header and the resources each RPC touches (ACL 1.0's
PlainAccessResource.parse(GeneratedMessageV3, AuthenticationHeader)), checked against the same plain_acl.yml
accounts and permissions as remoting clients. Pure.

The SDKs send ``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``
and ``x-mq-date-time: yyyyMMdd'T'HHmmss'Z'``; the signature is HMAC-SHA1 over the date-time text with the
secret key.
"""

from __future__ import annotations

import hmac
from typing import Any

from brokerd.acl.perm import ANY, PUB, SUB
from brokerd.acl.plain import Account, PlainAcl
from brokerd.acl.resources import group_resource
from brokerd.acl.validator import check_perms
from brokerd.proxy.codes import Code, ProxyError


def parse_authorization(header: str) -> tuple[str, str]:
    """(access key, signature hex) of an ``authorization`` header; ProxyError UNAUTHORIZED when malformed."""
    parts = header.split(" ", 1)
    if len(parts) != 2:
        raise ProxyError(Code.UNAUTHORIZED, "authentication header is incorrect")
    ak = sig = ""
    for item in parts[1].split(","):
        kv = item.strip().split("=", 1)
        if len(kv) != 2:
            raise ProxyError(Code.UNAUTHORIZED, f"authentication keyValues length is incorrect: {item.strip()!r}")
        if kv[0] == "Credential":
            ak = kv[1].split("/")[0]
        elif kv[0] == "Signature":
            sig = kv[1]
    if not ak:
        raise ProxyError(Code.UNAUTHORIZED, "authentication header has no Credential")
    return ak, sig


def signature_of(date_time: str, secret_key: str) -> str:
    return hmac.digest(secret_key.encode(), date_time.encode(), "sha1").hex().upper()


def authenticate(acl: PlainAcl, authorization: str | None, date_time: str | None,
                 remote_ip: str) -> tuple[Account | None, bool]:
    """(account, white): a global white address allows without an account; an account's white address allows
    without signature or permission checks; otherwise the signature must match. ProxyError UNAUTHORIZED."""
    for w in acl.global_white:
        if w.match(remote_ip):
            return None, True
    if not authorization:
        raise ProxyError(Code.UNAUTHORIZED, "No accessKey is configured: the request is not signed")
    ak, sig = parse_authorization(authorization)
    acct = acl.accounts.get(ak)
    if acct is None:
        raise ProxyError(Code.UNAUTHORIZED, f"No acl config for {ak}")
    if acct.white.match(remote_ip):
        return acct, True
    if not date_time:
        raise ProxyError(Code.UNAUTHORIZED, "datetime is null: the x-mq-date-time header is missing")
    want = signature_of(date_time, acct.secret_key)
    if not hmac.compare_digest(want, sig.upper()):
        raise ProxyError(Code.UNAUTHORIZED, f"Check signature failed for accessKey={ak}")
    return acct, False


def _topic(out: dict[str, int], res: Any, perm: int) -> None:
    if res.name:
        out[res.name] = perm


def _group(out: dict[str, int], res: Any) -> None:
    if res.name:
        out[group_resource(res.name)] = SUB


def _settings(cmd: Any, out: dict[str, int]) -> None:
    if cmd.WhichOneof("command") != "settings":
        return
    s = cmd.settings
    if s.HasField("publishing"):
        for t in s.publishing.topics:
            _topic(out, t, PUB)
    if s.HasField("subscription"):
        _group(out, s.subscription.group)
        for e in s.subscription.subscriptions:
            _topic(out, e.topic, SUB)
    if not s.HasField("publishing") and not s.HasField("subscription"):
        raise ProxyError(Code.BAD_REQUEST, "settings command doesn't have publishing or subscription")


def needed_perms(method: str, req: Any) -> dict[str, int]:
    """{topic or %RETRY%group: perm} the RPC needs (PlainAccessResource.parse for gRPC)."""
    out: dict[str, int] = {}
    if method == "Heartbeat":
        if req.client_type in (2, 3, 5, 6):  # consumers
            if not req.HasField("group"):
                raise ProxyError(Code.BAD_REQUEST, "Consumer heartbeat doesn't have group")
            _group(out, req.group)
    elif method == "SendMessage":
        if len(req.messages) == 0:
            raise ProxyError(Code.MESSAGE_CORRUPTED, "no message to send")
        _topic(out, req.messages[0].topic, PUB)
    elif method in ("RecallMessage", "EndTransaction"):
        _topic(out, req.topic, PUB)
    elif method in ("ReceiveMessage", "PullMessage"):
        _group(out, req.group)
        _topic(out, req.message_queue.topic, SUB)
    elif method in ("AckMessage", "ForwardMessageToDeadLetterQueue", "ChangeInvisibleDuration", "QueryAssignment"):
        _group(out, req.group)
        _topic(out, req.topic, SUB)
    elif method in ("UpdateOffset", "GetOffset"):
        _group(out, req.group)
        _topic(out, req.message_queue.topic, SUB)
    elif method == "QueryOffset":
        _topic(out, req.message_queue.topic, ANY)
    elif method == "QueryRoute":
        _topic(out, req.topic, ANY)
    elif method == "NotifyClientTermination":
        if req.HasField("group") and req.group.name:
            _group(out, req.group)
    elif method == "Telemetry":
        _settings(req, out)
    return out


def authorize(acct: Account | None, white: bool, method: str, req: Any) -> None:
    """ProxyError FORBIDDEN when the account lacks a permission the RPC needs."""
    if acct is None or white:
        return
    refusal = check_perms(acct, 0, needed_perms(method, req), frozenset())
    if refusal is not None:
        raise ProxyError(Code.FORBIDDEN, refusal)
