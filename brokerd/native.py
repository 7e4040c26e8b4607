"""Which implementation of the broker's hot path is active: the C module ``brokerd._native`` (built by
``pip install``, see setup.py) or the pure-Python code it mirrors.

The Python code stays the reference: the codec falls back to it for every frame the C parser does not take
(binary headers, floats, arrays, malformed JSON: the error messages come from it), and the send lane hands
every request it does not fully understand to the Python send processor. ``BROKERD_NATIVE=0`` in the
environment turns the C module off (tests run both ways).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("BROKERD_NATIVE", "1") == "0":
        return None
    try:
        return importlib.import_module("brokerd._native")
    except ImportError:  # not built (no compiler at install time)
        return None


native = _load()

IMPLEMENTATION = "c" if native is not None else "python"
