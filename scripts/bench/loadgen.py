"""A pipelined asyncio load generator speaking RocketMQ remoting: any send shape of ``shapes.py`` (signed when
given an ACL account) over several connections with many requests in flight, and PULL_MESSAGE for consume
throughput. The Python reference of the compiled generator (gen.c, which is several times cheaper per send and
the one the latency, overload and shape benchmarks use); the ACL, HA and tiered benchmarks use this one.

Runs in its own process (python -m scripts.bench.loadgen ...) and prints one JSON object."""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import time

import orjson
import uvloop

from scripts.bench import shapes

_PREFIX = struct.Struct(">ii")


BINARY = False  # --binary: ROCKETMQ binary headers (a Java client with -Drocketmq.serialize.type=ROCKETMQ)
CREDS: tuple[str, str] | None = None  # --access-key/--secret-key: requests signed as RocketMQ's ACL 1.0 client


def frame(code: int, opaque: int, ext: dict[str, str], body: bytes = b"", binary: bool | None = None) -> bytes:
    """One request frame (binary with --binary, signed with --access-key)."""
    return shapes.frame(code, opaque, ext, body, BINARY if binary is None else binary, CREDS)


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


async def produce(addr: str, topic: str, conns: int, inflight: int, total: int, body_size: int,
                  queues: int, shape: str = "json_uniq") -> dict[str, object]:
    addrs = addr.split(",")
    loop = asyncio.get_running_loop()
    build, per_frame, _ = shapes.builder(shape, topic, queues, body_size, BINARY, CREDS)
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
        data = build(op, op, f"{op:012X}", b"xxxxxxxx")
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
    ap.add_argument("mode", choices=["produce", "consume"])
    ap.add_argument("--addr", required=True)
    ap.add_argument("--topic", default="BenchTopic")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=64, help="requests in flight per connection")
    ap.add_argument("--total", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--shape", default="json_uniq", help=f"produce: one of {', '.join(shapes.SHAPES)} or capture:<client>")
    ap.add_argument("--binary", action="store_true", help="ROCKETMQ binary request headers instead of JSON")
    ap.add_argument("--access-key", default="", help="sign every request with this ACL account")
    ap.add_argument("--secret-key", default="")
    a = ap.parse_args()
    global BINARY, CREDS
    BINARY = a.binary
    CREDS = (a.access_key, a.secret_key) if a.access_key else None
    uvloop.install()
    if a.mode == "produce":
        res = asyncio.run(produce(a.addr, a.topic, a.conns, a.inflight, a.total, a.body, a.queues, a.shape))
    else:
        res = asyncio.run(consume(a.addr, a.topic, a.queues, a.conns, a.total))
    json.dump(res, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
