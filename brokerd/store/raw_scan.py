"""The C scanner of raw commit-log bytes (``brokerd._native.scan_log``, brokerd/csrc/scan.c) as the store uses it.

``scan_log(buf, base, segment_size, verify)`` does in one pass what ``maintenance.validate_raw`` (the record
checks, ``verify`` adding the body CRC) and ``queue_store.parse_for_dispatch`` do: it returns the physical end of
the complete records in ``buf`` (which starts at ``base``) and one ``Scanned`` tuple per complete non-blank
record, or raises ValueError with validate_raw's message. The Python code stays the reference: the store uses
the scanner when ``SCANNER`` is set (the C module is built and ``BROKERD_NATIVE`` is not 0), the Python path
otherwise; tests set ``SCANNER`` to None to run the Python path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from brokerd.message import ReadBuf
from brokerd.native import native

Scanned: TypeAlias = tuple[int, int, str, int, int, int, int, str | None, str | None, str | None, str | None]
"""(phys, size, topic, queue_id, queue_offset, sys_flag, store_timestamp, TAGS, KEYS, UNIQ_KEY, DELAY): one stored
record as dispatch needs it; the property values as ``decode_properties`` reads them (None when absent)."""

ScanFn: TypeAlias = Callable[[ReadBuf, int, int, bool], tuple[int, list[Scanned]]]

SCANNER: ScanFn | None = native.scan_log if native is not None and hasattr(native, "scan_log") else None
