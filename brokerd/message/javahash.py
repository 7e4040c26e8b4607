"""Java ``String.hashCode()`` and the consume-queue tags code derived from it."""

from __future__ import annotations

import functools
import sys


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()``: signed 32-bit, over UTF-16 code units."""
    data = s.encode("utf-16-le", "surrogatepass")
    units = memoryview(data).cast("H")
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts only
        units = memoryview(data[1::2] + data[::2]).cast("H")
    h = 0
    for u in units:
        h = (31 * h + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_code_of(tags: str | None) -> int:
    """Consume-queue tags code of a TAGS value: its Java hash, 0 when absent or empty."""
    if not tags:
        return 0
    return java_string_hash(tags)
