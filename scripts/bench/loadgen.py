"""A pipelined asyncio load generator speaking RocketMQ remoting: SEND_MESSAGE_V2 with fixed-size bodies over
several connections with many requests in flight, and PULL_MESSAGE for consume throughput.

Runs in its own process (python -m scripts.bench.loadgen ...) and prints one JSON object."""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import hmac
import json
import os
import pathlib
import struct
import sys
import time
from collections.abc import Callable

import orjson
import uvloop

_PREFIX = struct.Struct(">ii")


BINARY = False  # --binary: ROCKETMQ binary headers (a Java client with -Drocketmq.serialize.type=ROCKETMQ)
_BIN_FIXED = struct.Struct(">hBhiii")


CREDS: tuple[str, str] | None = None  # --access-key/--secret-key: requests signed as RocketMQ's ACL 1.0 client


def signed(ext: dict[str, str], body: bytes) -> dict[str, str]:
    """ext + AccessKey + Signature (HMAC-SHA1 of the values sorted by key, then the body; base64)."""
    if CREDS is None:
        return ext
    ext = {**ext, "AccessKey": CREDS[0], "OnsChannel": "ALIYUN"}
    content = "".join([ext[k] for k in sorted(ext)]).encode() + body
    ext["Signature"] = base64.b64encode(hmac.digest(CREDS[1].encode(), content, "sha1")).decode()
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


def frame(code: int, opaque: int, ext: dict[str, str], body: bytes = b"", binary: bool | None = None) -> bytes:
    """One request frame (signed when --access-key is given)."""
    ext = signed(ext, body)
    if BINARY if binary is None else binary:
        fields = b"".join([_bin_field(k, v) for k, v in ext.items()])
        header = _BIN_FIXED.pack(code, 0, 479, opaque, 0, 0) + struct.pack(">i", len(fields)) + fields
        return _PREFIX.pack(4 + len(header) + len(body), 1 << 24 | len(header)) + header + body
    header = orjson.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                           "serializeTypeCurrentRPC": "JSON", "version": 479})
    return _PREFIX.pack(4 + len(header) + len(body), len(header)) + header + body


class Conn(asyncio.Protocol):
    """Counts responses; each response frees one in-flight slot."""

    def __init__(self, on_response) -> None:  # type: ignore[no-untyped-def]
        self.buf = bytearray()
        self.on_response = on_response
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        while n - pos >= 8:
            total, hword = _PREFIX.unpack_from(buf, pos)
            if n - pos - 4 < total:
                break
            hlen = hword & 0xFFFFFF
            header = orjson.loads(bytes(buf[pos + 8:pos + 8 + hlen]))
            self.on_response(header, total - 4 - hlen)
            pos += 4 + total
        del buf[:pos]


CAPTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "testdata" / "client_first_frames.json"
SHAPES = ("json_uniq", "json_no_uniq", "send_message_10", "binary", "batch16", "delay_level", "transaction_half")


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


def shape_sender(shape: str, topic: str, queues: int, body_size: int) -> tuple[Callable[[int], bytes], int]:
    """(frame for opaque ``op``, messages per frame) of a send shape: one of SHAPES or a capture:... name (the
    captured frame with the bench topic, queue, body and a unique UNIQ_KEY when it had one; headers otherwise
    as captured, re-encoded JSON or binary as captured)."""
    from brokerd.message import decode_properties, encode_batch_body, encode_properties
    from brokerd.remoting import encode, encode_binary
    from brokerd.remoting.codec import FrameDecoder

    body = b"x" * body_size
    uniq_prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{int(time.time()) & 0xFFFFFFFF:08X}"  # like a client's UNIQ_KEY

    def ext_of(op: int, props: str, v1: bool = False) -> dict[str, str]:
        ext = {"a": "bench_pg", "b": topic, "c": "TBW102", "d": str(queues), "e": str(op % queues), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false", "l": "16", "m": "false"}
        return dict(zip(V1_NAMES, ext.values(), strict=True)) if v1 else ext

    def uniq(op: int) -> str:
        return f"UNIQ_KEY\x01{uniq_prefix}{op:08X}\x02"

    if shape in ("json_uniq", "binary"):
        return lambda op: frame(310, op, ext_of(op, f"TAGS\x01bench\x02WAIT\x01true\x02{uniq(op)}"), body,
                                shape == "binary" or None), 1
    if shape == "json_no_uniq":
        return lambda op: frame(310, op, ext_of(op, "TAGS\x01bench\x02WAIT\x01true\x02"), body), 1
    if shape == "send_message_10":
        return lambda op: frame(10, op, ext_of(op, f"TAGS\x01bench\x02WAIT\x01true\x02{uniq(op)}", True), body), 1
    if shape == "delay_level":
        return lambda op: frame(310, op, ext_of(op, f"TAGS\x01bench\x02DELAY\x012\x02{uniq(op)}"), body), 1
    if shape == "transaction_half":  # a prepared send: stored as a half message (nothing commits it here)
        return lambda op: frame(310, op, {**ext_of(op, f"TAGS\x01bench\x02TRAN_MSG\x01true\x02PGROUP\x01bench_pg\x02{uniq(op)}"),
                                          "f": "4"}, body), 1
    if shape == "batch16":
        def batch(op: int) -> bytes:
            msgs = [(0, body, {"TAGS": "bench", "UNIQ_KEY": f"{uniq_prefix}{op:06X}{i:02X}"}) for i in range(16)]
            return frame(320, op, {**ext_of(op, ""), "m": "true"}, encode_batch_body(msgs))
        return batch, 16
    cap = capture_shapes()[shape]
    raw = bytes.fromhex(cap["hex"])
    tmpl = FrameDecoder().feed(raw)[0]
    binary = raw[4] == 1
    tkey, qkey, pkey = ("b", "e", "i") if tmpl.code != 10 else ("topic", "queueId", "properties")
    props = decode_properties(tmpl.ext.get(pkey, ""))

    def replay(op: int) -> bytes:
        p = dict(props)
        if "UNIQ_KEY" in p:
            p["UNIQ_KEY"] = f"{uniq_prefix}{op:08X}"
        cmd = dataclasses.replace(tmpl, opaque=op, body=body,
                                  ext={**tmpl.ext, tkey: topic, qkey: str(op % queues), pkey: encode_properties(p).decode()})
        return encode_binary(cmd) if binary else encode(cmd)
    return replay, 1


V1_NAMES = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
            "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch")


async def produce(addr: str, topic: str, conns: int, inflight: int, total: int, body_size: int,
                  queues: int, shape: str = "json_uniq") -> dict[str, object]:
    addrs = addr.split(",")
    loop = asyncio.get_running_loop()
    make_frame, per_frame = shape_sender(shape, topic, queues, body_size)
    sent_at: dict[int, float] = {}
    lat: list[float] = []
    errors = 0
    done = asyncio.Event()
    counter = 0
    issued = 0
    protos: list[Conn] = []

    def send(p: Conn) -> None:
        nonlocal issued
        if issued >= total:
            return
        issued += 1
        op = issued
        data = make_frame(op)
        sent_at[op] = time.perf_counter()
        assert p.transport is not None
        p.transport.write(data)

    def make(idx: int) -> Conn:
        def on_response(h: dict, blen: int) -> None:
            nonlocal counter, errors
            t = sent_at.pop(h["opaque"], None)
            if t is not None:
                lat.append(time.perf_counter() - t)
            if h["code"] != 0:
                errors += 1
            counter += 1
            if counter >= total:
                done.set()
            else:
                send(protos[idx])
        return Conn(on_response)

    for i in range(conns):
        host, port = addrs[i % len(addrs)].rsplit(":", 1)
        _, p = await loop.create_connection(lambda i=i: make(i), host, int(port))
        protos.append(p)
    t0 = time.perf_counter()
    for _ in range(inflight):
        for p in protos:
            send(p)
    await done.wait()
    dt = time.perf_counter() - t0
    for p in protos:
        assert p.transport is not None
        p.transport.close()
    lat.sort()
    msgs = total * per_frame
    return {"shape": shape, "msgs": msgs, "seconds": round(dt, 3), "msg_per_s": round(msgs / dt), "mb_per_s":
            round(msgs * body_size / dt / 1e6, 2), "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3), "errors": errors}


def _pct(xs: list[float], q: float) -> float:
    return round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 3) if xs else 0.0


async def flood(addr: str, topic: str, conns: int, inflight: int, seconds: float, body_size: int,
                queues: int) -> dict[str, object]:
    """Closed loop for ``seconds``: each answer (success or refusal) frees its slot for a new send. Latency of
    every answer; successes per 0.5 s; refusals (SYSTEM_BUSY) by the bracketed reason of their remark."""
    host, port = addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    body = b"x" * body_size
    sent_at: dict[int, float] = {}
    lat_all: list[float] = []
    lat_ok: list[float] = []
    codes: dict[str, int] = {}
    busy: dict[str, int] = {}
    ok_per_half_s: list[int] = []
    state = {"op": 0, "stop": False}
    done = asyncio.Event()
    protos: list[Conn] = []
    t0 = time.perf_counter()

    def send(p: Conn) -> None:
        state["op"] += 1
        op = state["op"]
        ext = {"a": "bench_pg", "b": topic, "c": "TBW102", "d": str(queues), "e": str(op % queues), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": "TAGS\x01flood\x02WAIT\x01true\x02", "j": "0",
               "k": "false", "m": "false"}
        sent_at[op] = time.perf_counter()
        assert p.transport is not None
        p.transport.write(frame(310, op, ext, body))

    def make(idx: int) -> Conn:
        def on_response(h: dict, blen: int) -> None:  # type: ignore[type-arg]
            now = time.perf_counter()
            dt = now - sent_at.pop(h["opaque"], now)
            lat_all.append(dt)
            code = h["code"]
            codes[str(code)] = codes.get(str(code), 0) + 1
            if code == 0:
                lat_ok.append(dt)
                b = int((now - t0) / 0.5)
                ok_per_half_s.extend([0] * (b + 1 - len(ok_per_half_s)))
                ok_per_half_s[b] += 1
            elif code == 2:
                reason = str(h.get("remark", "")).split("]", 1)[0].lstrip("[")
                busy[reason] = busy.get(reason, 0) + 1
            if now - t0 < seconds:
                send(protos[idx])
            elif not sent_at:
                done.set()
        return Conn(on_response)

    for i in range(conns):
        _, p = await loop.create_connection(lambda i=i: make(i), host, int(port))
        protos.append(p)
    for _ in range(inflight):
        for p in protos:
            send(p)
    await asyncio.wait_for(done.wait(), seconds + 120)
    dt = time.perf_counter() - t0
    for p in protos:
        assert p.transport is not None
        p.transport.close()
    lat_all.sort()
    lat_ok.sort()
    ok = codes.get("0", 0)
    return {"seconds": round(dt, 3), "answers": len(lat_all), "ok": ok, "ok_per_s": round(ok / dt), "codes": codes,
            "busy": busy, "p50_ms": _pct(lat_all, 0.5), "p99_ms": _pct(lat_all, 0.99), "max_ms": _pct(lat_all, 1.0),
            "ok_p99_ms": _pct(lat_ok, 0.99), "ok_per_half_s": ok_per_half_s}


async def consume(addr: str, topic: str, queues: int, conns: int, expect: int) -> dict[str, object]:
    """Pull every queue from offset 0 until `expect` messages were read; pipelined one pull per queue."""
    host, port = addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    offsets = dict.fromkeys(range(queues), 0)
    got = 0
    nbytes = 0
    done = asyncio.Event()
    protos: list[Conn] = []
    opq = 0
    inflight_q: dict[int, int] = {}
    sent_at: dict[int, float] = {}
    lat: list[float] = []

    def pull(p: Conn, q: int) -> None:
        nonlocal opq
        opq += 1
        inflight_q[opq] = q
        sent_at[opq] = time.perf_counter()
        ext = {"consumerGroup": "bench_cg", "topic": topic, "queueId": str(q), "queueOffset": str(offsets[q]),
               "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "1000",
               "subscription": "*", "subVersion": "0", "maxMsgBytes": "1048576"}
        assert p.transport is not None
        p.transport.write(frame(11, opq, ext))

    def make(idx: int) -> Conn:
        def on_response(h: dict, blen: int) -> None:
            nonlocal got, nbytes
            q = inflight_q.pop(h["opaque"])
            lat.append(time.perf_counter() - sent_at.pop(h["opaque"]))
            ext = h.get("extFields") or {}
            nxt = int(ext.get("nextBeginOffset", offsets[q]))
            if h["code"] == 0:
                got += nxt - offsets[q]
                nbytes += blen
            offsets[q] = nxt
            if got >= expect:
                done.set()
            elif nxt < int(ext.get("maxOffset", 0)) or h["code"] == 0:
                pull(protos[idx], q)
        return Conn(on_response)

    for i in range(conns):
        _, p = await loop.create_connection(lambda i=i: make(i), host, int(port))
        protos.append(p)
    t0 = time.perf_counter()
    for q in range(queues):
        pull(protos[q % conns], q)
    await asyncio.wait_for(done.wait(), 300)
    dt = time.perf_counter() - t0
    for p in protos:
        assert p.transport is not None
        p.transport.close()
    lat.sort()
    return {"msgs": got, "seconds": round(dt, 3), "msg_per_s": round(got / dt), "mb_per_s": round(nbytes / dt / 1e6, 2),
            "pulls": len(lat), "pull_p50_ms": round(lat[len(lat) // 2] * 1000, 3) if lat else None,
            "pull_p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3) if lat else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "consume", "flood"])
    ap.add_argument("--addr", required=True)
    ap.add_argument("--topic", default="BenchTopic")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=64, help="requests in flight per connection")
    ap.add_argument("--total", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--shape", default="json_uniq", help=f"produce: one of {', '.join(SHAPES)} or capture:<client>")
    ap.add_argument("--seconds", type=float, default=5.0, help="flood: how long new sends are issued")
    ap.add_argument("--binary", action="store_true", help="ROCKETMQ binary request headers instead of JSON")
    ap.add_argument("--access-key", default="", help="sign every request with this ACL account")
    ap.add_argument("--secret-key", default="")
    a = ap.parse_args()
    global BINARY, CREDS
    BINARY = a.binary
    CREDS = (a.access_key, a.secret_key) if a.access_key else None
    uvloop.install()
    if a.mode == "flood":
        res = asyncio.run(flood(a.addr, a.topic, a.conns, a.inflight, a.seconds, a.body, a.queues))
    elif a.mode == "produce":
        res = asyncio.run(produce(a.addr, a.topic, a.conns, a.inflight, a.total, a.body, a.queues, a.shape))
    else:
        res = asyncio.run(consume(a.addr, a.topic, a.queues, a.conns, a.total))
    json.dump(res, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
