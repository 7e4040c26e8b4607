"""A slave's metadata baseline (RocketMQ 4.x `SlaveSynchronize`) and consumer offsets committed on a slave.

`SlaveMetadataSync`, one per broker, runs while the broker is a slave whose master is known
(`master_broker_addr()` not None). Every `interval_ms` (RocketMQ: 3000 ms) it pulls the master's tables
over remoting and installs them with `ConfigManager.adopt_state` (the master's entries over the slave's built-in
ones, as a file load does):

* GET_ALL_TOPIC_CONFIG (21) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): replaced only when the master's
  DataVersion differs from the slave's (RocketMQ compares those two);
* GET_ALL_CONSUMER_OFFSET (43) and GET_ALL_DELAY_OFFSET (45): replaced when the content differs (their
  DataVersions move only every N commits, so comparing them would miss changes);
* GET_ALL_MESSAGE_REQUEST_MODE (402, the POP/PULL modes of `mqadmin setConsumeMode`): replaced when the content
  differs (a master that does not know the code has none).

A changed table is persisted at once (encoded on the loop, written off it).

Offsets committed on a slave (UPDATE_CONSUMER_OFFSET 15, or a PULL carrying FLAG_COMMIT_OFFSET) are stored
locally and forwarded to the master with UPDATE_CONSUMER_OFFSET; until the master acknowledges one it stays
*pending* (`PendingOffsets`). Pending offsets are pushed before every consumer-offset sync, and when the master's
table is installed a queue still pending keeps the slave's value, so a commit made on a slave while its master
is down reaches the master when it is back and is never overwritten by the master's older value (RocketMQ 4.x
loses those commits). Pushes and syncs are serialised (one lock), so an acknowledged push can never be undone
by a table fetched before it. After a failed push, commits wait for the next periodic sync instead of retrying
each time. The pending set survives a restart: it is written to `slaveOffsetPending.json` in the metadata
directory whenever it changed and is not empty after a push or sync (and at `stop()`), so a slave whose master
acknowledges at once never writes it. When the broker becomes the master, `forget_pending()` drops the set (its
own table is the truth); the loop does it too when it finds the broker a master.

Offsets are last-writer-wins, as in RocketMQ: a pending value pushed after the master came back overwrites a
commit made on the master in between (the consumer normally moves back to the master only after that push).

Failures (master down, timeouts, bad answers) are counted in `failures` and logged once per failure streak
(`slave_metadata_sync_failed`, then `slave_metadata_sync_recovered`); nothing raises out of the loop.

This module sees the broker only as `MetaSyncHost`; `brokerd/context.py` names the part processors use
(`SlaveOffsetSink`). Not thread-safe: event loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

import orjson
from structlog.typing import FilteringBoundLogger

from brokerd.metadata import BrokerMetadata
from brokerd.metadata.manager import ConfigManager
from brokerd.metadata.persist import atomic_write, parse_json
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request

DEFAULT_INTERVAL_MS: Final = 3000  # RocketMQ's slave metadata sync period
DEFAULT_TIMEOUT_S: Final = 3.0  # per request, as RocketMQ's BrokerOuterAPI uses for these calls
PUSH_BATCH: Final = 256  # UPDATE_CONSUMER_OFFSET requests in flight at once while pushing pending offsets
TOPIC_GROUP_SEPARATOR: Final = "@"
PENDING_FILE: Final = "slaveOffsetPending.json"  # in the metadata config dir, while offsets are pending

# table names (the `tables` log field, `on_change`)
TOPICS: Final = "topics"
CONSUMER_OFFSETS: Final = "consumer_offsets"
DELAY_OFFSETS: Final = "delay_offsets"
SUBSCRIPTION_GROUPS: Final = "subscription_groups"
MESSAGE_REQUEST_MODES: Final = "message_request_modes"  # POP / PULL per topic and group (brokerd/pop)

OffsetKey = tuple[str, str, int]  # (group, topic, queue id)


class MetaSyncHost(Protocol):
    """What the sync uses of its broker."""

    @property
    def meta(self) -> BrokerMetadata: ...

    @property
    def outer(self) -> RemotingClient: ...

    @property
    def log(self) -> FilteringBoundLogger: ...

    def master_broker_addr(self) -> str | None: ...

    def is_master(self) -> bool: ...


class SyncError(Exception):
    """The master answered a sync or forward request with an error, or with a body we cannot read."""


# ----------------------------------------------------------------------------------------- pure parts


class PendingOffsets:
    """Offsets committed on this slave that the master has not acknowledged yet: (group, topic, queue) -> offset.
    A newer commit of the same queue replaces the older one; an acknowledgement removes a queue only when its
    value is still the acknowledged one."""

    def __init__(self) -> None:
        self._offsets: dict[OffsetKey, int] = {}
        self._dirty = False

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, key: object) -> bool:
        return key in self._offsets

    def put(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._offsets[(group, topic, queue_id)] = offset
        self._dirty = True

    def items(self) -> list[tuple[OffsetKey, int]]:
        """A snapshot, safe to iterate while commits arrive."""
        return list(self._offsets.items())

    def acknowledge(self, key: OffsetKey, offset: int) -> bool:
        """The master stored `offset` for `key`: forget the key unless a newer commit replaced it. True if forgotten."""
        if self._offsets.get(key) != offset:
            return False
        del self._offsets[key]
        self._dirty = True
        return True

    def clear(self) -> None:
        self._dirty = self._dirty or bool(self._offsets)
        self._offsets.clear()

    def take_dirty(self) -> bool:
        """Whether the set changed since the last call (or `mark_dirty`)."""
        dirty, self._dirty = self._dirty, False
        return dirty

    def mark_dirty(self) -> None:
        self._dirty = True

    def as_dict(self) -> dict[OffsetKey, int]:
        return dict(self._offsets)


def encode_pending(pending: Mapping[OffsetKey, int]) -> bytes:
    """The pending-offsets file: `{"pending": [{"group", "topic", "queueId", "offset"}, ...]}`."""
    rows = [{"group": g, "topic": t, "queueId": q, "offset": o} for (g, t, q), o in sorted(pending.items())]
    out: bytes = orjson.dumps({"pending": rows})
    return out


def decode_pending(data: bytes) -> dict[OffsetKey, int]:
    """Inverse of `encode_pending`; junk raises ValueError."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"pending offsets: invalid JSON: {e}") from e
    rows = doc.get("pending") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ValueError("pending offsets: expected an object with a pending list")
    out: dict[OffsetKey, int] = {}
    for row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"pending offsets: bad entry {row!r}")
        group, topic, queue_id, offset = row.get("group"), row.get("topic"), row.get("queueId"), row.get("offset")
        if not (isinstance(group, str) and group and isinstance(topic, str) and topic
                and type(queue_id) is int and type(offset) is int):
            raise ValueError(f"pending offsets: bad entry {row!r}")
        out[(group, topic, queue_id)] = offset
    return out


def overlay_offsets(doc: Any, keep: Mapping[OffsetKey, int]) -> dict[str, Any]:
    """The master's consumer-offset document (RocketMQ `{"offsetTable": {"topic@group": {"0": n}}, ...}`) with
    the queues of `keep` set to the given values; `doc` itself is not modified. A document without an
    `offsetTable` object raises ValueError."""
    if not isinstance(doc, dict) or not isinstance(doc.get("offsetTable"), dict):
        raise ValueError("consumer offsets: expected an object with an offsetTable object")
    table: dict[str, Any] = dict(doc["offsetTable"])
    for (group, topic, queue_id), offset in keep.items():
        name = topic + TOPIC_GROUP_SEPARATOR + group
        queues = table.get(name)
        queues = dict(queues) if isinstance(queues, dict) else {}
        queues[str(queue_id)] = offset
        table[name] = queues
    return {**doc, "offsetTable": table}


def parse_body(resp: RemotingCommand, what: str) -> Any:
    """The JSON body of a successful answer (fastjson's bare integer map keys accepted); SyncError otherwise."""
    if resp.code != ResponseCode.SUCCESS:
        raise SyncError(f"{what}: master answered {resp.code} {resp.remark or ''}".rstrip())
    if not resp.body:
        raise SyncError(f"{what}: empty body")
    try:
        return parse_json(resp.body, bare_int_keys=True)
    except ValueError as e:
        raise SyncError(f"{what}: {e}") from e


def update_offset_request(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    """UPDATE_CONSUMER_OFFSET (15) with RocketMQ's `UpdateConsumerOffsetRequestHeader`."""
    return request(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                        "queueId": str(queue_id), "commitOffset": str(offset)})


# ----------------------------------------------------------------------------------------- the service


class SlaveMetadataSync:
    """Keeps a slave's topics, groups, consumer and delay offsets equal to its master's, and forwards the
    consumer offsets committed on the slave to the master (see the module doc).

    `start()` / `await stop()` run the loop; `await sync_once()` runs one full sync now (True when a table
    changed). Counters for /metrics: `syncs` (full syncs completed), `failures` (failed syncs and pushes),
    `last_sync_ms` (wall clock of the last completed sync, 0 before), `forwarded` (offsets the master
    acknowledged), `pending_count`. `on_change`, when given, is called with the names of the tables a sync
    replaced (e.g. to re-register the topics with the name servers)."""

    def __init__(self, host: MetaSyncHost, *, interval_ms: int = DEFAULT_INTERVAL_MS,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 on_change: Callable[[frozenset[str]], None] | None = None) -> None:
        if interval_ms <= 0:
            raise ValueError(f"slaveSyncMetadataInterval: must be > 0 ms, got {interval_ms}")
        self._host = host
        self._interval_s = interval_ms / 1000.0
        self._timeout_s = timeout_s
        self._on_change = on_change
        self._pending = PendingOffsets()
        self._lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._push_blocked = False
        self._loaded = False
        self._file_has_entries = False
        self._write_lock = threading.Lock()
        self._write_generation = 0
        self._written_generation = 0
        self.full_sync = True  # False with incremental sync: the loop only forwards offsets committed here
        self.syncs = 0
        self.failures = 0
        self.forwarded = 0
        self.last_sync_ms = 0

    # ----- reads -----

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def pending_offsets(self) -> dict[OffsetKey, int]:
        """A copy of the offsets not yet acknowledged by the master."""
        return self._pending.as_dict()

    # ----- lifecycle -----

    def start(self) -> None:
        """Start the loop (no-op when running): a full sync at once and then every interval (RocketMQ waits one
        interval first), and a push of new commits as soon as they arrive."""
        self._ensure_loaded()
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="slave-metadata-sync")

    async def stop(self) -> None:
        """Stop the loop and write the pending offsets (if they changed) for the next start."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._ensure_loaded()
        async with self._lock:
            await self._save_pending()

    async def forget_pending(self) -> None:
        """Drop the pending offsets (this broker became the master: its own table is the truth now)."""
        self._ensure_loaded()
        async with self._lock:
            self._pending.clear()
            await self._save_pending()

    # ----- offsets committed on this slave -----

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A consumer's commit on this slave: stored locally at once, then forwarded to the master (pending until
        it acknowledges). A commit that changes nothing and is not pending is not forwarded again. Raises
        ValueError for bad names, like `ConsumerOffsetManager.commit_offset`."""
        self._ensure_loaded()
        offsets = self._host.meta.offsets
        unchanged = offsets.query_offset(group, topic, queue_id) == offset
        offsets.commit_offset(client_host, group, topic, queue_id, offset)
        if unchanged and (group, topic, queue_id) not in self._pending:
            return
        self._pending.put(group, topic, queue_id, offset)
        if not self._push_blocked:
            self._kick.set()

    # ----- the loop -----

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_sync = loop.time()  # at once: a new slave (e.g. after a failover) must not wait a period for topics
        while True:
            delay = next_sync - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), delay)
            self._kick.clear()
            try:
                if loop.time() >= next_sync:
                    next_sync = loop.time() + self._interval_s
                    if self._host.is_master():
                        await self.forget_pending()
                    else:
                        await self.sync_once()
                elif not self._push_blocked:
                    await self.push_pending()
            except Exception as e:  # noqa: BLE001 - the loop outlives any bug in one round
                self._logger().exception("slave_metadata_sync_loop_error", error=repr(e))

    async def push_pending(self) -> bool:
        """Forward the pending offsets to the master now. True when none is left pending (False also when no master
        is known or the push failed: counted, logged once per failure streak)."""
        self._ensure_loaded()
        addr = self._host.master_broker_addr()
        if addr is None:
            return False
        async with self._lock:
            try:
                await self._push(addr)
            except Exception as e:  # noqa: BLE001 - master down or refusing: stays pending
                self._push_blocked = True
                self._failed(addr, "forward_offsets", e)
            await self._save_pending()
        return not self._pending

    async def sync_once(self) -> bool:
        """One full sync from the current master (no-op without one): push pending offsets, then fetch and install
        topics, consumer offsets, delay offsets and subscription groups, persisting what changed. True when a table
        changed. A failure is counted and logged (once per streak) and leaves the tables installed so far."""
        self._ensure_loaded()
        addr = self._host.master_broker_addr()
        if addr is None:
            return False
        changed: list[str] = []
        async with self._lock:
            try:
                await self._sync_tables(addr, changed)
            except Exception as e:  # noqa: BLE001 - master down, timeout or a bad answer: try again next round
                self._push_blocked = True
                self._failed(addr, "sync", e)
            else:
                self._push_blocked = False
                self.syncs += 1
                self.last_sync_ms = time.time_ns() // 1_000_000
                self._recovered(addr)
            await self._persist(changed)
            await self._save_pending()
        if changed:
            self._logger().info("slave_metadata_synced", master=addr, tables=changed,
                                pending_offsets=len(self._pending))
            if self._on_change is not None:
                self._on_change(frozenset(changed))
        return bool(changed)

    # ----- one sync -----

    async def _sync_tables(self, addr: str, changed: list[str]) -> None:
        """Fetch and install the tables in RocketMQ's order (SlaveSynchronize: topics, offsets, delay offsets,
        subscription groups, message request modes); appends the names of replaced tables."""
        meta = self._host.meta
        steps: tuple[tuple[str, int, ConfigManager[Any, Any], bool], ...] = (
            (TOPICS, RequestCode.GET_ALL_TOPIC_CONFIG, meta.topics, True),
            (CONSUMER_OFFSETS, RequestCode.GET_ALL_CONSUMER_OFFSET, meta.offsets, False),
            (DELAY_OFFSETS, RequestCode.GET_ALL_DELAY_OFFSET, meta.delay_offsets, False),
            (SUBSCRIPTION_GROUPS, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, meta.subscriptions, True),
            (MESSAGE_REQUEST_MODES, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, meta.request_modes, False),
        )
        if not self.full_sync:  # incremental sync (RIP-81) replicates the tables: only forward offsets
            await self._push(addr)
            return
        for name, code, manager, by_version in steps:
            if name == CONSUMER_OFFSETS:
                await self._push(addr)
            resp = await self._host.outer.invoke(addr, request(code), self._timeout_s)
            if name == MESSAGE_REQUEST_MODES and resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                continue  # a master without POP (RocketMQ 4.x) has no modes to adopt
            doc = parse_body(resp, name)
            if self._host.master_broker_addr() != addr:  # role or master changed while we waited
                raise SyncError(f"master changed during the sync (was {addr})")
            if name == CONSUMER_OFFSETS:
                doc = overlay_offsets(doc, self._pending.as_dict())
            elif name == MESSAGE_REQUEST_MODES and isinstance(doc, dict) and "dataVersion" not in doc:
                doc = {**doc, "dataVersion": manager.data_version.to_json()}  # RocketMQ's 402: content only
            try:
                replaced = manager.adopt_state(doc, if_version_differs=by_version)
            except (ValueError, TypeError) as e:
                raise SyncError(f"{name}: {e}") from e
            if replaced:
                changed.append(name)

    async def _push(self, addr: str) -> None:
        """Forward every pending offset to `addr` (caller holds the lock). Acknowledged ones leave the pending set;
        ones the master refuses for an unknown topic are dropped (logged); any other failure raises SyncError
        after the whole batch, leaving them pending."""
        items = self._pending.items()
        errors: list[str] = []
        for start in range(0, len(items), PUSH_BATCH):
            batch = items[start:start + PUSH_BATCH]
            answers = await asyncio.gather(*(self._host.outer.invoke(addr, update_offset_request(*key, offset),
                                                                      self._timeout_s)
                                             for key, offset in batch), return_exceptions=True)
            for (key, offset), answer in zip(batch, answers, strict=True):
                if isinstance(answer, BaseException):
                    if isinstance(answer, asyncio.CancelledError):
                        raise answer
                    errors.append(repr(answer))
                elif answer.code == ResponseCode.SUCCESS:
                    self.forwarded += 1 if self._pending.acknowledge(key, offset) else 0
                elif answer.code == ResponseCode.TOPIC_NOT_EXIST:
                    self._pending.acknowledge(key, offset)
                    self._logger().warning("slave_offset_dropped", master=addr, group=key[0], topic=key[1],
                                           queue_id=key[2], offset=offset, reason=answer.remark)
                else:
                    errors.append(f"{answer.code} {answer.remark or ''}".rstrip())
        if errors:
            raise SyncError(f"forwarding {len(errors)} offset(s) failed, first: {errors[0]}")

    async def _persist(self, changed: list[str]) -> None:
        """Write the files of the replaced tables off the loop; a failure is logged and left dirty for the
        broker's periodic persist."""
        meta = self._host.meta
        managers: dict[str, ConfigManager[Any, Any]] = {
            TOPICS: meta.topics, CONSUMER_OFFSETS: meta.offsets, DELAY_OFFSETS: meta.delay_offsets,
            SUBSCRIPTION_GROUPS: meta.subscriptions, MESSAGE_REQUEST_MODES: meta.request_modes}
        jobs = [job for name in changed if (job := managers[name].prepare_persist()) is not None]
        for job in jobs:
            try:
                await asyncio.to_thread(job.run)
            except OSError as e:
                self._logger().error("slave_metadata_persist_failed", path=job.path, error=str(e))

    # ----- the pending-offsets file -----

    def _pending_path(self) -> str:
        return os.path.join(self._host.meta.config_dir, PENDING_FILE)

    def _ensure_loaded(self) -> None:
        """Once: take back the offsets still pending when the broker last stopped (newer commits win), and put
        them into the local table."""
        if self._loaded:
            return
        self._loaded = True
        try:
            with open(self._pending_path(), "rb") as f:
                entries = decode_pending(f.read())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            self._logger().error("slave_offsets_pending_unreadable", path=self._pending_path(), error=str(e))
            return
        self._file_has_entries = bool(entries)
        offsets = self._host.meta.offsets
        for (group, topic, queue_id), offset in entries.items():
            if (group, topic, queue_id) not in self._pending:
                offsets.commit_offset("pending", group, topic, queue_id, offset)
                self._pending.put(group, topic, queue_id, offset)
        if entries:
            self._logger().info("slave_offsets_pending_loaded", count=len(entries))

    async def _save_pending(self) -> None:
        """Write the pending set when it changed (caller holds the lock); nothing is written while it stays
        empty, so a slave whose master acknowledges at once never touches the file."""
        if not self._pending.take_dirty():
            return
        entries = self._pending.as_dict()
        if not entries and not self._file_has_entries:
            return
        self._write_generation += 1
        try:
            await asyncio.to_thread(self._write_pending, self._write_generation, encode_pending(entries))
        except OSError as e:
            self._pending.mark_dirty()
            self._logger().error("slave_offsets_pending_write_failed", path=self._pending_path(), error=str(e))
            return
        self._file_has_entries = bool(entries)

    def _write_pending(self, generation: int, data: bytes) -> None:
        """Runs off the loop; a write older than one already done (a cancelled caller's) is skipped."""
        with self._write_lock:
            if generation > self._written_generation:
                atomic_write(self._pending_path(), data, keep_backup=False)
                self._written_generation = generation

    # ----- failure streaks -----

    def _logger(self) -> FilteringBoundLogger:
        return self._host.log.bind(component="slave_metadata_sync")

    def _failed(self, addr: str, step: str, exc: BaseException) -> None:
        self.failures += 1
        if not self._failing:
            self._failing = True
            self._logger().warning("slave_metadata_sync_failed", master=addr, step=step, error=_describe(exc),
                                   pending_offsets=len(self._pending))

    def _recovered(self, addr: str) -> None:
        if self._failing:
            self._failing = False
            self._logger().info("slave_metadata_sync_recovered", master=addr, failures=self.failures)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = [
    "CONSUMER_OFFSETS", "DEFAULT_INTERVAL_MS", "DELAY_OFFSETS", "PENDING_FILE", "SUBSCRIPTION_GROUPS", "TOPICS",
    "MetaSyncHost", "OffsetKey", "PendingOffsets", "SlaveMetadataSync", "SyncError", "decode_pending",
    "encode_pending", "overlay_offsets", "parse_body", "update_offset_request",
]
