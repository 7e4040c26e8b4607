"""A plain_acl.yml file kept current: ``AclFile.current()`` re-reads it when its stat changed (checked at most
once per ``interval`` seconds, so the hot path pays one clock read); a file that became malformed or vanished
keeps the last good accounts and is logged (RocketMQ's AclFileWatchService reloads on change as well)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import structlog

from brokerd.acl.plain import AclConfigError, PlainAcl, load_plain_acl

log = structlog.get_logger(component="acl")


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class AclFile:
    def __init__(self, path: str, interval: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        """Load ``path`` now: AclConfigError (naming the file and key) when it is missing or malformed."""
        self.path = path
        self.interval = interval
        self._clock = clock
        self._stamp = _stamp(path)
        self._acl = load_plain_acl(path)
        self._next_check = clock() + interval
        self.reloads = 0

    def current(self) -> PlainAcl:
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self.interval
            stamp = _stamp(self.path)
            if stamp != self._stamp:
                self._reload(stamp)
        return self._acl

    def reload_now(self) -> None:
        """Re-read the file at once when it changed (after this process wrote it: ``brokerd.acl.edit``)."""
        self._next_check = self._clock()
        self.current()

    def _reload(self, stamp: tuple[int, int, int] | None) -> None:
        self._stamp = stamp
        try:
            self._acl = load_plain_acl(self.path)
        except AclConfigError as e:
            log.error("acl_reload_failed", path=self.path, error=str(e))
            return
        self.reloads += 1
        log.info("acl_reloaded", path=self.path, accounts=len(self._acl.accounts))

    def is_admin(self, access_key: str, secret_key: str) -> bool:
        """True when the account exists, its secret is ``secret_key`` and it is an admin (the dashboard login)."""
        return self.current().is_admin(access_key, secret_key)
