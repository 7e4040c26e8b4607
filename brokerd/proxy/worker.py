"""One gRPC worker process (``python -m brokerd.proxy.worker CONFIG_JSON``), started by the container's
``WorkerPool`` (workers.py): the same ``GrpcEndpoint`` on the container's gRPC port (SO_REUSEPORT: the kernel
spreads client connections over the container and its workers), in cluster mode: it reaches every broker, the
container's own included, over TCP remoting through the name servers it is given, as RocketMQ's cluster-mode proxy
does. It has its own interpreter, loop and grpcio, so the endpoint's work spreads over cores.

Protocol with the pool, one JSON object a line: on stdout ``{"ready": port}`` once listening, then
``{"stats": ..., "clients": [...]}`` every ``REPORT_S`` and once more when stopping; logs go to stderr. It stops
(its grpc server drained for ``grace`` seconds) when its stdin closes (the container stopped, or died) or on
SIGTERM / SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import structlog
import uvloop

from brokerd.logging_setup import configure
from brokerd.proxy.config import GrpcProxyConfig, config_from_wire
from brokerd.proxy.service import GrpcEndpoint
from brokerd.remoting.connection import Dispatcher

log = structlog.get_logger(component="grpc_worker")

REPORT_S = 1.0


class NoLocalTargets:
    """A worker has no broker in its process: every address is reached over TCP."""

    def local_dispatcher(self, addr: str) -> Dispatcher | None:
        return None


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def _stdin_closed() -> None:
    """Returns when stdin reaches end of file (the pool closed it, or the container is gone)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass


async def serve(cfg: GrpcProxyConfig, namesrv: list[str], index: int, grace: float) -> int:
    ep = GrpcEndpoint(cfg, NoLocalTargets(), lambda: namesrv)
    try:
        await ep.start()
    except (OSError, RuntimeError) as e:
        log.error("grpc_worker_start_failed", worker=index, port=cfg.listen_port, error=str(e))
        return 1
    _emit({"ready": ep.port})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    closed = asyncio.ensure_future(_stdin_closed())
    closed.add_done_callback(lambda _f: stop.set())
    while not stop.is_set():
        _emit({"stats": ep.core.stats.to_wire(), "clients": ep.snapshot()["clients"]})
        try:
            await asyncio.wait_for(stop.wait(), REPORT_S)
        except TimeoutError:
            pass
    await ep.stop(grace)
    _emit({"stats": ep.core.stats.to_wire(), "clients": []})
    closed.cancel()
    log.info("grpc_worker_stopped", worker=index)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    configure(os.environ.get("LOG_LEVEL", "INFO"))
    cfg = config_from_wire(spec["config"])
    return uvloop.run(serve(cfg, [str(a) for a in spec["namesrv"]], int(spec["index"]), float(spec["grace"])))


if __name__ == "__main__":
    sys.exit(main())
