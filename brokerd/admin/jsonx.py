"""JSON as RocketMQ's Java side writes and reads it (fastjson), pure.

`loads` reads standard JSON fast and falls back to the name server's reader for fastjson's extensions: unquoted and numeric keys
(`{0:"127.0.0.1:10911"}`), single quotes, and maps keyed by objects, which is how a `Map<MessageQueue, V>`
(TopicStatsTable, ConsumeStats, ResetOffsetBody) is written: `{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`.
An object key is returned as an `ObjKey` (hashable, with the key's fields); a key that is a JSON object in a string
(`{"{\"brokerName\":...}": ...}`) is read the same way by `object_key`.

`pretty` writes `JSON.toJSONString(obj, true)`'s layout: tab indentation, `"key":value`, integer keys unquoted (and
a map of them on one line)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from brokerd.namesrv import lenient_json
from brokerd.namesrv.lenient_json import LenientJSONError

JSONError = LenientJSONError


class ObjKey(tuple[tuple[str, Any], ...]):
    """A map key that is itself an object (its fields, sorted)."""

    def get(self, name: str, default: Any = None) -> Any:
        for k, v in self:
            if k == name:
                return v
        return default


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return ObjKey(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _bare_key(tok: str) -> Any:
    return int(tok) if tok.lstrip("-").isdigit() else tok


def object_key(k: Any) -> ObjKey | None:
    """The fields of a map key written as an object (directly, or as JSON text in a string)."""
    if isinstance(k, ObjKey):
        return k
    if isinstance(k, str) and k.startswith("{"):
        try:
            v = loads(k)
        except JSONError:
            return None
        return _freeze(v) if isinstance(v, dict) else None
    return None


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """fastjson's JSON (`brokerd.namesrv.lenient_json`), object keys as `ObjKey`, unquoted integer keys as ints."""
    return lenient_json.loads(data, object_key_as=_freeze, bare_key_as=_bare_key)


# -- fastjson's pretty format ------------------------------------------------------------------------------------

def _scalar(v: Any) -> str:
    if isinstance(v, float) and v == int(v) and abs(v) < 1e15:
        return f"{v:.1f}"
    return orjson.dumps(v).decode()


def _key(k: Any) -> str:
    if isinstance(k, bool) or not isinstance(k, int):
        return orjson.dumps(str(k)).decode()
    return str(k)


def pretty(v: Any, level: int = 0) -> str:
    """JSON.toJSONString(v, true): tabs, no space after ':', empty containers as {} / []."""
    pad, inner = "\t" * level, "\t" * (level + 1)
    if isinstance(v, Mapping):
        if not v:
            return "{}"
        if all(isinstance(k, int) and not isinstance(k, bool) for k in v):  # fastjson keeps these on one line
            return "{" + ",".join(f"{k}:{pretty(x, level + 1)}" for k, x in v.items()) + f"\n{pad}}}"
        items = [f"{inner}{_key(k)}:{pretty(x, level + 1)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(v, list | tuple | set | frozenset):
        if not v:
            return "[]"
        return "[\n" + ",\n".join(f"{inner}{pretty(x, level + 1)}" for x in v) + f"\n{pad}]"
    return _scalar(v)


def compact(v: Any) -> str:
    """JSON.toJSONString(v) / RemotingSerializable.toJson(v, false): no whitespace, integer keys unquoted."""
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{_key(k)}:{compact(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple | set | frozenset):
        return "[" + ",".join(compact(x) for x in v) + "]"
    return _scalar(v)
