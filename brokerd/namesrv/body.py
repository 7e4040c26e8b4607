"""Name-server body codecs (pure): DataVersion, TopicConfig, RegisterBrokerBody (JSON and compressed).

Spec 2.4. The JSON shapes are RocketMQ's (fastjson field names); the compressed RegisterBrokerBody is a
zlib stream of length-prefixed parts:
    int32 len + DataVersion JSON | int32 topicCount | per topic: int32 len + TopicConfig line |
    int32 len + filter-server JSON array | (request version >= V5_0_0) int32 mappingCount + per mapping int32 len + JSON
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from brokerd.namesrv.lenient_json import LenientJSONError, loads
from brokerd.remoting.codes import CURRENT_VERSION

V3_0_11 = 37  # below it the REGISTER_BROKER body is a bare TopicConfigSerializeWrapper
V5_0_0 = 413  # from it the compressed body carries a topic-queue-mapping section

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1

TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
MAX_INFLATED = 64 * 1024 * 1024  # refuse compressed bodies that inflate beyond this (zip bombs)

_I32 = struct.Struct(">i")


class BodyError(ValueError):
    """A request body that cannot be decoded; nothing was changed."""


def dumps(obj: Any) -> bytes:
    """Serialize a JSON-ready dict the way every client can read: standard JSON, keys sorted."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def crc32(data: bytes | None) -> int:
    """RocketMQ's CRC32 (UtilAll.crc32): zlib CRC-32 masked to a positive int."""
    return zlib.crc32(data or b"") & 0x7FFFFFFF


def _int(obj: Mapping[str, Any], key: str, default: int, where: str) -> int:
    v = obj.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool):
        raise BodyError(f"{where}: field {key!r} must be an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    raise BodyError(f"{where}: field {key!r} must be an integer, got {str(v)[:40]!r}")


@dataclass(frozen=True, slots=True)
class DataVersion:
    counter: int = 0
    state_version: int = 0
    timestamp: int = 0

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        if obj is None:
            return cls()
        if not isinstance(obj, Mapping):
            raise BodyError("dataVersion must be an object")
        return cls(
            counter=_int(obj, "counter", 0, "dataVersion"),
            state_version=_int(obj, "stateVersion", 0, "dataVersion"),
            timestamp=_int(obj, "timestamp", 0, "dataVersion"),
        )

    def next_version(self, now_ms: int, state_version: int | None = None) -> DataVersion:
        return DataVersion(self.counter + 1, self.state_version if state_version is None else state_version, now_ms)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes), "order": self.order, "perm": self.perm,
            "readQueueNums": self.read_queue_nums, "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name, "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: Any, name: str | None = None) -> TopicConfig:
        where = f"topicConfig {name!r}" if name else "topicConfig"
        if not isinstance(obj, Mapping):
            raise BodyError(f"{where} must be an object")
        topic = obj.get("topicName", name)
        if not isinstance(topic, str) or not topic:
            raise BodyError(f"{where}: missing topicName")
        ftype = obj.get("topicFilterType") or "SINGLE_TAG"
        if ftype not in TOPIC_FILTER_TYPES:
            raise BodyError(f"{where}: bad topicFilterType {str(ftype)[:20]!r}")
        attrs = obj.get("attributes") or {}
        if not isinstance(attrs, Mapping):
            raise BodyError(f"{where}: attributes must be an object")
        order = obj.get("order", False)
        return cls(
            topic_name=topic,
            read_queue_nums=_int(obj, "readQueueNums", 16, where),
            write_queue_nums=_int(obj, "writeQueueNums", 16, where),
            perm=_int(obj, "perm", PERM_READ | PERM_WRITE, where),
            topic_filter_type=ftype,
            topic_sys_flag=_int(obj, "topicSysFlag", 0, where),
            order=order is True or order == "true",
            attributes={str(k): str(v) for k, v in attrs.items()},
        )

    def encode_line(self) -> str:
        """TopicConfig.encode: `name read write perm filterType attributesJSON` (sysFlag and order are not carried)."""
        attrs = orjson.dumps(dict(self.attributes)).decode()
        return (f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} "
                f"{self.topic_filter_type} {attrs}")

    @classmethod
    def decode_line(cls, line: str) -> TopicConfig:
        parts = line.split(" ", 5)
        if len(parts) < 5:
            raise BodyError(f"topic config line has {len(parts)} fields, expected at least 5: {line[:60]!r}")
        name, rq, wq, perm, ftype = parts[:5]
        if ftype not in TOPIC_FILTER_TYPES:
            raise BodyError(f"topic config line {name!r}: bad topicFilterType {ftype[:20]!r}")
        try:
            nums = int(rq), int(wq), int(perm)
        except ValueError:
            raise BodyError(f"topic config line {name!r}: queue numbers and perm must be integers") from None
        attrs: dict[str, str] = {}
        if len(parts) == 6 and parts[5].strip():
            try:
                raw = loads(parts[5])
            except LenientJSONError:
                raw = None  # Java logs and ignores bad attributes
            if isinstance(raw, Mapping):
                attrs = {str(k): str(v) for k, v in raw.items()}
        return cls(topic_name=name, read_queue_nums=nums[0], write_queue_nums=nums[1], perm=nums[2],
                   topic_filter_type=ftype, attributes=attrs)


def as_topic_config(name: str, tc: TopicConfig | Mapping[str, Any]) -> TopicConfig:
    return tc if isinstance(tc, TopicConfig) else TopicConfig.from_json(tc, name)


@dataclass(frozen=True, slots=True)
class RegisterBody:
    topic_config_table: dict[str, TopicConfig]
    data_version: DataVersion
    filter_server_list: list[str] | None = None
    topic_queue_mapping_info: dict[str, Any] = field(default_factory=dict)


class TopicMemo:
    """A broker's topic configs of its previous registration, by their wire form: a broker registers its whole table
    every 30 s, nearly always unchanged, and a topic config equal to the previous one is taken as it was instead of
    being validated again (a 2,000-topic registration: ~9 ms of the name server's loop, ~2.4 ms this way).
    ``current`` holds this registration's, for the next one."""

    __slots__ = ("previous", "current")

    def __init__(self, previous: dict[str, tuple[object, TopicConfig]] | None = None) -> None:
        self.previous = previous or {}
        self.current: dict[str, tuple[object, TopicConfig]] = {}

    def get(self, key: str, raw: object, build: Callable[[], TopicConfig]) -> TopicConfig:
        hit = self.previous.get(key)
        tc = hit[1] if hit is not None and hit[0] == raw else build()
        self.current[key] = (raw, tc)
        return tc


# -- encoding ------------------------------------------------------------------------------------------------


def encode_register_body(
    topic_configs: Mapping[str, TopicConfig | Mapping[str, Any]],
    data_version: DataVersion | Mapping[str, Any],
    *,
    filter_servers: Iterable[str] = (),
    compressed: bool = False,
    version: int = CURRENT_VERSION,
) -> bytes:
    """A RegisterBrokerBody as a Java broker sends it (JSON, or the zlib form when `compressed`)."""
    dv = data_version if isinstance(data_version, DataVersion) else DataVersion.from_json(data_version)
    tcs = {name: as_topic_config(name, tc) for name, tc in topic_configs.items()}
    fs = list(filter_servers)
    if not compressed:
        wrapper = {
            "dataVersion": dv.to_json(),
            "mappingDataVersion": DataVersion().to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in tcs.items()},
            "topicQueueMappingDetailMap": {},
            "topicQueueMappingInfoMap": {},
        }
        return orjson.dumps({"filterServerList": fs, "topicConfigSerializeWrapper": wrapper})
    parts: list[bytes] = []

    def put(b: bytes) -> None:
        parts.append(_I32.pack(len(b)))
        parts.append(b)

    put(orjson.dumps(dv.to_json()))
    parts.append(_I32.pack(len(tcs)))
    for tc in tcs.values():
        put(tc.encode_line().encode())
    put(orjson.dumps(fs))
    if version >= V5_0_0:
        parts.append(_I32.pack(0))
    return zlib.compress(b"".join(parts), 9)


def encode_wrapper_body(topic_configs: Mapping[str, TopicConfig | Mapping[str, Any]], data_version: DataVersion) -> bytes:
    """The bare TopicConfigSerializeWrapper JSON that brokers older than V3_0_11 send."""
    table = {name: as_topic_config(name, tc).to_json() for name, tc in topic_configs.items()}
    return orjson.dumps({"dataVersion": data_version.to_json(), "topicConfigTable": table})


# -- decoding ------------------------------------------------------------------------------------------------


def _parse_wrapper(w: Any, memo: TopicMemo) -> tuple[dict[str, TopicConfig], DataVersion, dict[str, Any]]:
    if not isinstance(w, Mapping):
        raise BodyError("topicConfigSerializeWrapper must be an object")
    raw_table = w.get("topicConfigTable") or {}
    if not isinstance(raw_table, Mapping):
        raise BodyError("topicConfigTable must be an object")
    table = {}
    for name, raw in raw_table.items():
        key = str(name)
        tc = memo.get(key, raw, lambda: TopicConfig.from_json(raw, key))  # noqa: B023 - called at once
        table[tc.topic_name] = tc
    mapping = w.get("topicQueueMappingInfoMap") or {}
    return table, DataVersion.from_json(w.get("dataVersion")), dict(mapping) if isinstance(mapping, Mapping) else {}


def _parse_json(data: bytes, what: str) -> Any:
    try:
        return loads(data)
    except LenientJSONError as e:
        raise BodyError(f"{what} is not JSON: {e}") from None


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def int32(self, what: str) -> int:
        if self.pos + 4 > len(self.buf):
            raise BodyError(f"compressed register body truncated reading {what}")
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def chunk(self, what: str) -> bytes:
        n = self.int32(what + " length")
        if n < 0 or self.pos + n > len(self.buf):
            raise BodyError(f"compressed register body: {what} length {n} out of bounds")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b


def inflate(data: bytes, limit: int = MAX_INFLATED) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit)
    except zlib.error as e:
        raise BodyError(f"compressed register body is not a zlib stream: {e}") from None
    if d.unconsumed_tail:
        raise BodyError(f"compressed register body inflates beyond {limit} bytes")
    return out


def _decode_compressed(data: bytes, version: int, memo: TopicMemo) -> RegisterBody:
    r = _Reader(inflate(data))
    dv = DataVersion.from_json(_parse_json(r.chunk("dataVersion"), "dataVersion"))
    count = r.int32("topic count")
    if count < 0:
        raise BodyError(f"compressed register body: negative topic count {count}")
    table: dict[str, TopicConfig] = {}
    for _ in range(count):
        line = r.chunk("topic config").decode("utf-8", "replace")
        tc = memo.get(line, line, lambda: TopicConfig.decode_line(line))  # noqa: B023 - called at once
        table[tc.topic_name] = tc
    fs_raw = _parse_json(r.chunk("filter server list"), "filterServerList")
    fs = [str(x) for x in fs_raw] if isinstance(fs_raw, list) else []
    mapping: dict[str, Any] = {}
    if version >= V5_0_0 and r.pos < len(r.buf):
        for _ in range(max(0, r.int32("mapping count"))):
            info = _parse_json(r.chunk("topic queue mapping"), "TopicQueueMappingInfo")
            if isinstance(info, Mapping) and isinstance(info.get("topic"), str):
                mapping[info["topic"]] = dict(info)
    return RegisterBody(table, dv, fs, mapping)


def decode_register_body(data: bytes | None, *, compressed: bool, version: int,
                         memo: TopicMemo | None = None) -> RegisterBody:
    """Decode a REGISTER_BROKER body. No body means an empty table and a zero DataVersion (as Java). ``memo``: the
    broker's previous registration's topics (``TopicMemo``), also given this one's.

    A zlib stream is recognised even when the header says `compressed=false` (Java 5.x always sends false)."""
    memo = memo if memo is not None else TopicMemo()
    if not data:
        return RegisterBody({}, DataVersion(), None)
    looks_zlib = data[:1] == b"\x78"
    if compressed or looks_zlib:
        if version < V3_0_11:
            raise BodyError("compressed register body needs request version >= 37")
        return _decode_compressed(data, version, memo)
    obj = _parse_json(data, "register body")
    if not isinstance(obj, Mapping):
        raise BodyError("register body must be a JSON object")
    if version < V3_0_11:
        table, dv, mapping = _parse_wrapper(obj, memo)
        return RegisterBody(table, dv, None, mapping)
    table, dv, mapping = _parse_wrapper(obj.get("topicConfigSerializeWrapper") or {}, memo)
    fs_raw = obj.get("filterServerList")
    fs = [str(x) for x in fs_raw] if isinstance(fs_raw, list) else None
    return RegisterBody(table, dv, fs, mapping)
