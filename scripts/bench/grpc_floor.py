#!/usr/bin/env python3
"""Benchmark: what grpcio itself costs per RPC on this machine (the floor under the gRPC endpoint's figures).

A grpc.aio server in its own process with nothing behind its handlers, driven by the compiled load client
(scripts/bench/grpcload, Go: a few µs of CPU per RPC, so the server is what a run measures), its CPU read from
/proc around exactly the measured run. Variants:

  * loop: uvloop or asyncio's default loop;
  * handler: ``raw`` (generic handler, bytes in and out) or ``proto`` (the RocketMQ v2 classes parsed and
    serialised, as a generated stub's handler does: a SendMessageRequest in, a SendMessageResponse out);
  * shape: ``unary`` (one answer per call) or ``stream`` (a server stream of ``--stream-len`` answers per call,
    a ReceiveMessage's shape: status, 32 messages, delivery timestamp);
  * concurrency: channels x calls in flight on each.

Each row: RPC/s, messages/s (stream answers count), call p50/p99, the server's CPU per RPC and per message, the
client's CPU per message, the machine's load average when the row started.

Usage: .venv/bin/python scripts/bench/grpc_floor.py [--rpcs N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from scripts.bench.grpcload_build import grpcload_binary, run_synced  # noqa: E402

PY = sys.executable


def serve(port: int, loop: str, handler: str, stream_len: int, options: list[tuple[str, Any]]) -> None:
    """The server process: the variant's handlers on ``port`` until stdin closes."""
    import grpc
    import grpc.aio

    from brokerd.proxy import pb

    req_cls, resp_cls = pb.request_class("SendMessage"), pb.response_class("SendMessage")
    recv_cls = pb.response_class("ReceiveMessage")

    async def echo(req: Any, ctx: Any) -> Any:
        if handler == "raw":
            return req
        return resp_cls(status=pb.Status(code=20000, message="OK"), entries=[pb.SendResultEntry(
            status=pb.Status(code=20000, message="OK"), message_id=m.system_properties.message_id, offset=1)
            for m in req.messages])

    async def stream(req: Any, ctx: Any) -> Any:
        if handler == "raw":
            for _ in range(stream_len):
                yield req
            return
        msg = req.messages[0] if req.messages else pb.Message()
        yield recv_cls(status=pb.Status(code=20000, message="OK"))
        for _ in range(stream_len - 2):
            yield recv_cls(message=msg)
        yield recv_cls(delivery_timestamp=pb.timestamp(0))

    def ident(b: Any) -> Any:
        return b

    des = ident if handler == "raw" else req_cls.FromString
    ser = ident if handler == "raw" else (lambda m: m.SerializeToString())

    async def main() -> None:
        server = grpc.aio.server(options=options)
        table = {"Echo": grpc.unary_unary_rpc_method_handler(echo, des, ser),
                 "Stream": grpc.unary_stream_rpc_method_handler(stream, des, ser)}
        # the load client's warm-up call, and SendMessage (the send mode's path) answered by ``echo``
        warm = {"QueryAssignment": grpc.unary_unary_rpc_method_handler(_empty, ident, ident),
                "SendMessage": table["Echo"]}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", table),
                                         grpc.method_handlers_generic_handler(pb.SERVICE, warm)))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(0)

    if loop == "uvloop":
        import uvloop
        uvloop.run(main())
    else:
        asyncio.run(main())


async def _empty(req: bytes, ctx: Any) -> bytes:
    return b""


def send_request_bytes(body: int) -> bytes:
    from brokerd.proxy import pb
    req = pb.request_class("SendMessage")(messages=[pb.Message(
        topic=pb.Resource(name="BenchGrpc"), body=b"x" * body,
        system_properties=pb.SystemProperties(message_id="0A0000010000000000000000000000"))])
    return bytes(req.SerializeToString())


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def floor(loop: str, handler: str, shape: str, conns: int, inflight: int, *, rpcs: int, body: int,
          stream_len: int = 34, options: list[tuple[str, Any]] | None = None, procs: int = 1) -> dict[str, Any]:
    """One measured run of ``rpcs`` calls (a stream's answers count as messages); ``procs`` > 1: that many server
    processes on one port (SO_REUSEPORT), their CPU summed."""
    from tests.support import free_port

    port = free_port()
    options = list(options or [])
    if procs > 1:
        options.append(("grpc.so_reuseport", 1))
    servers = [subprocess.Popen([PY, __file__, "--serve", str(port), loop, handler, str(stream_len),
                                 json.dumps(options)], cwd=ROOT, text=True, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE) for _ in range(procs)]
    try:
        for srv in servers:
            assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        load = os.getloadavg()[0]
        # the proto handler parses the request: hand it a real SendMessageRequest (the Go client sends -body bytes
        # of 'x' in raw mode; in send mode it writes the request itself)
        mode = "send" if handler == "proto" and shape == "unary" else shape
        args = ["-mode", mode, "-addr", f"127.0.0.1:{port}", "-total", str(rpcs), "-body", str(body),
                "-conns", str(conns), "-inflight", str(inflight),
                "-method", "/bench.Echo/Echo" if shape == "unary" else "/bench.Echo/Stream"]
        if mode == "send":
            args += ["-topic", "BenchGrpc"]
        res = run_synced(grpcload_binary(), args, lambda: sum(cpu_seconds(p.pid) for p in servers))
        server_cpu = res.pop("server_cpu_s")
        msgs = max(1, res["msgs"])
        return {"loop": loop, "handler": handler, "shape": shape, "procs": procs, "conns": conns, "inflight": inflight,
                "options": dict(options), "load1": round(load, 2), "rpc_per_s": round(res["rpc_per_s"]),
                "msg_per_s": round(res["msg_per_s"]), "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"],
                "server_cpu_us_per_rpc": round(server_cpu * 1e6 / max(1, res["rpcs"]), 1),
                "server_cpu_us_per_msg": round(server_cpu * 1e6 / msgs, 2),
                "client_cpu_us_per_msg": round(res["client_cpu_us_per_msg"], 2), "errors": res["errors"]}
    finally:
        for srv in servers:
            if srv.stdin is not None:
                srv.stdin.close()
        for srv in servers:
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rpcs", type=int, default=20_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--stream-len", type=int, default=34)
    ap.add_argument("--quick", action="store_true", help="uvloop + raw unary at one concurrency only")
    ap.add_argument("--only", help="rows whose description contains this text (e.g. 'procs')")
    ap.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(int(a.serve[0]), a.serve[1], a.serve[2], int(a.serve[3]), [tuple(o) for o in json.loads(a.serve[4])])
        return 0
    rows: list[dict[str, Any]] = []
    grpcload_binary()
    plan: list[tuple[Any, ...]] = [("uvloop", "raw", "unary", 4, 32, [])]
    if not a.quick:
        for conns, inflight in ((1, 1), (1, 8), (4, 32), (16, 16)):
            for loop in ("uvloop", "asyncio"):
                plan.append((loop, "raw", "unary", conns, inflight, []))
        for handler in ("raw", "proto"):
            plan.append(("uvloop", handler, "unary", 4, 32, []))
            plan.append(("uvloop", handler, "stream", 4, 8, []))
        plan.append(("uvloop", "raw", "stream", 1, 1, []))
        plan.append(("uvloop", "raw", "unary", 4, 32, [("grpc.optimization_target", "throughput")]))
        plan.append(("uvloop", "raw", "unary", 4, 32, [("grpc.max_concurrent_streams", 1000)]))
        plan.append(("uvloop", "raw", "unary", 4, 32, [("grpc.http2.bdp_probe", 0)]))
        plan.append(("uvloop", "raw", "unary", 16, 8, [], 2))
    for p in plan[1:] if not a.quick else plan:
        if a.only and a.only not in repr(p) + (" procs" if len(p) > 6 else ""):
            continue
        loop, handler, shape, conns, inflight, options, *procs = p
        rpcs = a.rpcs if shape == "unary" else max(200, a.rpcs // a.stream_len * 2)
        rows.append(floor(loop, handler, shape, conns, inflight, rpcs=rpcs, body=a.body, stream_len=a.stream_len,
                          options=options, procs=procs[0] if procs else 1))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"rows": rows, "config": {"rpcs": a.rpcs, "body": a.body, "stream_len": a.stream_len,
                                               "cpus": os.cpu_count(), "machine": platform.machine(),
                                               "python": platform.python_version(),
                                               "date": time.strftime("%Y-%m-%d %H:%M")}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
