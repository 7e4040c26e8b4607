"""How RocketMQ's Java tools render values (pure): UtilAll's time formats, timestamps typed by the operator,
permissions, Java's `String.valueOf` of booleans/doubles/collections, and the versions of MQVersion.Version."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from brokerd.message.javahash import java_string_hash

# UtilAll.YYYY_MM_DD_HH_MM_SS_SSS, the format every mqadmin timestamp option accepts besides `now` and millis
TIMESTAMP_FORMAT = "yyyy-MM-dd#HH:mm:ss:SSS"
PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1


class TimestampError(ValueError):
    pass


def _local(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000.0)


def human2(ms: int) -> str:
    """UtilAll.timeMillisToHumanString2: `2024-05-01 10:11:12,345` (local time)."""
    d = _local(ms)
    return f"{d:%Y-%m-%d %H:%M:%S},{ms % 1000:03d}"


def human(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: `20240501101112345`."""
    d = _local(ms)
    return f"{d:%Y%m%d%H%M%S}{ms % 1000:03d}"


def date_time(ms: int) -> str:
    """UtilAll.formatDate(date, "yyyy-MM-dd HH:mm:ss")."""
    return f"{_local(ms):%Y-%m-%d %H:%M:%S}"


def parse_date(text: str) -> int:
    """UtilAll.parseDate(text, "yyyy-MM-dd#HH:mm:ss:SSS") as epoch millis (local time)."""
    try:
        day, _, clock = text.partition("#")
        hms, _, millis = clock.rpartition(":")
        d = dt.datetime.strptime(f"{day} {hms}", "%Y-%m-%d %H:%M:%S")
        if not millis.isdigit() or len(millis) > 3:
            raise ValueError(millis)
    except ValueError:
        raise TimestampError(f"malformed timestamp {text!r}: expected now, milliseconds or "
                             f"{TIMESTAMP_FORMAT}") from None
    return int(time.mktime(d.timetuple())) * 1000 + int(millis)


def parse_timestamp(text: str, *, allow_now: bool = True, now_ms: int | None = None) -> int:
    """A timestamp option: `now` (where the command accepts it), epoch millis, or yyyy-MM-dd#HH:mm:ss:SSS."""
    text = text.strip()
    if allow_now and text == "now":
        return int(time.time() * 1000) if now_ms is None else now_ms
    if text.lstrip("-").isdigit():
        return int(text)
    return parse_date(text)


def perm_str(perm: int) -> str:
    """PermName.perm2String: `RW-`."""
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")


def front(s: str | None, size: int) -> str:
    """UtilAll.frontStringAtLeast: at most `size` characters."""
    return "null" if s is None else s[:size]


def jstr(v: Any) -> str:
    """String.valueOf: Java's rendering of a value in string concatenation and %s."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return jdouble(v)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{jstr(k)}={jstr(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple | set | frozenset):
        return "[" + ", ".join(jstr(x) for x in v) + "]"
    return str(v)


def jdouble(v: float) -> str:
    """Double.toString for the values the tools print (no exponent handling beyond Python's repr)."""
    if v != v:
        return "NaN"
    if v == int(v) and abs(v) < 1e7:
        return f"{int(v)}.0"
    return repr(v)


def java_hash_order(hashes: list[int], capacity: int = 16) -> list[int]:
    """The positions of `hashes` (Java hashCodes, insertion order) in a HashMap/HashSet's iteration order."""
    cap = capacity
    while len(hashes) > cap * 3 // 4:
        cap *= 2

    def bucket(h: int) -> int:
        h &= 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(range(len(hashes)), key=lambda i: (bucket(hashes[i]), i))


def java_set_order(strings: Sequence[str], capacity: int = 16) -> list[str]:
    """``strings`` (insertion order) in a Java HashSet<String>'s (or HashMap's keys') iteration order."""
    return [strings[i] for i in java_hash_order([java_string_hash(s) for s in strings], capacity)]


def java_properties_order(hashes: list[int]) -> list[int]:
    """The positions of keys (their hashCodes, in load order) in java.util.Properties' iteration order: since Java 9
    a ConcurrentHashMap of 16 bins that doubles when 3/4 full, each resize splitting a bin the way
    ConcurrentHashMap.transfer does (the nodes before the bin's last run come out reversed)."""
    n, count = 16, 0
    table: list[list[int]] = [[] for _ in range(16)]

    def spread(h: int) -> int:
        h &= 0xFFFFFFFF
        return (h ^ (h >> 16)) & 0x7FFFFFFF

    for i, h in enumerate(hashes):
        table[spread(h) & (n - 1)].append(i)
        count += 1
        if count >= n - (n >> 2):
            new: list[list[int]] = [[] for _ in range(2 * n)]
            for b, bin_ in enumerate(table):
                if not bin_:
                    continue
                bits = [spread(hashes[j]) & n for j in bin_]
                last = len(bin_) - 1
                while last > 0 and bits[last - 1] == bits[last]:
                    last -= 1
                lo = [j for j, bit in zip(bin_[last:], bits[last:], strict=True) if not bit]
                hi = [j for j, bit in zip(bin_[last:], bits[last:], strict=True) if bit]
                for j, bit in zip(bin_[:last], bits[:last], strict=True):
                    (hi if bit else lo).insert(0, j)
                new[b], new[b + n] = lo, hi
            n, table = 2 * n, new
    return [j for bin_ in table for j in bin_]


def java_int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def parse_bool(text: str | None) -> bool:
    """Boolean.parseBoolean: only "true" (any case) is true."""
    return (text or "").strip().lower() == "true"


def java_int(text: str, what: str) -> int:
    """Integer.parseInt/Long.parseLong of an option value; a clear error naming the option otherwise."""
    s = text.strip()
    try:
        return int(s)
    except ValueError:
        raise ValueError(f"option {what}: {s!r} is not a number") from None


# -- MQVersion.Version ------------------------------------------------------------------------------------------

_IRREGULAR = ("V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1", "V3_0_0_BETA1", "V3_0_0_BETA2", "V3_0_0_BETA3", "V3_0_0_BETA4",
              "V3_0_0_BETA5", "V3_0_0_BETA6_SNAPSHOT", "V3_0_0_BETA6", "V3_0_0_BETA7_SNAPSHOT", "V3_0_0_BETA7",
              "V3_0_0_BETA8_SNAPSHOT", "V3_0_0_BETA8", "V3_0_0_BETA9_SNAPSHOT", "V3_0_0_BETA9", "V3_0_0_FINAL")


def _version_names() -> tuple[str, ...]:
    names = list(_IRREGULAR)
    ranges: list[tuple[int, int, Iterable[int]]] = [(3, 0, range(1, 16)), (3, 1, range(10)), (3, 2, range(10))]
    ranges += [(3, minor, range(1, 10)) for minor in range(3, 10)]
    ranges += [(major, minor, range(10)) for major in (4, 5) for minor in range(10)]
    for major, minor, patches in ranges:
        for p in patches:
            names += [f"V{major}_{minor}_{p}_SNAPSHOT", f"V{major}_{minor}_{p}"]
    return tuple(names)


VERSION_NAMES = _version_names()


def version_desc(ordinal: int) -> str:
    """MQVersion.getVersionDesc: the enum name of a version ordinal (the last one for newer values)."""
    if ordinal < 0:
        return VERSION_NAMES[0]
    return VERSION_NAMES[min(ordinal, len(VERSION_NAMES) - 1)]
