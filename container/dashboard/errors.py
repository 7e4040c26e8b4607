"""Recent errors for the dashboard: a `logging.Handler` keeping the last warnings and errors the process logged
(the daemons log through structlog into the standard library, brokerd/logging_setup.py)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any


class RecentErrors(logging.Handler):
    def __init__(self, capacity: int = 200, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._guard = threading.Lock()
        self.total = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format argument must not break logging
            message = str(record.msg)
        with self._guard:
            self.total += 1
            self._entries.append({"time": record.created, "level": record.levelname.lower(),
                                  "logger": record.name, "message": message[:2000]})

    def entries(self) -> list[dict[str, Any]]:
        """Newest first."""
        with self._guard:
            return list(reversed(self._entries))

    def install(self) -> None:
        logging.getLogger().addHandler(self)

    def uninstall(self) -> None:
        logging.getLogger().removeHandler(self)


