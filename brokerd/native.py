"""Which implementation of the broker's hot path is active: the C module ``brokerd._native`` (built by
``pip install``, see setup.py) or the pure-Python code it mirrors.

The Python code stays the reference: the codec falls back to it for every frame the C parser does not take
(binary headers, floats, arrays, malformed JSON: the error messages come from it), and the send lane hands
every request it does not fully understand to the Python send processor. ``BROKERD_NATIVE=0`` in the
environment turns the C module off (tests run both ways).
"""

from __future__ import annotations

import os
from types import ModuleType

native: ModuleType | None
if os.environ.get("BROKERD_NATIVE", "1") == "0":
    native = None
else:
    try:
        from brokerd import _native as native
    except ImportError:  # not built (no compiler at install time)
        native = None

IMPLEMENTATION = "c" if native is not None else "python"
