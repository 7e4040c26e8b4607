"""A fault-injecting TCP proxy (asyncio, on its own thread): one listening port per directed link, forwarding
to the real port. Faults per link: drop either direction (bytes discarded silently: a partition, also
one-way), refuse (new connections closed, open ones reset), delay (each chunk held ``delay ± jitter`` ms,
order kept) and loss (a lost TCP segment costs the sender a retransmission timeout: a chunk is held an extra
200-400 ms with probability ``loss``). A connection that had bytes discarded is reset when the link heals
(its stream has a hole, as after a TCP timeout)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LinkFaults:
    drop_up: bool = False  # src -> dst bytes discarded
    drop_down: bool = False  # dst -> src bytes discarded
    refuse: bool = False
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0

    def clear(self) -> None:
        self.drop_up = self.drop_down = self.refuse = False
        self.delay_ms = self.jitter_ms = self.loss = 0.0


@dataclass(eq=False)
class _Conn:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    tainted: bool = False

    def abort(self) -> None:
        for w in self.writers:
            w.transport.abort()


class Link:
    """src -> dst through 127.0.0.1:``listen_port`` to ``target``."""

    def __init__(self, src: str, dst: str, listen_port: int, target: tuple[str, int], seed: int) -> None:
        self.src, self.dst, self.listen_port, self.target = src, dst, listen_port, target
        self.faults = LinkFaults()
        self.rng = random.Random(seed)
        self.conns: set[_Conn] = set()
        self.server: asyncio.Server | None = None
        self.bytes = [0, 0]
        self.dropped = [0, 0]

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.faults.refuse:
            writer.transport.abort()
            return
        try:
            ur, uw = await asyncio.wait_for(asyncio.open_connection(*self.target), 3.0)
        except (TimeoutError, OSError):
            writer.transport.abort()
            return
        conn = _Conn([writer, uw])
        self.conns.add(conn)
        try:
            await asyncio.gather(self._pump(reader, uw, conn, 0), self._pump(ur, writer, conn, 1))
        finally:
            self.conns.discard(conn)
            conn.abort()

    def _hold_s(self) -> float:
        f = self.faults
        d = max(0.0, f.delay_ms + self.rng.uniform(-f.jitter_ms, f.jitter_ms)) if f.delay_ms or f.jitter_ms else 0.0
        if f.loss and self.rng.random() < f.loss:
            d += self.rng.uniform(200, 400)
        return d / 1000

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn, way: int) -> None:
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer))
        last = 0.0
        try:
            while data := await reader.read(65536):
                if self.faults.drop_up if way == 0 else self.faults.drop_down:
                    conn.tainted = True
                    self.dropped[way] += len(data)
                    continue
                self.bytes[way] += len(data)
                last = max(last, time.monotonic() + self._hold_s())
                queue.put_nowait((last, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            queue.put_nowait(None)
            await sender

    @staticmethod
    async def _send(queue: asyncio.Queue[tuple[float, bytes] | None], writer: asyncio.StreamWriter) -> None:
        while (item := await queue.get()) is not None:
            at, data = item
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # sleep-ok: the injected delay itself
            try:
                writer.write(data)
                await writer.drain()
            except OSError:
                return
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass

    def heal(self) -> None:
        self.faults.clear()
        for c in [c for c in self.conns if c.tainted]:
            c.abort()

    def refuse_now(self) -> None:
        self.faults.refuse = True
        for c in list(self.conns):
            c.abort()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in list(self.conns):
            c.abort()


class ProxyHub:
    """All links of a run, served by one event loop on a daemon thread."""

    def __init__(self, seed: int = 0) -> None:
        self.links: dict[tuple[str, str, int], Link] = {}
        self.seed = seed
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="chaos-proxy", daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def _call(self, fn: Any) -> None:
        async def go() -> None:
            fn()

        self._run(go())

    def add(self, src: str, dst: str, listen_port: int, target: tuple[str, int]) -> Link:
        link = Link(src, dst, listen_port, target, zlib.crc32(f"{self.seed}:{src}:{dst}:{listen_port}".encode()))
        self._run(link.start())
        self.links[(src, dst, listen_port)] = link
        return link

    def between(self, a: str, b: str) -> list[Link]:
        return [x for x in self.links.values() if (x.src, x.dst) == (a, b)]

    def touching(self, name: str) -> list[Link]:
        return [x for x in self.links.values() if name in (x.src, x.dst)]

    def set_drop(self, src: str, dst: str) -> None:
        """Bytes from ``src`` to ``dst`` are discarded (both on src's connections to dst and on dst's to src)."""
        for x in self.between(src, dst):
            x.faults.drop_up = True
        for x in self.between(dst, src):
            x.faults.drop_down = True

    def refuse(self, links: list[Link]) -> None:
        def go() -> None:
            for x in links:
                x.refuse_now()

        self._call(go)

    def heal(self) -> None:
        def go() -> None:
            for x in self.links.values():
                x.heal()

        self._call(go)

    def close(self) -> None:
        async def go() -> None:
            for x in self.links.values():
                await x.close()

        try:
            self._run(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
