"""The properties string (spec §3.4): ``name 0x01 value 0x02`` pairs, the index keys it carries and the
delay-level setting its DELAY property refers to."""

from __future__ import annotations

from collections.abc import Mapping

from brokerd.message.constants import KEY_SEPARATOR, KEYS, UNIQ_KEY


def encode_properties(d: Mapping[str, str | None]) -> bytes:
    """Encode properties as ``name 0x01 value 0x02`` pairs (UTF-8); None values are skipped."""
    if not d:
        return b""
    try:  # all-C fast path: str.join over the (name, value) tuples
        return ("\x02".join(map("\x01".join, d.items())) + "\x02").encode("utf-8", "replace")  # type: ignore[arg-type]
    except TypeError:  # a None (or non-str) value
        return "".join([f"{k}\x01{v}\x02" for k, v in d.items() if v is not None]).encode("utf-8", "replace")


def decode_properties(b: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """Parse a properties string like Java's ``string2messageProperties``.

    Segments split on 0x02; a segment counts only when it has a 0x01 with a non-empty
    name before it and a non-empty value after it; later duplicates win.
    """
    s = b if isinstance(b, str) else bytes(b).decode("utf-8", "replace")
    out: dict[str, str] = {}
    if not s:
        return out
    for seg in s.split("\x02"):
        k, sep, v = seg.partition("\x01")
        if sep and k and v:
            out[k] = v
    return out


def message_keys(props: Mapping[str, str]) -> list[str]:
    """Index keys of a message: KEYS split on spaces plus UNIQ_KEY (non-empty, de-duplicated)."""
    raw = props.get(KEYS)
    uniq = props.get(UNIQ_KEY)
    if raw:
        keys = raw.split(KEY_SEPARATOR) if KEY_SEPARATOR in raw else [raw]
        if "" in keys:
            keys = [k for k in keys if k]
        if uniq and uniq not in keys:
            keys.append(uniq)
        return keys
    return [uniq] if uniq else []


def parse_delay_levels(spec: str) -> list[int]:
    """Parse ``messageDelayLevel`` ("1s 5s ... 2h") into milliseconds; index 0 is level 1."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out: list[int] = []
    for token in spec.split():
        unit = units.get(token[-1:])
        if unit is None or not token[:-1].isdigit():
            raise ValueError(f"bad delay level {token!r}")
        out.append(int(token[:-1]) * unit)
    return out
