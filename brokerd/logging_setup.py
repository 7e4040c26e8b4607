"""structlog configuration shared by the daemons: key=value lines to stderr (and a file when asked).

With log isolation on (the container's `isolateLogEnable`), lines carrying a broker's identity (or one of its
aliases: its address, its store host, its name when unique) go to that broker's own file instead of the main log.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import MutableMapping
from typing import IO, Any

import structlog

_RENDER = structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"], sort_keys=True)


class LogRouter:
    """A structlog processor routing broker-identified events to per-broker files."""

    def __init__(self) -> None:
        self.enabled = False
        self._files: dict[str, IO[str]] = {}
        self._aliases: dict[str, str] = {}
        self._lock = threading.Lock()

    def register(self, identity: str, path: str, aliases: list[str]) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with self._lock:
            self._files[identity] = open(path, "a", encoding="utf-8", buffering=1)
            self._aliases[identity] = identity
            for a in aliases:
                self._aliases.setdefault(a, identity)

    def unregister(self, identity: str) -> None:
        with self._lock:
            f = self._files.pop(identity, None)
            self._aliases = {k: v for k, v in self._aliases.items() if v != identity}
        if f is not None:
            f.close()

    def _target(self, ev: MutableMapping[str, Any]) -> str | None:
        for key in ("broker", "store_host", "broker_addr"):
            v = ev.get(key)
            if isinstance(v, str) and v in self._aliases:
                return self._aliases[v]
        return None

    def __call__(self, logger: Any, method: str, ev: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if not self.enabled or not self._files:
            return ev
        ident = self._target(ev)
        if ident is None:
            return ev
        f = self._files.get(ident)
        if f is None:
            return ev
        line = _RENDER(logger, method, dict(ev))
        with self._lock:
            try:
                f.write(str(line) + "\n")
            except ValueError:  # closed concurrently by unregister
                return ev
        raise structlog.DropEvent


ROUTER = LogRouter()


def configure(level: str = "INFO", log_file: str | None = None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        os.makedirs(os.path.dirname(log_file) or ".", exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=lvl, format="%(message)s", handlers=handlers, force=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            ROUTER,
            _RENDER,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        cache_logger_on_first_use=True,
    )
