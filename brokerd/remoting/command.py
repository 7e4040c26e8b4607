"""The RemotingCommand model (spec 1.3) and typed access to request header fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from brokerd.remoting.codes import CURRENT_VERSION, ResponseCode

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2


class HeaderError(Exception):
    """A request header field is missing or malformed; answered with `code` and the message as remark."""

    def __init__(self, message: str, code: int = ResponseCode.INVALID_PARAMETER) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = CURRENT_VERSION
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """A response to this request: same opaque, response flag set."""
        return RemotingCommand(
            code=code, opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark, ext=ext if ext is not None else {},
            body=body,
        )

    # -- typed header access (values were coerced to str by the codec) --------------------------------

    def str_field(self, key: str, default: str | None = None) -> str:
        v = self.ext.get(key)
        if v is None or v == "":
            if default is None:
                raise HeaderError(f"missing header field {key!r}")
            return default
        return v

    def opt_str(self, key: str) -> str | None:
        v = self.ext.get(key)
        return v if v else None

    def int_field(self, key: str, default: int | None = None) -> int:
        v = self.ext.get(key)
        if v is None or v == "":
            if default is None:
                raise HeaderError(f"missing header field {key!r}")
            return default
        try:
            return int(v)
        except ValueError:
            try:
                f = float(v)
            except ValueError:
                raise HeaderError(f"header field {key!r} is not a number: {v[:40]!r}") from None
            if f != f or f in (float("inf"), float("-inf")) or f != int(f):
                raise HeaderError(f"header field {key!r} is not an integer: {v[:40]!r}") from None
            return int(f)

    def json_body(self) -> dict[str, Any]:
        """The body as a JSON object (an empty body is {}); malformed JSON answers SYSTEM_ERROR with a remark."""
        try:
            data = orjson.loads(self.body or b"{}")
        except orjson.JSONDecodeError as e:
            raise HeaderError(f"request body is not JSON: {e}", ResponseCode.SYSTEM_ERROR) from None
        if not isinstance(data, dict):
            raise HeaderError("request body must be a JSON object", ResponseCode.SYSTEM_ERROR)
        return data

    def bool_field(self, key: str, default: bool = False) -> bool:
        """Java Boolean.parseBoolean semantics; the C++ client also sends "0"/"1"."""
        v = self.ext.get(key)
        if v is None or v == "":
            return default
        return v.lower() in ("true", "1")


def request(code: int, ext: dict[str, str] | None = None, body: bytes | None = None, oneway: bool = False) -> RemotingCommand:
    return RemotingCommand(code=code, flag=FLAG_ONEWAY if oneway else 0, ext=ext if ext is not None else {}, body=body)
