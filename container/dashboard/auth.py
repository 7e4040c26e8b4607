"""Dashboard sessions, pure: a login checked against an `AdminCredentials` source issues a cookie signed with
HMAC-SHA256 under a random per-process key (a restart logs everybody out); each session carries a CSRF token the
page sends back in a header on every POST. Failed logins are rate-limited per client address."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections import deque
from dataclasses import dataclass

COOKIE = "rmqdash"
CSRF_HEADER = "X-CSRF-Token"


@dataclass(frozen=True)
class Session:
    user: str
    expires: float
    csrf: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    def __init__(self, ttl_s: float = 8 * 3600, key: bytes | None = None) -> None:
        self.ttl_s = ttl_s
        self._key = key if key is not None else os.urandom(32)

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def issue(self, user: str, now: float) -> tuple[str, Session]:
        """A new session for `user`: (cookie value, session)."""
        session = Session(user, now + self.ttl_s, secrets.token_urlsafe(18))
        payload = ".".join((_b64(user.encode()), str(int(session.expires)), session.csrf))
        return payload + "." + self._mac(payload), session

    def verify(self, cookie: str | None, now: float) -> Session | None:
        """The session a cookie carries, or None when absent, tampered with, signed by another process or expired."""
        if not cookie or cookie.count(".") != 3:
            return None
        payload, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac, self._mac(payload)):
            return None
        user_b64, expires, csrf = payload.split(".")
        try:
            user, exp = _unb64(user_b64).decode(), float(expires)
        except (ValueError, UnicodeDecodeError):
            return None
        if exp <= now:
            return None
        return Session(user, exp, csrf)


def csrf_ok(session: Session, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(session.csrf, token)


class LoginThrottle:
    """At most `limit` failed logins per client address in `window_s`; then refused until the window passes."""

    def __init__(self, limit: int = 5, window_s: float = 60.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self._failures: dict[str, deque[float]] = {}

    def allowed(self, client: str, now: float) -> bool:
        q = self._failures.get(client)
        if q is None:
            return True
        while q and q[0] <= now - self.window_s:
            q.popleft()
        if not q:
            del self._failures[client]
            return True
        return len(q) < self.limit

    def failed(self, client: str, now: float) -> None:
        self._failures.setdefault(client, deque()).append(now)
