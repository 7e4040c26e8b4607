"""Tiered storage of one broker under HA (docs/tiered.md): the asyncio driver around the pure manifest logic.

Master: claims the tier at promotion (a manifest version with its epoch, after checking the tier against its own
log and epochs), then uploads chunks from the breakpoint (``manifest.end``), never past the confirm offset, each
chunk object before the manifest version that lists it; after each version it writes the manifest on
``RMQ_SYS_TIERED_SYNC`` so slaves know the tier's progress from their replicated log. A version it cannot create
because a higher epoch wrote one means it was deposed: uploading stops. Slave: uploads nothing, follows the
replicated manifest records (its reads and local expiry use them); an empty slave first fetches the tier's chunks
(from the tier, not from its master) and then replicates only the rest.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Final, Protocol

import msgpack
import structlog

from brokerd.message import MessageInner, decode_records
from brokerd.store.epoch import EpochEntry
from brokerd.store.raw_scan import Scanned
from brokerd.store.results import GetMessageResult, PutMessageResult, PutStatus
from brokerd.store.tier import TierView
from brokerd.tiered.archive import latest_manifest, write_locator
from brokerd.tiered.backend import TierBackend
from brokerd.tiered.config import TierConfig
from brokerd.tiered.manifest import (
    LOG_PREFIX,
    MANIFEST_PREFIX,
    QI_PREFIX,
    Chunk,
    Fenced,
    Manifest,
    crc_of,
    manifest_name,
    plan_chunk,
    verify_against_log,
    version_of,
)
from brokerd.tiered.reader import TierReader

TIER_SYNC_TOPIC: Final = "RMQ_SYS_TIERED_SYNC"


class TieredStore(Protocol):
    """What the tiered service uses of ``brokerd.store.message_store.MessageStore``."""

    @property
    def root(self) -> Path: ...

    @property
    def confirm_offset(self) -> int: ...

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def min_phy_offset(self) -> int: ...

    def segment_bounds(self) -> list[tuple[int, int]]: ...

    def records_end(self, data: bytes, start: int) -> tuple[int, int]: ...

    def read_raw(self, start: int, end: int) -> bytes: ...

    def scan_for_dispatch(self, data: bytes | memoryview, start: int) -> list[Scanned]: ...

    def index_tiered(self, records: list[Scanned]) -> None: ...

    def epoch_entries(self) -> list[EpochEntry]: ...

    def append_epoch(self, epoch: int, start_offset: int) -> bool: ...

    def append_raw(self, offset: int, data: bytes | memoryview) -> int: ...

    def append_message(self, msg: MessageInner) -> PutMessageResult: ...

    def attach_tier(self, tier: TierView | None) -> None: ...

    def correct_min_offsets(self) -> tuple[int, int]: ...

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_msg_bytes: int = ...) -> GetMessageResult: ...  # fmt: skip

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def add_dispatch_listener(self, cb: Any) -> None: ...

    def remove_dispatch_listener(self, cb: Any) -> None: ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TieredService:
    def __init__(self, cfg: TierConfig, store: TieredStore, backend: TierBackend, host: tuple[str, int],
                 log: Any = None) -> None:  # fmt: skip
        self.cfg = cfg
        self.store = store
        self.backend = backend
        self.host = host
        self.log = (log if log is not None else structlog.get_logger("tiered")).bind(component="tiered")
        self.reader = TierReader(backend, cache_bytes=cfg.cache_bytes, read_ahead=cfg.read_ahead, log=self.log)
        store.attach_tier(self.reader)  # before any expiry: nothing leaves the disk the tier does not hold
        self._locate()
        self.role = "NONE"
        self.epoch = 0
        self.broker_id = -1
        self.fenced: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._step: asyncio.Task[bool] | None = None
        self.uploaded_chunks = self.uploaded_bytes = 0
        self.upload_seconds = 0.0
        self.records_applied = 0
        self.bootstrapped_bytes = 0
        self.bootstrap_seconds = 0.0
        self.trimmed_chunks = 0
        self.last_error: str | None = None

    @property
    def manifest(self) -> Manifest:
        return self.reader.manifest

    def _locate(self) -> None:
        """The store directory names its tier (``archive.LOCATOR``): tools reading the store alone find it."""
        try:
            write_locator(self.store.root, self.backend)
        except OSError as exc:  # the store will report its own trouble; tools can still be told where the tier is
            self.log.warning("tier_locator_not_written", error=str(exc))

    # ------------------------------------------------------------------ roles

    def on_master(self, epoch: int, broker_id: int) -> None:
        self._stop_following()
        self._cancel()
        self.role, self.epoch, self.broker_id, self.fenced = "MASTER", epoch, broker_id, None
        self._task = asyncio.get_running_loop().create_task(self._master_loop())

    def on_slave(self) -> None:
        """Stop uploading at once (a deposed master must not write the tier); follow the replicated manifest."""
        self._cancel()
        if self.role != "SLAVE":
            self.role = "SLAVE"
            self.store.add_dispatch_listener(self._on_dispatched)
        self._apply_latest_record()

    async def stop(self) -> None:
        self._stop_following()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._step is not None:
            await asyncio.gather(self._step, return_exceptions=True)
        self.role = "NONE"
        await self.reader.close()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _stop_following(self) -> None:
        if self.role == "SLAVE":
            self.store.remove_dispatch_listener(self._on_dispatched)

    # ------------------------------------------------------------------ manifest chain

    def _latest(self) -> Manifest:
        """The newest manifest version in the tier (blocking; run in a thread)."""
        return latest_manifest(self.backend, self._unreadable)

    def _unreadable(self, name: str, exc: Exception) -> None:
        self.log.warning("tier_manifest_unreadable", name=name, error=str(exc))

    def _commit(self, m: Manifest) -> bool:
        return self.backend.create_exclusive(manifest_name(m.version), m.encode())

    def _log_epochs(self) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.store.epoch_entries()]

    async def _claim(self) -> bool:
        """Take the tier for this epoch: read, verify against the log, write a version with our epoch."""
        while True:
            latest = await asyncio.to_thread(self._latest)
            self.reader.update(latest)
            why = verify_against_log(latest, self._log_epochs(), self.store.min_phy_offset, self.store.max_phy_offset,
                                     self._own_crc(latest))  # fmt: skip
            if why is not None:
                self._fence(f"tier does not match this log: {why}")
                return False
            try:
                claim = latest.claimed(self.epoch, self.broker_id, self._log_epochs(), _now_ms())
            except Fenced as exc:
                self._fence(str(exc))
                return False
            if await asyncio.to_thread(self._commit, claim):
                self._adopt(claim)
                await asyncio.to_thread(self._drop_orphans, claim)
                self.log.info("tier_claimed", version=claim.version, epoch=self.epoch, resume_at=claim.end,
                              chunks=len(claim.chunks))  # fmt: skip
                return True

    def _own_crc(self, m: Manifest) -> int | None:
        """CRC of this log's bytes where the tier's last chunk is (None: not held locally)."""
        if not m.chunks:
            return None
        c = m.chunks[-1]
        if c.start < self.store.min_phy_offset or c.end > self.store.max_phy_offset:
            return None
        try:
            return crc_of(self.store.read_raw(c.start, c.end))
        except ValueError:  # not inside one written segment
            return None

    def _drop_orphans(self, m: Manifest) -> None:
        """Chunk objects no version names (uploads cut short by a failover, written by a master deposed meanwhile,
        or left by a retention pass cut short) are deleted when a master claims the tier."""
        named = {c.name for c in m.chunks} | {c.index_name for c in m.chunks}
        for name in self.backend.list(LOG_PREFIX) + self.backend.list(QI_PREFIX):
            if name not in named:
                self.backend.delete(name)

    def _fence(self, why: str) -> None:
        self.fenced = why
        self.log.warning("tier_upload_fenced", reason=why, epoch=self.epoch)

    def _adopt(self, m: Manifest) -> None:
        """A version is committed: readers see it, and slaves learn it from the replicated record."""
        self.reader.update(m)
        body = m.encode()
        msg = MessageInner(topic=TIER_SYNC_TOPIC, queue_id=0, body=body, flag=0, properties={}, sys_flag=0,
                           born_timestamp=_now_ms(), born_host=self.host, store_host=self.host)  # fmt: skip
        res = self.store.append_message(msg)
        if res.status is not PutStatus.PUT_OK:
            self.log.warning("tier_record_not_written", status=res.status.name, version=m.version)

    # ------------------------------------------------------------------ master: uploads

    async def _master_loop(self) -> None:
        try:
            if not await self._claim():
                return
            while self.role == "MASTER":
                try:
                    # shielded: a demotion or stop never cuts a chunk's commit in two (stop waits for it)
                    self._step = asyncio.get_running_loop().create_task(self._upload_and_trim())
                    progressed = await asyncio.shield(self._step)
                except Fenced as exc:
                    self._fence(str(exc))
                    return
                except (OSError, ValueError) as exc:  # backend trouble: retry at the next interval
                    self.last_error = str(exc)
                    self.log.warning("tier_upload_failed", error=str(exc))
                    progressed = False
                if not progressed:
                    await asyncio.sleep(self.cfg.upload_interval_ms / 1000)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must not take the broker down; it is logged
            self.last_error = repr(exc)
            self.log.error("tier_master_loop_crashed", error=repr(exc))

    def _next_chunk_range(self) -> tuple[int, int] | None:
        """[start, limit) of the log the next chunk is cut from (see ``plan_chunk``), or None."""
        m = self.manifest
        segments = self.store.segment_bounds()
        if not segments:
            return None
        start = m.end if m.chunks else segments[0][0]
        if start < segments[0][0]:
            self._fence(f"tier ends at {start} but the local log starts at {segments[0][0]}: a gap")
            self.role = "FENCED"
            return None
        confirm = min(self.store.confirm_offset, self.store.max_phy_offset)
        limit = plan_chunk(start, confirm, self.cfg.segment_size, self.cfg.chunk_bytes)
        return (start, limit) if limit else None

    def _cut_and_put(self, start: int, data: bytes) -> Chunk:
        """In a worker thread: the chunk ends at the last complete record (or the segment's blank end), its CRC,
        and the object written."""
        end, ts = self.store.records_end(data, start)
        if end <= start:
            raise ValueError(f"no complete record in [{start}, {start + len(data)})")
        body = memoryview(data)[: end - start]
        chunk = Chunk(start, end, crc_of(body), ts, self.epoch)
        entries = self.store.scan_for_dispatch(body, start)
        self.backend.put(chunk.index_name, msgpack.packb([list(e) for e in entries], use_bin_type=True))
        self.backend.put(chunk.name, body)
        return chunk

    async def _upload_next(self) -> bool:
        nxt = self._next_chunk_range()
        if nxt is None:
            return False
        start, limit = nxt
        data = self.store.read_raw(start, limit)
        t0 = time.perf_counter()
        chunk = await asyncio.to_thread(self._cut_and_put, start, data)
        if self.role != "MASTER":
            return False
        m = self.manifest.appended(chunk, self.epoch, self._log_epochs(), _now_ms())
        if not await asyncio.to_thread(self._commit, m):
            # someone wrote this version: a higher epoch deposed us, or a deposed master's last write slipped in
            latest = await asyncio.to_thread(self._latest)
            if latest.epoch > self.epoch:
                raise Fenced(latest.epoch, self.epoch)
            self.reader.update(latest)
            return True
        self.upload_seconds += time.perf_counter() - t0
        self.uploaded_chunks += 1
        self.uploaded_bytes += chunk.end - chunk.start
        self._adopt(m)
        return True

    async def _upload_and_trim(self) -> bool:
        progressed = await self._upload_next()
        await self._trim()
        return progressed

    async def _trim(self) -> None:
        """The tier's own retention: chunks older than ``reserved_hours`` leave the tier (whole, oldest first)."""
        m = self.manifest
        cutoff = _now_ms() - int(self.cfg.reserved_hours * 3_600_000)
        old = [c for c in m.chunks[:-1] if 0 < c.last_store_ts < cutoff]
        if old and old[0] is m.chunks[0]:
            keep_from = old[-1].end
            trimmed = m.trimmed(keep_from, self.epoch, _now_ms())
            if not await asyncio.to_thread(self._commit, trimmed):
                return
            self._adopt(trimmed)
            self.store.correct_min_offsets()
            for c in old:
                await asyncio.to_thread(self.backend.delete, c.name)
                await asyncio.to_thread(self.backend.delete, c.index_name)
            self.trimmed_chunks += len(old)
            self.log.info("tier_chunks_expired", chunks=len(old), min_offset=trimmed.min_offset)
        await asyncio.to_thread(self._gc_versions, m.version)

    def _gc_versions(self, current: int) -> None:
        for name in self.backend.list(MANIFEST_PREFIX):
            if version_of(name) < current - self.cfg.keep_manifest_versions:
                self.backend.delete(name)

    # ------------------------------------------------------------------ slave: following

    def _on_dispatched(self, topic: str, queue_id: int, queue_offset: int, tags: int) -> None:
        if topic == TIER_SYNC_TOPIC and self.role == "SLAVE":
            self._apply_latest_record()

    def _apply_latest_record(self) -> None:
        last = self.store.max_offset_in_queue(TIER_SYNC_TOPIC, 0) - 1
        if last < 0:
            return
        res = self.store.get_message(TIER_SYNC_TOPIC, 0, last, 1, 16 * 1024 * 1024)
        for buf in res.buffers:
            for msg in decode_records(bytes(buf)):
                try:
                    m = Manifest.decode(msg.body)
                except ValueError as exc:
                    self.log.error("tier_record_unreadable", error=str(exc))
                    continue
                if m.version > self.manifest.version:
                    self.reader.update(m)
                    self.records_applied += 1
                    self.store.correct_min_offsets()

    # ------------------------------------------------------------------ empty slave bootstrap

    async def bootstrap_from_tier_if_empty(self) -> int:
        """An empty store takes what the tier holds before replication starts; returns the log bytes fetched.

        Chunks within local retention (``local_reserved_hours``, from a segment start; at least the tier's last
        segment) are fetched and written as replicated log; for older chunks only their queue index is fetched, so
        consume queues and the key index reach back to the tier's start and reads there go to the tier. The tier
        never holds anything past a confirm offset, so the master's log agrees with all of it."""
        if not self.cfg.bootstrap_from_tier or self.store.max_phy_offset > 0 or self.store.segment_bounds():
            return 0
        m = await asyncio.to_thread(self._latest)
        aligned = [i for i, c in enumerate(m.chunks) if c.start % self.cfg.segment_size == 0]
        if not aligned:
            return 0
        cutoff = _now_ms() - int(self.cfg.local_reserved_hours * 3_600_000)
        first = next((i for i in aligned if m.chunks[i].last_store_ts >= cutoff), aligned[-1])
        t0 = time.perf_counter()
        self.reader.update(m)
        for c in m.chunks[:first]:  # below local retention: entries only, the bytes stay in the tier
            entries = await asyncio.to_thread(self.backend.get, c.index_name)
            self.store.index_tiered([tuple(e) for e in msgpack.unpackb(entries, raw=False)])
        start = m.chunks[first].start
        before = [(e, s) for e, s in m.epochs if s <= start]
        for e, s in before[-1:] + [(e, s) for e, s in m.epochs if s > start]:
            self.store.append_epoch(e, s)
        total = await self._fetch_log(m.chunks[first:])
        self.bootstrapped_bytes = total
        self.bootstrap_seconds = time.perf_counter() - t0
        self.log.info("tier_bootstrap_done", bytes=total, chunks=len(m.chunks) - first, indexed_only=first,
                      start=start, end=m.end, seconds=round(self.bootstrap_seconds, 3))  # fmt: skip
        return total

    async def _fetch_log(self, chunks: tuple[Chunk, ...]) -> int:
        """Fetch chunks (the next one downloading while one is written and dispatched) into the local log."""
        loop = asyncio.get_running_loop()
        total = 0
        pending = loop.run_in_executor(None, self.backend.get, chunks[0].name)
        for i, c in enumerate(chunks):
            data = await pending
            if i + 1 < len(chunks):
                pending = loop.run_in_executor(None, self.backend.get, chunks[i + 1].name)
            self.store.append_raw(c.start, self.manifest.check(c, data))
            total += len(data)
            await asyncio.sleep(0)
        return total

    def status(self) -> dict[str, Any]:
        return {"role": self.role, "epoch": self.epoch, "fenced": self.fenced, "manifest": self.manifest.to_dict(),
                "uploadedChunks": self.uploaded_chunks, "uploadedBytes": self.uploaded_bytes,
                "uploadSeconds": round(self.upload_seconds, 3), "recordsApplied": self.records_applied,
                "bootstrappedBytes": self.bootstrapped_bytes, "bootstrapSeconds": round(self.bootstrap_seconds, 3),
                "trimmedChunks": self.trimmed_chunks, "lastError": self.last_error,
                "reader": self.reader.stats()}  # fmt: skip
