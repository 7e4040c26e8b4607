"""The send shapes of the benchmarks: the request frames each kind of producer sends, one builder per shape.

A builder makes the frame of one send from (opaque, slot, UNIQ_KEY tail, first 8 body bytes); the slot picks the
queue (slot % queues) and, for a shape with variants, the variant (slot // queues). The Python load generator
(loadgen.py) calls it per send with slot = the send's number; for the compiled generator (gen.c)
``write_templates`` calls it once per slot with marker values and writes the frames (send i uses slot i %
slots) with the positions it patches per send: the opaque
(10 JSON digits or a binary int32), every UNIQ_KEY's 12-character tail and the body's first 8 bytes (the due
time of an open-loop send). Every UNIQ_KEY of a frame shares the tail, so each send's keys are unique; a frame's
length never changes.

Shapes: json_uniq (SEND_MESSAGE_V2 as the Java client sends it: JSON header, TAGS, WAIT, UNIQ_KEY),
json_no_uniq (as ali-ons sends: no UNIQ_KEY, the broker assigns one), send_message_10 (SEND_MESSAGE with long
field names, as the C++ 1.x core sends), binary (ROCKETMQ binary header), batch16 (SEND_BATCH_MESSAGE of 16
messages), delay_level (DELAY=18: 2 h, so that a benchmark measures the sends, not the delivery of earlier
ones when they fall due), transaction_half (a prepared send), retry_topic (to %RETRY%<group> with RETRY_TOPIC,
reconsumeTimes 1 and a delay level, 18 too, as a consumer's fallback send-back), tagged (the consume
benchmark's messages: TAGS TagA / TagB alternating per queue, property a = 0..9), delay_due (DELAY=1: delivered
after 1 s), and capture:<client>: the
first send frame each real client sent (tests/testdata/client_first_frames.json, the capture of
/work/shared/docs/client-captures.txt) with the bench topic, queue, body and UNIQ_KEY, the header otherwise as
captured (field order, JSON types, binary when captured binary).
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
import os
import pathlib
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import orjson

CAPTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "testdata" / "client_first_frames.json"
SHAPES = ("json_uniq", "json_no_uniq", "send_message_10", "binary", "batch16", "delay_level", "transaction_half",
          "retry_topic")
V1_NAMES = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
            "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch")
OPAQUE_MARK = 1_000_000_000  # a template's opaque: 10 digits, as every opaque gen.c writes (1e9 + send number)
UNIQ_TAIL = "ZZZZZZZZZZZZ"  # a template's UNIQ_KEY tail (12 characters; gen.c writes 12 hex digits there)

_PREFIX = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hBhiii")
# (opaque, slot, UNIQ_KEY tail of 12 characters, the body's first 8 bytes) -> one request frame
Builder = Callable[[int, int, str, bytes], bytes]


class Shape(NamedTuple):
    build: Builder
    per_frame: int  # messages per frame
    variants: int  # frames per queue that differ (slots = queues x variants)


def signed(ext: dict[str, str], body: bytes, creds: tuple[str, str] | None) -> dict[str, str]:
    """ext + AccessKey + Signature (RocketMQ ACL 1.0: HMAC-SHA1 of the values sorted by key, then the body)."""
    if creds is None:
        return ext
    ext = {**ext, "AccessKey": creds[0], "OnsChannel": "ALIYUN"}
    content = "".join([ext[k] for k in sorted(ext)]).encode() + body
    ext["Signature"] = base64.b64encode(hmac.digest(creds[1].encode(), content, "sha1")).decode()
    return ext


_FIELDS: dict[tuple[str, str], bytes] = {}  # encoded binary ext fields (the repeated ones stay cached)


def _bin_field(k: str, v: str) -> bytes:
    b = _FIELDS.get((k, v))
    if b is None:
        kb, vb = k.encode(), v.encode()
        b = struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
        if len(_FIELDS) < 4096:
            _FIELDS[(k, v)] = b
    return b


def frame(code: int, opaque: int, ext: dict[str, str], body: bytes = b"", binary: bool = False,
          creds: tuple[str, str] | None = None) -> bytes:
    """One request frame, JSON or ROCKETMQ binary header (signed with ``creds``)."""
    ext = signed(ext, body, creds)
    if binary:
        fields = b"".join([_bin_field(k, v) for k, v in ext.items()])
        header = _BIN_FIXED.pack(code, 0, 479, opaque, 0, 0) + struct.pack(">i", len(fields)) + fields
        return _PREFIX.pack(4 + len(header) + len(body), 1 << 24 | len(header)) + header + body
    header = orjson.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                           "serializeTypeCurrentRPC": "JSON", "version": 479})
    return _PREFIX.pack(4 + len(header) + len(body), len(header)) + header + body


def capture_shapes() -> dict[str, dict[str, str]]:
    """The real clients' first send frames (tests/testdata/client_first_frames.json), by a short name."""
    caps = json.loads(CAPTURES.read_text())
    out = {}
    for c in caps:
        if c["target"] == "broker":
            name = c["client"].split(" (")[0].split(" with ")[0].replace("Apache RocketMQ ", "")
            if "serialize" in c["client"]:
                name += " binary"
            out["capture:" + name] = c
    return out


def builder(shape: str, topic: str, queues: int, body_size: int, binary: bool = False,
            creds: tuple[str, str] | None = None) -> Shape:
    """``shape``'s frame builder. ``binary``: ROCKETMQ headers for every JSON shape."""
    pad = b"x" * max(0, body_size - 8)
    prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{int(time.time()) & 0xFFFFFFFF:08X}"  # + 12: a client's UNIQ_KEY
    if shape.startswith("capture:"):
        return Shape(_capture(capture_shapes()[shape], topic, queues, pad, prefix), 1, 1)

    def ext_of(q: int, props: str, v1: bool = False, **over: str) -> dict[str, str]:
        ext = {"a": "bench_pg", "b": topic, "c": "TBW102", "d": str(queues), "e": str(q), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false", "l": "16",
               "m": "false", **over}  # fmt: skip
        return dict(zip(V1_NAMES, ext.values(), strict=True)) if v1 else ext

    def single(props: str, code: int = 310, **over: str) -> Shape:
        def build(op: int, slot: int, tail: str, head: bytes) -> bytes:
            p = props.replace("@", prefix + tail).replace("#", "TagA" if slot // queues % 2 == 0 else "TagB")
            p = p.replace("$", str(slot // queues % 10))
            return frame(code, op, ext_of(slot % queues, p, code == 10, **over), head + pad,
                         binary or shape == "binary", creds)  # fmt: skip
        return Shape(build, 1, 10 if "#" in props else 1)

    uniq = "UNIQ_KEY\x01@\x02"
    if shape in ("json_uniq", "binary"):
        return single(f"TAGS\x01bench\x02WAIT\x01true\x02{uniq}")
    if shape == "json_no_uniq":
        return single("TAGS\x01bench\x02WAIT\x01true\x02")
    if shape == "send_message_10":
        return single(f"TAGS\x01bench\x02WAIT\x01true\x02{uniq}", 10)
    if shape == "delay_level":
        return single(f"TAGS\x01bench\x02DELAY\x0118\x02{uniq}")
    if shape == "transaction_half":  # a prepared send: stored as a half message (nothing commits it here)
        return single(f"TAGS\x01bench\x02TRAN_MSG\x01true\x02PGROUP\x01bench_pg\x02{uniq}", f="4")
    if shape == "retry_topic":  # the topic is %RETRY%<group>: a consumer's send-back by a plain send
        return single(f"TAGS\x01bench\x02RETRY_TOPIC\x01BenchTopic\x02DELAY\x0118\x02{uniq}", j="1")
    if shape == "delay_due":  # delay level 1 (1 s): the delivery benchmark's messages
        return single(f"TAGS\x01bench\x02DELAY\x011\x02{uniq}")
    if shape == "tagged":
        return single(f"TAGS\x01#\x02a\x01$\x02WAIT\x01true\x02{uniq}")
    if shape == "batch16":
        from brokerd.message import encode_batch_body

        def batch(op: int, slot: int, tail: str, head: bytes) -> bytes:
            msgs = [(0, head + pad, {"TAGS": "bench", "UNIQ_KEY": f"{prefix[:-2]}{i:02X}{tail}"}) for i in range(16)]
            return frame(320, op, ext_of(slot % queues, "", m="true"), encode_batch_body(msgs), binary, creds)
        return Shape(batch, 16, 1)
    raise ValueError(f"unknown shape {shape!r}")


def _capture(cap: dict[str, str], topic: str, queues: int, pad: bytes, prefix: str) -> Builder:
    """A real client's captured first send, re-targeted: JSON headers edited as JSON (the client's field order
    and value types kept), binary ones re-encoded field by field."""
    from brokerd.message import decode_properties, encode_properties
    from brokerd.remoting import encode_binary
    from brokerd.remoting.codec import FrameDecoder

    raw = bytes.fromhex(cap["hex"])
    tmpl = FrameDecoder().feed(raw)[0]
    tkey, qkey, pkey = ("b", "e", "i") if tmpl.code != 10 else ("topic", "queueId", "properties")
    props = decode_properties(tmpl.ext.get(pkey, ""))
    header = json.loads(raw[8:8 + (int.from_bytes(raw[4:8], "big") & 0xFFFFFF)]) if raw[4] == 0 else None

    def props_of(tail: str) -> str:
        p = dict(props)
        if "UNIQ_KEY" in p:
            p["UNIQ_KEY"] = prefix + tail
        return encode_properties(p).decode()

    def replay(op: int, slot: int, tail: str, head: bytes) -> bytes:
        body, q = head + pad, slot % queues
        if header is None:
            cmd = dataclasses.replace(tmpl, opaque=op, body=body,
                                      ext={**tmpl.ext, tkey: topic, qkey: str(q), pkey: props_of(tail)})
            return encode_binary(cmd)
        ext = dict(header["extFields"])
        ext[tkey], ext[pkey] = topic, props_of(tail)
        ext[qkey] = q if isinstance(ext.get(qkey), int) else str(q)
        h = json.dumps({**header, "extFields": ext, "opaque": op}, separators=(",", ":")).encode()
        return _PREFIX.pack(4 + len(h) + len(body), len(h)) + h + body
    return replay


@dataclass(frozen=True, slots=True)
class Template:
    """One queue's frame for gen.c and where it patches it per send."""

    frame: bytes
    opaque_at: int
    opaque_binary: bool
    uniq_at: tuple[int, ...]
    ts_at: int  # -1: no body time (a batch)


def template(build: Builder, slot: int, per_frame: int) -> Template:
    f = build(OPAQUE_MARK, slot, UNIQ_TAIL, b"\0" * 8)
    hlen = int.from_bytes(f[5:8], "big")
    binary = f[4] == 1
    opaque_at = 13 if binary else f.index(b'"opaque":%d' % OPAQUE_MARK) + 9
    assert int.from_bytes(f[opaque_at:opaque_at + 4], "big") == OPAQUE_MARK if binary else True
    mark = UNIQ_TAIL.encode()
    uniq_at, at = [], f.find(mark)
    while at >= 0:
        uniq_at.append(at)
        at = f.find(mark, at + len(mark))
    return Template(f.replace(mark, b"0" * len(mark)), opaque_at, binary, tuple(uniq_at),
                    8 + hlen if per_frame == 1 else -1)


_U32 = struct.Struct(">I")


def write_templates(path: pathlib.Path, shape: str, topic: str, queues: int, body_size: int) -> int:
    """gen.c's frames file for ``shape`` (one template per slot: queues x variants); returns messages per frame.

    Format (big-endian u32s): "MQGF", count, messages per frame; per template: frame length, opaque position,
    opaque kind (0 JSON digits, 1 binary int32), body time position (0xFFFFFFFF: none), UNIQ_KEY tail count,
    their positions, the frame."""
    sh = builder(shape, topic, queues, body_size)
    slots = queues * sh.variants
    parts = [b"MQGF", _U32.pack(slots), _U32.pack(sh.per_frame)]
    for slot in range(slots):
        t = template(sh.build, slot, sh.per_frame)
        parts += [_U32.pack(len(t.frame)), _U32.pack(t.opaque_at), _U32.pack(int(t.opaque_binary)),
                  _U32.pack(t.ts_at & 0xFFFFFFFF), _U32.pack(len(t.uniq_at)), *map(_U32.pack, t.uniq_at), t.frame]
    path.write_bytes(b"".join(parts))
    return sh.per_frame


def heartbeat_frame(group: str, topic: str, sub: str, expression_type: str = "TAG") -> bytes:
    """A push consumer's HEART_BEAT (34): it registers ``group``'s subscription to ``topic`` (as the Java client's
    HeartbeatData: the tags and their hash codes for a TAG expression), so its pulls need not carry it."""
    from brokerd.message import tags_code_of

    tags = [t.strip() for t in sub.split("||") if t.strip()] if expression_type == "TAG" and sub != "*" else []
    data = {"clientID": f"127.0.0.1@bench{os.getpid()}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "classFilterMode": False, "topic": topic, "subString": sub, "tagsSet": tags,
            "codeSet": [tags_code_of(t) for t in tags], "subVersion": int(time.time() * 1000),
            "expressionType": expression_type}]}]}  # fmt: skip
    return frame(34, 1, {}, json.dumps(data).encode())
