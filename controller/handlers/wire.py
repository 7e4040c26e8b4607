"""Wire helpers: typed request-field access answering CONTROLLER_INVALID_REQUEST (2005), Reply -> response."""

from __future__ import annotations

from typing import Any

import orjson

from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import HeaderError, RemotingCommand
from controller.statemachine.reply import Reply


def req_str(cmd: RemotingCommand, key: str, default: str | None = None) -> str:
    try:
        return cmd.str_field(key, default)
    except HeaderError as e:
        raise HeaderError(str(e), RC.CONTROLLER_INVALID_REQUEST) from None


def req_int(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    try:
        return cmd.int_field(key, default)
    except HeaderError as e:
        raise HeaderError(str(e), RC.CONTROLLER_INVALID_REQUEST) from None


def req_bool(cmd: RemotingCommand, key: str, default: bool = False) -> bool:
    v = cmd.ext.get(key)
    if v is None or v == "":
        return default
    low = v.lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise HeaderError(f"header field {key!r} is not a boolean: {v[:40]!r}", RC.CONTROLLER_INVALID_REQUEST)


def req_json(cmd: RemotingCommand) -> Any:
    if not cmd.body:
        raise HeaderError("request body is missing", RC.CONTROLLER_INVALID_REQUEST)
    try:
        return orjson.loads(cmd.body)
    except orjson.JSONDecodeError as e:
        raise HeaderError(f"request body is not JSON: {e}", RC.CONTROLLER_INVALID_REQUEST) from None


def encode_body(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return orjson.dumps(body)


def respond(cmd: RemotingCommand, reply: Reply) -> RemotingCommand:
    return cmd.response(reply.code, reply.remark, dict(reply.header), encode_body(reply.body))
