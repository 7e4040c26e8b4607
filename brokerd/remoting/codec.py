"""Sans-I/O codec for RocketMQ remoting frames (spec 1.2, 1.4, 1.5).

Frame: int32 totalLen | int32 (serializeType << 24 | headerLen) | header | body.
We accept JSON (type 0) and ROCKETMQ binary (type 1) headers and always write JSON headers
with string extFields values, which every client can read.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson

from brokerd.native import native
from brokerd.remoting.command import RemotingCommand

MAX_FRAME = 16 * 1024 * 1024
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST", "NODE_JS")

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hBhiii")

Received = bytes | bytearray | memoryview  # bytes read from a socket, or a view of them


class FrameError(Exception):
    """The byte stream is not a valid frame; the connection must be closed."""


if native is not None:
    native.setup(RemotingCommand, LANGUAGES, zlib.crc32)
_native_decode = native.decode_frame if native is not None else None
_native_head = native.encode_head if native is not None else None


def _coerce(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    # Nested objects/arrays are not valid extFields values; keep their JSON text rather than dropping them.
    return orjson.dumps(v).decode()


def _decode_json_header(raw: bytes | memoryview) -> RemotingCommand:
    try:
        h = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise FrameError(f"header is not JSON: {e}") from None
    if type(h) is not dict:
        raise FrameError("header is not a JSON object")
    code = h.get("code")
    opaque = h.get("opaque", 0)
    flag = h.get("flag", 0)
    version = h.get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
        for name, v in (("code", code), ("opaque", opaque), ("flag", flag), ("version", version)):
            if type(v) is not int:
                raise FrameError(f"header field {name} must be an integer")
    assert isinstance(code, int)
    lang = h.get("language", "JAVA")
    if type(lang) is not str:
        lang = LANGUAGES[lang] if type(lang) is int and 0 <= lang < len(LANGUAGES) else "OTHER"
    remark = h.get("remark")
    raw_ext = h.get("extFields")
    if raw_ext is None:
        ext: dict[str, str] = {}
    elif type(raw_ext) is not dict:
        raise FrameError("extFields must be an object")
    else:
        ext = {k: v for k, v in raw_ext.items() if type(v) is str}
        if len(ext) != len(raw_ext):  # numbers/booleans from C++ and Node clients
            for k, v in raw_ext.items():
                if type(v) is not str:
                    c = _coerce(v)
                    if c is not None:
                        ext[k] = c
    return RemotingCommand(code, opaque, flag, lang, version, remark if type(remark) is str else None, ext)


def _decode_binary_header(raw: bytes | memoryview) -> RemotingCommand:
    n = len(raw)
    if n < 21:
        raise FrameError("binary header shorter than 21 bytes")
    code, lang, version, opaque, flag, rlen = _BIN_FIXED.unpack_from(raw, 0)
    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise FrameError("binary header remark length out of bounds")
    remark = bytes(raw[pos:pos + rlen]).decode("utf-8", "replace") if rlen else None
    pos += rlen
    (elen,) = _I32.unpack_from(raw, pos)
    pos += 4
    if elen < 0 or pos + elen > n:
        raise FrameError("binary header extFields length out of bounds")
    end = pos + elen
    ext: dict[str, str] = {}
    while pos < end:
        if pos + 2 > end:
            raise FrameError("binary header truncated key length")
        klen = int.from_bytes(raw[pos:pos + 2], "big", signed=True)
        pos += 2
        if klen < 0 or pos + klen + 4 > end:
            raise FrameError("binary header key out of bounds")
        key = bytes(raw[pos:pos + klen]).decode("utf-8", "replace")
        pos += klen
        (vlen,) = _I32.unpack_from(raw, pos)
        pos += 4
        if vlen < 0 or pos + vlen > end:
            raise FrameError("binary header value out of bounds")
        if klen and vlen:
            ext[key] = bytes(raw[pos:pos + vlen]).decode("utf-8", "replace")
        pos += vlen
    return RemotingCommand(
        code=code, opaque=opaque, flag=flag, language=LANGUAGES[lang] if lang < len(LANGUAGES) else "OTHER",
        version=version, remark=remark, ext=ext,
    )


def decode_payload(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its leading 4-byte total length."""
    n = len(frame)
    if n < 4:
        raise FrameError("frame shorter than its header length field")
    (word,) = _I32.unpack_from(frame, 0)
    stype = (word >> 24) & 0xFF
    hlen = word & 0xFFFFFF
    if 4 + hlen > n:
        raise FrameError(f"header length {hlen} exceeds frame length {n}")
    header = frame[4:4 + hlen]
    if stype == SERIALIZE_JSON:
        cmd = _decode_json_header(header)
    elif stype == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {stype}")
    if 4 + hlen < n:
        cmd.body = bytes(frame[4 + hlen:])
    return cmd


def encode_header(cmd: RemotingCommand) -> bytes:
    h: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        h["remark"] = cmd.remark
    return orjson.dumps(h)


def encode(cmd: RemotingCommand) -> bytes:
    """Encode with a JSON header. extFields values must already be strings."""
    head, body = encode_parts(cmd)
    return head + body if body else head


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, bytes | memoryview | None]:
    """Prefix+header and body separately, so a large body is not copied (writelines)."""
    body = cmd.body
    blen = len(body) if body else 0
    if _native_head is not None:
        head: bytes | None = _native_head(cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version, cmd.remark,
                                          cmd.ext, blen)
        if head is not None:
            return head, body
    header = encode_header(cmd)
    return _PREFIX.pack(4 + len(header) + blen, len(header)) + header, body


def encode_binary(cmd: RemotingCommand) -> bytes:
    """ROCKETMQ binary header encoding; we never answer with it, but tests and Java-like peers send it."""
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = []
    for k, v in cmd.ext.items():
        kb, vb = k.encode(), v.encode()
        parts.append(len(kb).to_bytes(2, "big") + kb + len(vb).to_bytes(4, "big") + vb)
    ext = b"".join(parts)
    lang = LANGUAGES.index(cmd.language) if cmd.language in LANGUAGES else 7
    header = (
        _BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag, len(remark)) + remark
        + _I32.pack(len(ext)) + ext
    )
    body = cmd.body or b""
    return _PREFIX.pack(4 + len(header) + len(body), (SERIALIZE_ROCKETMQ << 24) | len(header)) + header + body


class FrameDecoder:
    """Accumulates bytes and yields complete commands. Raises FrameError on a malformed stream."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()  # the bytes of an incomplete frame, between reads
        self.max_frame = max_frame

    def feed(self, data: Received) -> list[RemotingCommand]:
        """Add received bytes; every command of the frames now complete."""
        buf = self.append(data)
        out: list[RemotingCommand] = []
        pos = 0
        mv = memoryview(buf)
        try:
            while True:
                cmd, pos = self._read(buf, mv, pos)
                if cmd is None:
                    break
                out.append(cmd)
        finally:
            mv.release()
            self.consumed(buf, pos)
        return out

    def append(self, data: Received) -> Received:
        """Add received bytes; returns the buffer to read frames from with ``next`` (then call ``consumed``): ``data``
        itself when no incomplete frame was pending (a read that starts on a frame: no copy), else the pending
        bytes with ``data`` appended."""
        if not self._buf:
            return data
        self._buf += data
        return self._buf

    def next(self, buf: Received, pos: int) -> tuple[RemotingCommand | None, int]:
        """The command of the complete frame at ``buf[pos:]`` and the position after it; (None, pos) when the
        frame is not complete yet. Raises FrameError on a malformed stream."""
        with memoryview(buf) as mv:
            return self._read(buf, mv, pos)

    def _read(self, buf: Received, mv: memoryview, pos: int) -> tuple[RemotingCommand | None, int]:
        if _native_decode is not None:
            hit = _native_decode(buf, pos, self.max_frame)
            if hit is not None:
                return hit  # type: ignore[no-any-return]
        n = len(buf)
        if n - pos < 4:
            return None, pos
        (total,) = _I32.unpack_from(buf, pos)
        if total < 4 or total > self.max_frame:
            raise FrameError(f"frame length {total} out of range (4..{self.max_frame})")
        if n - pos - 4 < total:
            return None, pos
        return decode_payload(mv[pos + 4:pos + 4 + total]), pos + 4 + total

    def consumed(self, buf: Received, pos: int) -> None:
        """``buf`` (what ``append`` returned) was read up to ``pos`` (the frames read with ``next``): what is left of
        it (an incomplete frame) waits for the next ``append``, copied when ``buf`` was the read itself."""
        if buf is not self._buf:
            if pos < len(buf):
                self._buf += memoryview(buf)[pos:]
        elif pos:
            del self._buf[:pos]

    @property
    def buffered(self) -> int:
        return len(self._buf)
