"""Request signing as RocketMQ's ACL 1.0 does it (AclClientRPCHook / AclUtils / PlainAccessValidator).

What is signed: the values of the request's extFields sorted by key (Java ``TreeMap``: UTF-16 order), keys not
included, ``Signature`` and ``_UNIQUE_KEY_QUERY`` left out, ``AccessKey`` (and ``OnsChannel``, ``SecurityToken``
when sent) in; the values concatenated, UTF-8 encoded, then the body bytes appended. The signature is the
base64 of HMAC-SHA1 over that with the UTF-8 secret key. Numbers and booleans the C++ client sends as JSON
values are signed as their text (``4``, ``true``), which is what the codec coerces them to.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any, Final

from brokerd.remoting.command import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
_SKIP: Final = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


def _java_order(keys: list[str]) -> list[str]:
    if all(k.isascii() for k in keys):
        return sorted(keys)
    return sorted(keys, key=lambda k: k.encode("utf-16-be", "surrogatepass"))


def signed_content(ext: dict[str, str], body: bytes | None) -> bytes:
    """The bytes a request's signature covers."""
    text = "".join([ext[k] for k in _java_order([k for k in ext if k not in _SKIP])])
    data = text.encode("utf-8", "surrogatepass")
    return data + body if body else data


def signature_of(content: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.digest(secret_key.encode("utf-8"), content, "sha1")).decode("ascii")


def hmac_pads(secret_key: str) -> tuple[Any, Any]:
    """SHA-1 objects holding the key's inner and outer HMAC pads: HMAC(k, m) = outer.copy().update(
    inner.copy().update(m).digest()).digest() (the C lane copies them per message instead of re-keying)."""
    key = secret_key.encode("utf-8")
    if len(key) > 64:
        key = hashlib.sha1(key).digest()
    key = key.ljust(64, b"\0")
    return hashlib.sha1(bytes(b ^ 0x36 for b in key)), hashlib.sha1(bytes(b ^ 0x5C for b in key))


def sign_request(cmd: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    """Add AccessKey and Signature to an outgoing request (what a RocketMQ client's AclClientRPCHook does)."""
    cmd.ext.pop(SIGNATURE, None)
    cmd.ext[ACCESS_KEY] = access_key
    cmd.ext[SIGNATURE] = signature_of(signed_content(cmd.ext, cmd.body), secret_key)
    return cmd


def signature_matches(cmd: RemotingCommand, secret_key: str) -> bool:
    given = cmd.ext.get(SIGNATURE, "")
    want = signature_of(signed_content(cmd.ext, cmd.body), secret_key)
    return hmac.compare_digest(want.encode(), given.encode("utf-8", "surrogatepass"))
