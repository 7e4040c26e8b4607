"""RocketMQ-style `key=value` configuration files (a Java Properties subset) and typed field parsing."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key."""


class BlacklistedKey(ConfigError):
    """A runtime config update naming a key of the config black list (RocketMQ answers NO_PERMISSION)."""


def config_update(body: bytes, blacklist: frozenset[str]) -> dict[str, str]:
    """An UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG body (``key=value`` lines) as properties: ConfigError when
    it holds none, BlacklistedKey naming the first black-listed key it sets."""
    props = parse_properties(body.decode("utf-8", "replace"))
    if not props:
        raise ConfigError("string2Properties error")
    bad = sorted(set(props) & blacklist)
    if bad:
        raise BlacklistedKey(f"Can not update config in black list: {bad[0]}")
    return props


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java Properties text: `#`/`!` comments, `key=value`, `key: value` or `key value`, trimmed.
    A trailing backslash continues the line."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
        else:
            out[line] = ""
    if pending:
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", pending)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def read_properties(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from e


def persist_properties(path: str, changes: dict[str, str]) -> None:
    """Write changed keys back into a `key=value` config file atomically, keeping its comments and order (new keys
    are appended); a file that cannot be read is rewritten with the changes."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    seen = set()
    out = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        if "=" in line and key in changes and not line.lstrip().startswith("#"):
            out.append(f"{key}={changes[key]}")
            seen.add(key)
        else:
            out.append(line)
    out += [f"{k}={v}" for k, v in changes.items() if k not in seen]
    fd, tmp = tempfile.mkstemp(prefix=".config.", dir=os.path.dirname(os.path.abspath(path)))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)


def to_properties(values: dict[str, Any]) -> str:
    return "".join(f"{k}={_fmt(v)}\n" for k, v in values.items())


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _convert(key: str, raw: str, typ: Any) -> Any:
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if raw == "":
            return None
        return _convert(key, raw, args[0])
    if typ is bool:
        low = raw.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ConfigError(f"{key}: expected true or false, got {raw!r}")
    if typ is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
    if typ is float:
        try:
            return float(raw.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {raw!r}") from None
    return raw


def build_config(cls: type[T], props: dict[str, str], *, strict: bool = False, **overrides: Any) -> T:
    """Build a frozen dataclass from RocketMQ camelCase keys (field `store_path_root_dir` <- `storePathRootDir`).

    Unknown keys are ignored (RocketMQ configs carry many keys we don't use) unless `strict`."""
    assert dataclasses.is_dataclass(cls)
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    known = set()
    for f in dataclasses.fields(cls):
        key = f.metadata.get("key") or snake_to_camel(f.name)
        known.add(key)
        if key in props:
            kwargs[f.name] = _convert(key, props[key], hints[f.name])
    if strict:
        unknown = sorted(set(props) - known)
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown configuration key")
    kwargs.update(overrides)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(str(e)) from e


def config_to_properties(cfg: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in dataclasses.fields(cfg):
        key = f.metadata.get("key") or snake_to_camel(f.name)
        v = getattr(cfg, f.name)
        out[key] = "" if v is None else _fmt(v)
    return out
