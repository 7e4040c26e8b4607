"""The container's gRPC worker processes (``grpcWorkers``): ``count`` copies of the endpoint (worker.py) on the
container's gRPC port beside its own, started once that one is listening, restarted when one exits (backoff 1 s
doubling to 30 s), stopped with the container. Each reports its counters and clients once a second on a pipe;
the container's ``/metrics`` and dashboard add them to its own (a worker that exits keeps its last counters in the
totals, so they never go back).

Why processes: one interpreter serves grpcio's per-call work on one core at a time (its completion-queue thread
hands every event to the loop thread); workers with their own interpreters take the calls of the connections the
kernel gives them (SO_REUSEPORT) on the other cores. A client's calls share one HTTP/2 connection, so its session
(settings, Telemetry stream, transactions, renewals) lives in one process, as it would in one RocketMQ proxy of a
cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import structlog

from brokerd.proxy.config import GrpcProxyConfig
from brokerd.proxy.stats import GrpcStats

log = structlog.get_logger(component="grpc_proxy")

START_TIMEOUT_S = 30.0
MAX_BACKOFF_S = 30.0
LINE_LIMIT = 16 << 20  # a report line: every client of the worker


def config_to_wire(cfg: GrpcProxyConfig, namesrv: list[str], index: int, grace: float) -> str:
    """A worker's command-line argument (worker.py reads it back with ``config_from_wire``)."""
    return json.dumps({"config": dataclasses.asdict(cfg), "namesrv": namesrv, "index": index, "grace": grace})


class WorkerStartError(RuntimeError):
    """A worker did not start listening (its exit code and the reason are in the message and its log)."""


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: asyncio.subprocess.Process | None = None
        self.stats = GrpcStats()
        self.clients: list[dict[str, Any]] = []
        self.started = 0
        self.first_ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()


class WorkerPool:
    def __init__(self, cfg: GrpcProxyConfig, namesrv_addrs: Callable[[], list[str]], count: int,
                 grace: float = 2.0) -> None:
        self.cfg = cfg
        self.namesrv_addrs = namesrv_addrs
        self.count = count
        self.grace = grace
        self._workers: list[_Worker] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._retired = GrpcStats()  # the counters of worker processes that exited
        self._stopping = False

    async def start(self, port: int) -> None:
        """Start the workers on ``port`` (where the container's endpoint listens) and wait until each listens."""
        cfg = dataclasses.replace(self.cfg, listen_port=port, workers=0, reuse_port=True)
        for i in range(self.count):
            w = _Worker(i + 1)
            self._workers.append(w)
            self._tasks.append(asyncio.ensure_future(self._supervise(w, cfg)))
        try:
            ports = await asyncio.wait_for(asyncio.gather(*(w.first_ready for w in self._workers)), START_TIMEOUT_S)
        except TimeoutError:
            await self.stop()
            raise WorkerStartError(f"gRPC workers did not listen on port {port} within {START_TIMEOUT_S:.0f}s") from None
        except WorkerStartError:
            await self.stop()
            raise
        log.info("grpc_workers_listening", port=port, workers=len(ports))

    async def _supervise(self, w: _Worker, cfg: GrpcProxyConfig) -> None:
        backoff = 1.0
        while not self._stopping:
            rc = await self._run_once(w, cfg)
            if not w.first_ready.done():
                w.first_ready.set_exception(WorkerStartError(f"gRPC worker {w.index} exited with code {rc} before "
                                                             f"listening on port {cfg.listen_port} (see its log)"))
                return
            if self._stopping:
                return
            log.warning("grpc_worker_exited", worker=w.index, code=rc, restart_in_s=backoff)
            await asyncio.sleep(backoff)  # sleep-ok: the restart backoff of a crashing worker
            backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _run_once(self, w: _Worker, cfg: GrpcProxyConfig) -> int:
        spec = config_to_wire(cfg, self.namesrv_addrs(), w.index, self.grace)
        proc = w.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "brokerd.proxy.worker", spec, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT)
        w.started += 1
        assert proc.stdout is not None
        try:
            async for line in proc.stdout:
                self._report(w, line)
        finally:
            rc = await proc.wait()
            self._retired.add(w.stats)
            w.stats, w.clients = GrpcStats(), []
        return rc

    def _report(self, w: _Worker, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            log.warning("grpc_worker_bad_report", worker=w.index, line=line[:200])
            return
        if "ready" in msg and not w.first_ready.done():
            w.first_ready.set_result(int(msg["ready"]))
        if isinstance(msg.get("stats"), dict):
            w.stats = GrpcStats.from_wire(msg["stats"])
        if isinstance(msg.get("clients"), list):
            w.clients = [{**c, "worker": w.index} for c in msg["clients"] if isinstance(c, dict)]

    async def stop(self) -> None:
        """Close the workers' stdin (they drain and exit), kill what is left after the grace period."""
        self._stopping = True
        for w in self._workers:
            if w.proc is not None and w.proc.stdin is not None and w.proc.returncode is None:
                w.proc.stdin.close()
        if self._tasks:
            done, pending = await asyncio.wait(self._tasks, timeout=self.grace + 5)
            for w in self._workers:
                if w.proc is not None and w.proc.returncode is None:
                    w.proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=5)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    log.warning("grpc_worker_supervisor_failed", error=repr(t.exception()))
        self._tasks.clear()

    # -- what the container shows -------------------------------------------------------------------------------

    def stats(self) -> list[GrpcStats]:
        return [self._retired, *(w.stats for w in self._workers)]

    def clients(self) -> list[dict[str, Any]]:
        return [c for w in self._workers for c in w.clients]

    def pids(self) -> list[int]:
        """The running workers' process ids."""
        return [w.proc.pid for w in self._workers if w.proc is not None and w.proc.returncode is None]
