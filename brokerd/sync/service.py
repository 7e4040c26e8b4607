"""Incremental metadata sync for one broker (RIP-81): journal while master, follow while slave, snapshots.

``on_master()``: apply what the local log still holds (a promoted slave must have every record it received
before it writes its own), stop following, and journal every local change into the commit log; a snapshot
file is written every ``snapshot_interval_ms`` while anything changed. ``on_slave()``: stop journaling (buffered
offsets are written first when the store still takes them) and follow the local log; a slave without a usable
position (new, its records expired, or a former master whose own records may have been truncated) first installs
a snapshot of its master's image (GET_METADATA_SNAPSHOT, served by ``handlers``) — retried until it gets one,
and keeps it as its own latest snapshot file (its log holds the records after it).

Retention (``retention_guard``, installed on the store): before the store's expiry deletes segments holding change
records the latest snapshot file does not cover, a snapshot is written (a master: its image; a slave: the image
its follower applied, at the follower's positions), so this store alone always rebuilds the metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from brokerd.loopwork import run_in_turns
from brokerd.message import MessageInner
from brokerd.metadata import BrokerMetadata
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection
from brokerd.store.protocols import RetentionGuard
from brokerd.store.results import PutMessageResult
from brokerd.sync.follower import FollowedStore, MetadataFollower
from brokerd.sync.journal import MetadataJournal
from brokerd.sync.records import SYNC_TOPICS
from brokerd.sync.retention import RecordQueues, SnapshotKeeper
from brokerd.sync.snapshot import Snapshot, SnapshotStore, encode_steps

SAVE_PERIOD_S = 5.0
BOOTSTRAP_RETRY_S = 0.5


class SyncStore(FollowedStore, RecordQueues, Protocol):
    def append_message(self, msg: MessageInner) -> PutMessageResult: ...

    @property
    def max_phy_offset(self) -> int: ...

    def set_retention_guard(self, cb: RetentionGuard | None) -> None: ...


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
        self.keeper = SnapshotKeeper(store, self.snapshots)
        self.journal: MetadataJournal | None = None
        self.role = "NONE"
        self._was_master = False
        self._task: asyncio.Task[None] | None = None
        self._records_at_snapshot = -1
        store.set_retention_guard(self.retention_guard)

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
                        snap = Snapshot.decode(resp.body)
                        self.follower.install(snap)
                        await self._keep(snap)
                        return
                    self.log.info("metadata_snapshot_refused", master=addr, code=resp.code, remark=resp.remark)
                except Exception as exc:  # noqa: BLE001 - master unreachable or a bad answer: ask again
                    self.log.info("metadata_snapshot_fetch_failed", master=addr, error=str(exc))
            await asyncio.sleep(BOOTSTRAP_RETRY_S)  # sleep-ok: retry back-off

    # ------------------------------------------------------------------ snapshots (master)

    def _head_now(self) -> Snapshot:
        """What a snapshot taken now covers (no sections): the record positions now."""
        positions = {t: self.store.max_offset_in_queue(t, 0) for t in SYNC_TOPICS}
        return Snapshot({}, positions, _now_ms(), self.keeper.log_offset(positions))

    def snapshot_now(self) -> Snapshot:
        """The image as it is now and the record positions it covers (buffered offsets are in the tables)."""
        return replace(self._head_now(), sections=self.meta.export_sections())

    async def encode_now(self) -> tuple[Snapshot, bytes]:
        """``snapshot_now`` encoded, in loop turns (``encode_steps``: ~2 ms on the loop at a time, where a whole
        image of 80,000 committed queues takes ~23 ms): what it covers (no sections) and its bytes."""
        head = self._head_now()
        data = await run_in_turns(encode_steps(self.meta.export_parts(), head.positions, head.created_ms,
                                               head.log_offset))
        return head, data

    async def write_snapshot(self) -> None:
        """A snapshot file, when records were written since the last one (or none was written yet)."""
        journal = self.journal
        if journal is None or journal.records_total == self._records_at_snapshot:
            return
        records = journal.records_total
        head, data = await self.encode_now()
        await asyncio.to_thread(self.keeper.write_encoded, head, data)
        self._records_at_snapshot = records

    async def _keep(self, snap: Snapshot) -> None:
        """A snapshot installed from the master becomes this store's latest file (its log has what follows)."""
        try:
            await asyncio.to_thread(self.keeper.write, snap)
        except OSError as exc:
            self.log.error("metadata_snapshot_write_failed", error=str(exc))

    # ------------------------------------------------------------------ retention (the store's expiry)

    def retention_guard(self, upto: int) -> int:
        """The store's ``RetentionGuard``: segments below ``upto`` are about to expire. When they hold change records
        the latest snapshot does not cover, write one that does first (blocking: one file write and fsync, rare);
        answers the offset below which segments may go."""
        floor = self.keeper.floor()
        if floor >= upto:
            return upto
        snap = self._covering_snapshot()
        if snap is None or snap.positions == self.keeper.covered():  # none, or it would cover nothing more
            self.log.info("metadata_expiry_held", role=self.role, upto=upto, floor=floor)
            return floor
        records = self.journal.records_total if self.journal is not None else -1
        try:
            self.keeper.write(snap)
        except OSError as exc:
            self.log.error("metadata_snapshot_write_failed", error=str(exc), reason="expiry")
            return floor
        if self.journal is not None:
            self._records_at_snapshot = records  # the periodic snapshot has nothing new to cover
        floor = self.keeper.floor()
        self.log.info("metadata_snapshot_written", reason="expiry", positions=snap.positions,
                      log_offset=snap.log_offset, upto=upto, floor=floor)  # fmt: skip
        return upto if floor >= upto else floor

    def _covering_snapshot(self) -> Snapshot | None:
        """A snapshot of this broker's image now: a master's whole image, a following slave's applied one."""
        if self.role == "MASTER" and self.journal is not None:
            return self.snapshot_now()
        f = self.follower
        if self.role == "SLAVE" and f.active and not f.gap and f.positions is not None:
            positions = dict(f.positions)
            return Snapshot(self.meta.export_sections(), positions, _now_ms(), self.keeper.log_offset(positions))
        return None

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.GET_METADATA_SNAPSHOT: self._serve_snapshot}

    def _serve_snapshot(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        if self.role != "MASTER":
            return cmd.response(ResponseCode.SYSTEM_ERROR, "not a master: no metadata snapshot to serve")
        return self._snapshot_answer(cmd)

    async def _snapshot_answer(self, cmd: RemotingCommand) -> RemotingCommand:
        _, data = await self.encode_now()
        return cmd.response(ResponseCode.SUCCESS, None, {}, data)

    def snapshot_info(self) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO fields of the latest snapshot file (``SnapshotKeeper.info``)."""
        return self.keeper.info()

    def status(self) -> dict[str, Any]:
        st: dict[str, Any] = {"role": self.role, "follower": self.follower.stats(), "snapshot": self.keeper.info()}
        if self.journal is not None:
            st["journal"] = self.journal.stats()
        return st


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
