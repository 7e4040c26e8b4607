"""Tolerant readers for RocketMQ JSON fields: a missing key gives the default, a number written as a string
is accepted (fastjson and the C++ client do that), anything else raises ValueError naming the key."""

from __future__ import annotations

from typing import Any


def _where(ctx: str, key: str) -> str:
    return f"{ctx}.{key}" if ctx else key


def get_int(d: dict[str, Any], key: str, default: int, ctx: str = "") -> int:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool):
        raise ValueError(f"{_where(ctx, key)}: expected an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise ValueError(f"{_where(ctx, key)}: expected an integer, got {v!r}")


def get_bool(d: dict[str, Any], key: str, default: bool, ctx: str = "") -> bool:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError(f"{_where(ctx, key)}: expected a boolean, got {v!r}")


def get_str(d: dict[str, Any], key: str, default: str, ctx: str = "") -> str:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, str):
        return v
    raise ValueError(f"{_where(ctx, key)}: expected a string, got {v!r}")


def get_str_map(d: dict[str, Any], key: str, ctx: str = "") -> dict[str, str]:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{_where(ctx, key)}: expected an object, got {type(v).__name__}")
    out: dict[str, str] = {}
    for k, item in v.items():
        if not isinstance(k, str) or not isinstance(item, str | int | float | bool):
            raise ValueError(f"{_where(ctx, key)}: expected string values, got {item!r} for {k!r}")
        out[k] = item if isinstance(item, str) else str(item).lower() if isinstance(item, bool) else str(item)
    return out


def get_object(d: dict[str, Any], key: str, ctx: str = "") -> dict[str, Any]:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{_where(ctx, key)}: expected an object, got {type(v).__name__}")
    return v


def to_int_key(k: Any, ctx: str) -> int:
    """Queue ids / delay levels come as JSON object keys (strings) or as ints (msgpack)."""
    if isinstance(k, bool):
        raise ValueError(f"{ctx}: bad integer key {k!r}")
    if isinstance(k, int):
        return k
    if isinstance(k, str):
        try:
            return int(k.strip())
        except ValueError:
            pass
    raise ValueError(f"{ctx}: bad integer key {k!r}")


def to_int_value(v: Any, ctx: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{ctx}: expected an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise ValueError(f"{ctx}: expected an integer, got {v!r}")
