"""A fastjson-tolerant JSON reader (pure).

Java peers serialize with fastjson, whose parser (and, for non-string map keys, whose writer) goes beyond
standard JSON: unquoted field names (`{0:"a"}`, `{key:1}`), single-quoted strings, stray commas, and maps keyed
by objects (a `Map<MessageQueue, V>` is written `{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`): such a
key comes back as the key object's JSON text with its fields sorted (`object_key` parses it again).
`loads` tries the fast standard parser first and only falls back to this small recursive-descent reader
when that fails, so well-formed input costs nothing extra. A reader that wants such keys in another form passes
`object_key_as` (the key object → the dict key) and `bare_key_as` (an unquoted key's text → the dict key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

_WS = " \t\r\n"
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_BARE_END = set(_WS + ",:}]")
_MAX_DEPTH = 256


class LenientJSONError(ValueError):
    """The text is not even fastjson-lenient JSON."""


def _sorted_text(key: dict[str, Any]) -> str:
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()


def _same(key: str) -> str:
    return key


def loads(data: bytes | bytearray | memoryview | str, *, object_key_as: Callable[[dict[str, Any]], Any] = _sorted_text,
          bare_key_as: Callable[[str], Any] = _same) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
        try:
            return _Reader(text, object_key_as, bare_key_as).document()
        except LenientJSONError:
            raise LenientJSONError(str(first)) from None


def object_key(key: str) -> dict[str, Any]:
    """A map key that was an object (see the module docstring) as that object."""
    obj = orjson.loads(key)
    if not isinstance(obj, dict):
        raise LenientJSONError(f"not an object key: {key[:60]!r}")
    return obj


class _Reader:
    __slots__ = ("s", "i", "depth", "object_key_as", "bare_key_as")

    def __init__(self, s: str, object_key_as: Callable[[dict[str, Any]], Any],
                 bare_key_as: Callable[[str], Any]) -> None:
        self.s = s
        self.i = 0
        self.depth = 0
        self.object_key_as = object_key_as
        self.bare_key_as = bare_key_as

    def fail(self, what: str) -> LenientJSONError:
        return LenientJSONError(f"{what} at offset {self.i}")

    def skip_ws(self) -> None:
        s, i, n = self.s, self.i, len(self.s)
        while i < n and s[i] in _WS:
            i += 1
        self.i = i

    def peek(self) -> str:
        self.skip_ws()
        return self.s[self.i] if self.i < len(self.s) else ""

    def document(self) -> Any:
        v = self.value()
        if self.peek():
            raise self.fail("trailing characters")
        return v

    def value(self) -> Any:
        c = self.peek()
        if not c:
            raise self.fail("unexpected end of input")
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"' or c == "'":
            return self.string()
        return self.bare_value()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail("nesting too deep")

    def obj(self) -> dict[Any, Any]:
        self.enter()
        self.i += 1
        out: dict[Any, Any] = {}
        while True:
            c = self.peek()
            if c == ",":
                self.i += 1
                continue
            if c == "}":
                self.i += 1
                self.depth -= 1
                return out
            if not c:
                raise self.fail("unterminated object")
            key: Any
            if c == "{":
                key = self.object_key_as(self.obj())
            else:
                key = self.string() if c == '"' or c == "'" else self.bare_key_as(self.bare_token())
            if self.peek() != ":":
                raise self.fail("expected ':'")
            self.i += 1
            out[key] = self.value()

    def arr(self) -> list[Any]:
        self.enter()
        self.i += 1
        out: list[Any] = []
        while True:
            c = self.peek()
            if c == ",":
                self.i += 1
                continue
            if c == "]":
                self.i += 1
                self.depth -= 1
                return out
            if not c:
                raise self.fail("unterminated array")
            out.append(self.value())

    def string(self) -> str:
        s = self.s
        quote = s[self.i]
        i = self.i + 1
        parts: list[str] = []
        start = i
        while True:
            if i >= len(s):
                self.i = i
                raise self.fail("unterminated string")
            c = s[i]
            if c == quote:
                parts.append(s[start:i])
                self.i = i + 1
                return "".join(parts)
            if c == "\\":
                parts.append(s[start:i])
                if i + 1 >= len(s):
                    self.i = i
                    raise self.fail("bad escape")
                e = s[i + 1]
                if e == "u":
                    cp = self.hex4(i + 2)
                    i += 6
                    if 0xD800 <= cp < 0xDC00 and s[i:i + 2] == "\\u":
                        low = self.hex4(i + 2)
                        if 0xDC00 <= low < 0xE000:
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                            i += 6
                    parts.append("\ufffd" if 0xD800 <= cp < 0xE000 else chr(cp))
                else:
                    parts.append(_ESCAPES.get(e, e))
                    i += 2
                start = i
                continue
            i += 1

    def hex4(self, at: int) -> int:
        hexs = self.s[at:at + 4]
        if len(hexs) != 4 or not all(ch in "0123456789abcdefABCDEF" for ch in hexs):
            self.i = at
            raise self.fail("bad \\u escape")
        return int(hexs, 16)

    def bare_token(self) -> str:
        s, i, n = self.s, self.i, len(self.s)
        start = i
        while i < n and s[i] not in _BARE_END:
            i += 1
        if i == start:
            raise self.fail("expected a value")
        self.i = i
        return s[start:i]

    def bare_value(self) -> Any:
        tok = self.bare_token()
        if tok == "true":
            return True
        if tok == "false":
            return False
        if tok == "null":
            return None
        try:
            return int(tok)
        except ValueError:
            pass
        try:
            return float(tok)
        except ValueError:
            raise self.fail(f"unexpected token {tok[:20]!r}") from None
