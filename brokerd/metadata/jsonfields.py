"""Tolerant readers for RocketMQ JSON fields: a missing key gives the default, a number written as a string
is accepted (fastjson and the C++ client do that), anything else raises ValueError naming the key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _where(ctx: str, key: str) -> str:
    return f"{ctx}.{key}" if ctx else key


def _as_int(v: Any) -> int | None:
    """`v` as an int: an int (not a bool) or a string holding one; None for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    return None


def _read(d: dict[str, Any], key: str, default: T, ctx: str, convert: Callable[[Any], T | None], what: str) -> T:
    """`d[key]` through `convert`; missing or null gives `default`; unconvertible raises ValueError."""
    v = d.get(key)
    if v is None:
        return default
    out = convert(v)
    if out is None:
        raise ValueError(f"{_where(ctx, key)}: expected {what}, got {v!r}")
    return out


def get_int(d: dict[str, Any], key: str, default: int, ctx: str = "") -> int:
    return _read(d, key, default, ctx, _as_int, "an integer")


def get_bool(d: dict[str, Any], key: str, default: bool, ctx: str = "") -> bool:
    return _read(d, key, default, ctx, _as_bool, "a boolean")


def get_str(d: dict[str, Any], key: str, default: str, ctx: str = "") -> str:
    return _read(d, key, default, ctx, lambda v: v if isinstance(v, str) else None, "a string")


def get_object(d: dict[str, Any], key: str, ctx: str = "") -> dict[str, Any]:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{_where(ctx, key)}: expected an object, got {type(v).__name__}")
    return v


def get_str_map(d: dict[str, Any], key: str, ctx: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, item in get_object(d, key, ctx).items():
        if not isinstance(k, str) or not isinstance(item, str | int | float | bool):
            raise ValueError(f"{_where(ctx, key)}: expected string values, got {item!r} for {k!r}")
        out[k] = item if isinstance(item, str) else str(item).lower() if isinstance(item, bool) else str(item)
    return out


def to_int_key(k: Any, ctx: str) -> int:
    """Queue ids / delay levels come as JSON object keys (strings) or as ints (msgpack)."""
    out = _as_int(k)
    if out is None:
        raise ValueError(f"{ctx}: bad integer key {k!r}")
    return out


def to_int_value(v: Any, ctx: str) -> int:
    out = _as_int(v)
    if out is None:
        raise ValueError(f"{ctx}: expected an integer, got {v!r}")
    return out
