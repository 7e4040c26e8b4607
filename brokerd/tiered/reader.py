"""Reads from the tier: the store's ``TierView``. Chunks are fetched whole into a bounded LRU cache (the read-ahead
unit), verified against their CRC in the manifest; after a fetch the next chunk(s) are fetched in the background,
so a consumer reading old data sequentially finds them cached.

All state lives on the event loop thread; backend calls run in a worker thread (``fetch``) or, for the store's
blocking reads, in the caller (``fetch_blocking``).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

import structlog

from brokerd.store.tier import TierMiss
from brokerd.tiered.backend import TierBackend
from brokerd.tiered.manifest import Chunk, Manifest


class TierReader:
    def __init__(self, backend: TierBackend, *, cache_bytes: int, read_ahead: int, log: Any = None) -> None:
        self.backend = backend
        self.manifest = Manifest()
        self.cache_bytes = cache_bytes
        self.read_ahead = read_ahead
        self.log = log if log is not None else structlog.get_logger("tier_reader")
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cached = 0
        self._inflight: dict[int, asyncio.Future[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.hits = self.misses = self.fetches = self.fetch_errors = 0
        self.fetched_bytes = 0
        self.fetch_ms_total = 0.0

    # ------------------------------------------------------------------ TierView

    @property
    def min_offset(self) -> int:
        return self.manifest.min_offset

    @property
    def end(self) -> int:
        return self.manifest.end

    def read(self, phys: int, size: int) -> bytes | None:
        c = self.manifest.chunk_at(phys)
        if c is None or size <= 0 or phys + size > c.end:
            return None
        data = self._cache.get(c.start)
        if data is None or len(data) != c.end - c.start:
            self.misses += 1
            raise TierMiss(c.start, lambda: self.fetch(c), lambda: self.fetch_blocking(c))
        self.hits += 1
        self._cache.move_to_end(c.start)
        pos = phys - c.start
        return data[pos : pos + size]

    # ------------------------------------------------------------------ state

    def update(self, m: Manifest) -> None:
        """A newer manifest (uploads, retention): drop cached chunks it no longer holds."""
        if m.version < self.manifest.version:
            return
        self.manifest = m
        for start in [s for s in self._cache if m.chunk_at(s) is None]:
            self._cached -= len(self._cache.pop(start))

    # ------------------------------------------------------------------ fetching

    def _get(self, c: Chunk) -> bytes:
        t0 = time.perf_counter()
        data = self.manifest.check(c, self.backend.get(c.name))
        self.fetch_ms_total += (time.perf_counter() - t0) * 1000
        return data

    def _put(self, c: Chunk, data: bytes) -> None:
        self.fetches += 1
        self.fetched_bytes += len(data)
        if c.start in self._cache:
            return
        self._cache[c.start] = data
        self._cached += len(data)
        while self._cached > self.cache_bytes and len(self._cache) > 2:
            _, old = self._cache.popitem(last=False)
            self._cached -= len(old)

    def fetch_blocking(self, c: Chunk) -> None:
        self._put(c, self._get(c))

    async def fetch(self, c: Chunk, *, ahead: bool = True) -> None:
        fut = self._inflight.get(c.start)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[c.start] = fut
            try:
                self._put(c, await asyncio.to_thread(self._get, c))
                fut.set_result(None)
            except Exception as exc:  # backend errors reach every waiter of this chunk
                self.fetch_errors += 1
                self.log.warning("tier_fetch_failed", chunk=c.name, error=str(exc))
                fut.set_exception(exc)
                fut.exception()  # retrieved: waiters re-raise it
            finally:
                del self._inflight[c.start]
            if ahead:
                self._read_ahead(c)
        await fut

    def _read_ahead(self, c: Chunk) -> None:
        nxt = c
        for _ in range(self.read_ahead):
            nxt_c = self.manifest.chunk_at(nxt.end)
            if nxt_c is None:
                return
            nxt = nxt_c
            if nxt.start in self._cache or nxt.start in self._inflight:
                continue
            task = asyncio.get_running_loop().create_task(self._quiet_fetch(nxt))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _quiet_fetch(self, c: Chunk) -> None:
        try:
            await self.fetch(c, ahead=False)
        except Exception:  # noqa: BLE001 - read-ahead is a hint; the reader's own fetch reports errors
            pass

    async def close(self) -> None:
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {"hits": self.hits, "misses": self.misses, "fetches": self.fetches, "fetchErrors": self.fetch_errors,
                "fetchedBytes": self.fetched_bytes, "cachedBytes": self._cached,
                "fetchMsAvg": round(self.fetch_ms_total / self.fetches, 2) if self.fetches else 0.0}  # fmt: skip
