"""Incremental metadata sync for one broker (RIP-81): journal while master, follow while slave, snapshots.

``on_master()``: apply what the local log still holds (a promoted slave must have every record it received
before it writes its own), stop following, and journal every local change into the commit log; a snapshot
file is written every ``snapshot_interval_ms`` while anything changed. ``on_slave()``: stop journaling (buffered
offsets are written first when the store still takes them) and follow the local log; a slave without a usable
position (new, its records expired, or a former master whose own records may have been truncated) first installs
a snapshot of its master's image (GET_METADATA_SNAPSHOT, served by ``handlers``) — retried until it gets one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from brokerd.message import MessageInner
from brokerd.metadata import BrokerMetadata
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection
from brokerd.store.results import PutMessageResult
from brokerd.sync.follower import FollowedStore, MetadataFollower
from brokerd.sync.journal import MetadataJournal
from brokerd.sync.records import SYNC_TOPICS
from brokerd.sync.snapshot import Snapshot, SnapshotStore

SAVE_PERIOD_S = 5.0
BOOTSTRAP_RETRY_S = 0.5


class SyncStore(FollowedStore, Protocol):
    def append_message(self, msg: MessageInner) -> PutMessageResult: ...

    @property
    def max_phy_offset(self) -> int: ...


@dataclass(frozen=True)
class SyncConfig:
    flush_interval_ms: int = 100
    flush_commits: int = 1000
    snapshot_interval_ms: int = 60_000


class MetadataSync:
    def __init__(self, cfg: SyncConfig, store: SyncStore, meta: BrokerMetadata, host: tuple[str, int],
                 outer: RemotingClient, master_addr: Callable[[], str | None], log: Any = None) -> None:  # fmt: skip
        self.cfg = cfg
        self.store = store
        self.meta = meta
        self.host = host
        self.outer = outer
        self.master_addr = master_addr
        self.log = log if log is not None else structlog.get_logger("metadata_sync")
        self.follower = MetadataFollower(store, meta, self.log)
        self.snapshots = SnapshotStore(meta.config_dir)
        self.journal: MetadataJournal | None = None
        self.role = "NONE"
        self._was_master = False
        self._task: asyncio.Task[None] | None = None
        self._records_at_snapshot = -1

    # ------------------------------------------------------------------ roles

    def on_master(self) -> None:
        if self.role == "MASTER":
            return
        self._cancel()
        self.follower.stop()  # applies every record the log still holds
        self.journal = MetadataJournal(self.store, self.host, flush_interval_ms=self.cfg.flush_interval_ms,
                                       flush_commits=self.cfg.flush_commits, log=self.log)  # fmt: skip
        self.meta.hub.journal = self.journal
        self.role, self._was_master = "MASTER", True
        self._task = asyncio.get_running_loop().create_task(self._master_loop())
        self.log.info("metadata_sync_journaling", applied=self.follower.applied)

    def on_slave(self) -> None:
        if self.role == "SLAVE":
            return
        self._cancel()
        self._stop_journal()
        if self._was_master:
            self.follower.forget()
            self._was_master = False
        self.role = "SLAVE"
        ready = self.follower.start()
        self._task = asyncio.get_running_loop().create_task(self._slave_loop(bootstrap=not ready))

    async def stop(self) -> None:
        self._cancel()
        self._stop_journal()
        if self.role == "SLAVE":
            self.follower.stop()
            with contextlib.suppress(OSError):
                self.follower.save()
        self.role = "NONE"

    def _stop_journal(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.meta.hub.journal = None
            self.journal = None

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # ------------------------------------------------------------------ loops

    async def _master_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.snapshot_interval_ms / 1000.0)  # sleep-ok: snapshot period
            try:
                await self.write_snapshot()
            except OSError as exc:
                self.log.error("metadata_snapshot_write_failed", error=str(exc))

    async def _slave_loop(self, bootstrap: bool) -> None:
        while True:
            if bootstrap or self.follower.needs_bootstrap():
                await self._bootstrap()
                bootstrap = False
            await asyncio.sleep(SAVE_PERIOD_S)  # sleep-ok: save period
            try:
                self.follower.save()
            except OSError as exc:
                self.log.error("metadata_positions_save_failed", error=str(exc))

    async def _bootstrap(self) -> None:
        """Install a snapshot of the current master's image (retried until one arrives or the role changes)."""
        while self.role == "SLAVE":
            addr = self.master_addr()
            if addr is not None:
                try:
                    resp = await self.outer.invoke(addr, request(RequestCode.GET_METADATA_SNAPSHOT, {}), 10.0)
                    if resp.code == ResponseCode.SUCCESS and resp.body:
                        self.follower.install(Snapshot.decode(resp.body))
                        return
                    self.log.info("metadata_snapshot_refused", master=addr, code=resp.code, remark=resp.remark)
                except Exception as exc:  # noqa: BLE001 - master unreachable or a bad answer: ask again
                    self.log.info("metadata_snapshot_fetch_failed", master=addr, error=str(exc))
            await asyncio.sleep(BOOTSTRAP_RETRY_S)  # sleep-ok: retry back-off

    # ------------------------------------------------------------------ snapshots (master)

    def snapshot_now(self) -> Snapshot:
        """The image as it is now and the record positions it covers (buffered offsets are in the tables)."""
        positions = {t: self.store.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}
        return Snapshot(self.meta.export_sections(), positions, time.time_ns() // 1_000_000,
                        self.store.max_phy_offset)  # fmt: skip

    async def write_snapshot(self) -> None:
        """A snapshot file, when records were written since the last one (or none was written yet)."""
        journal = self.journal
        if journal is None or journal.records_total == self._records_at_snapshot:
            return
        records = journal.records_total
        await asyncio.to_thread(self.snapshots.write, self.snapshot_now())
        self._records_at_snapshot = records

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.GET_METADATA_SNAPSHOT: self._serve_snapshot}

    def _serve_snapshot(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.role != "MASTER":
            return cmd.response(ResponseCode.SYSTEM_ERROR, "not a master: no metadata snapshot to serve")
        return cmd.response(ResponseCode.SUCCESS, None, {}, self.snapshot_now().encode())

    def status(self) -> dict[str, Any]:
        st: dict[str, Any] = {"role": self.role, "follower": self.follower.stats()}
        if self.journal is not None:
            st["journal"] = self.journal.stats()
        return st
