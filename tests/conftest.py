"""Test-wide configuration: every asyncio test runs on uvloop, as the daemons do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvloop


def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}
