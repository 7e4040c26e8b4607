"""A broker in controller mode (RocketMQ 5 ``ReplicasManager``, spec §6.4–6.5): its controller id, heartbeats,
and the role the controller assigns.

Start-up: the controller id comes from ``<storePathRootDir>/brokerIdentity`` (``cluster#brokerName#id``) or is
obtained with GET_NEXT_BROKER_ID + APPLY_BROKER_ID (a temp file marks an application in progress, so a crash
between the two reuses the id it applied for); then REGISTER_BROKER (1003); then BROKER_HEARTBEAT (904) one-way to
every controller every ``brokerHeartbeatInterval``; then the role: the register answer's master, or ELECT_MASTER
with its own id when the set has no master.

Roles change when a newer master epoch is seen, from any of: NOTIFY_BROKER_ROLE_CHANGED (1008, pushed by the
controller), the ELECT_MASTER answer, or GET_REPLICA_INFO polled every ``syncBrokerMetadataPeriod``. The same epoch
refreshes the SyncStateSet. A broker that cannot reach the controller keeps its role (no self-demotion); a
master learns of a newer epoch as soon as any of the three sources reaches it, and is fenced from then on.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
import structlog

from brokerd.fsutil import fsync_path
from brokerd.ha.actions import AlterSyncStateSet
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import RemotingCommand, request
from controller.client import ControllerClient, ControllerError

IDENTITY_FILE = "brokerIdentity"
IDENTITY_TMP = "brokerIdentity.applying"


@dataclass(frozen=True)
class LinkConfig:
    controller_addrs: tuple[str, ...]
    cluster: str
    broker_name: str
    broker_addr: str
    store_root: str
    heartbeat_interval_ms: int = 1000  # brokerHeartbeatInterval
    heartbeat_timeout_ms: int = 10_000  # controllerHeartBeatTimeoutMills (sent in the heartbeat)
    sync_broker_metadata_period_ms: int = 5000  # syncBrokerMetadataPeriod
    election_priority: int = 2**31 - 1  # brokerElectionPriority (lower wins among equals)
    startup_elect_delay_ms: int = 2000  # per priority step above 1: see ``first_election_delay_s``

    def first_election_delay_s(self) -> float:
        """A set that never had a master elects the first broker that asks. A broker with an explicit
        brokerElectionPriority above 1 asks only after (priority - 1) × ``startup_elect_delay_ms`` (at most
        4 steps), so the preferred broker of a cross deployment wins whatever order the containers start in.
        Default priorities (all equal) never wait."""
        if self.election_priority <= 1 or self.election_priority >= 2**31 - 1:
            return 0.0
        return min(self.election_priority - 1, 4) * self.startup_elect_delay_ms / 1000.0


@dataclass(frozen=True)
class ReplicaInfo:
    master_id: int | None
    master_addr: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sss_epoch: int


class RoleTarget(Protocol):
    """What the link drives: the broker."""

    async def become_master(self, controller_id: int, epoch: int, sss: frozenset[int], sss_epoch: int) -> None: ...

    async def become_slave(self, controller_id: int, master_id: int, master_addr: str, epoch: int) -> None: ...

    def on_sync_state_set(self, sss: frozenset[int], sss_epoch: int, requested_at_ms: int | None) -> None: ...

    def replication_position(self) -> tuple[int, int, int]:
        """(last epoch of the log, max physical offset, confirm offset) for heartbeats."""


def _int(v: str | None, default: int = -1) -> int:
    try:
        return int(v) if v not in (None, "") else default
    except ValueError:
        return default


def parse_info(cmd: RemotingCommand) -> ReplicaInfo:
    """Replica info from a 1003/1004/1002/1008 answer or push (header + SyncStateSet JSON body)."""
    ext = cmd.ext
    body: Any = orjson.loads(cmd.body) if cmd.body else {}
    sss = body.get("syncStateSet", []) if isinstance(body, dict) else []
    sss_epoch = _int(ext.get("syncStateSetEpoch"), -1)
    if sss_epoch < 0 and isinstance(body, dict):
        sss_epoch = _int(str(body.get("syncStateSetEpoch", "")), 0)
    mid = _int(ext.get("masterBrokerId"), -1)
    return ReplicaInfo(mid if mid >= 0 else None, ext.get("masterAddress") or None, _int(ext.get("masterEpoch"), 0),
                       frozenset(int(x) for x in sss), max(sss_epoch, 0))  # fmt: skip


class ControllerLink:
    def __init__(self, cfg: LinkConfig, remoting: RemotingClient, target: RoleTarget, log: Any = None) -> None:
        self.cfg = cfg
        self.client = ControllerClient(list(cfg.controller_addrs), client=remoting, timeout=3.0)
        self.remoting = remoting
        self.target = target
        self.log = log if log is not None else structlog.get_logger("controller_link")
        self.controller_id: int | None = None
        self.master_epoch = 0  # the newest epoch acted on
        self.role: str = "NONE"  # NONE / MASTER / SLAVE
        self.info: ReplicaInfo | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self._poll_now = asyncio.Event()
        self.stats = {"heartbeats": 0, "heartbeat_failures": 0, "polls": 0, "notifications": 0, "elections": 0}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _run(self) -> None:
        while self.controller_id is None:
            try:
                self.controller_id = await self._identity()
                info = await self._register()
            except (ControllerError, OSError, ConnectionError, TimeoutError, ValueError) as exc:
                self.controller_id = None
                self.log.warning("controller_register_failed", error=str(exc))
                await asyncio.sleep(0.5 + random.random())  # sleep-ok: retry back-off
                continue
            self.log.info("controller_registered", controller_id=self.controller_id, master_id=info.master_id,
                          master_epoch=info.master_epoch)  # fmt: skip
            self._tasks.append(asyncio.create_task(self._heartbeat_loop()))
            await self._send_heartbeats()
            delay = self.cfg.first_election_delay_s()
            if info.master_id is None and info.master_epoch == 0 and delay > 0:
                await asyncio.sleep(delay)  # sleep-ok: let the preferred broker win the first election
                self.request_poll()  # the poll loop below applies whatever the controller says by then
                continue
            await self.apply(info, time.monotonic_ns() // 1_000_000)
        await self._poll_loop()

    # ------------------------------------------------------------------ identity and registration

    async def _identity(self) -> int:
        root = Path(self.cfg.store_root)
        path, tmp = root / IDENTITY_FILE, root / IDENTITY_TMP
        if path.exists():
            cluster, name, bid = path.read_text().strip().split("#")
            if (cluster, name) != (self.cfg.cluster, self.cfg.broker_name):
                raise ValueError(f"{path} belongs to {cluster}#{name}, not {self.cfg.cluster}#{self.cfg.broker_name}")
            return int(bid)
        if tmp.exists():  # crashed after applying: apply the same id again (same check code -> accepted)
            bid, code = tmp.read_text().strip().split("#", 1)
            applied = int(bid)
        else:
            resp = await self.client.leader_call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, self._names(),
                                                 idempotent=True)  # fmt: skip
            self._ok(resp)
            applied = _int(resp.ext.get("nextBrokerId"), 1)
            code = f"{self.cfg.broker_addr};{int(time.time() * 1000)}"
            root.mkdir(parents=True, exist_ok=True)
            _write_durable(tmp, f"{applied}#{code}")
        ext = {**self._names(), "appliedBrokerId": str(applied), "registerCheckCode": code}
        resp = await self.client.leader_call(RequestCode.CONTROLLER_APPLY_BROKER_ID, ext, idempotent=True)
        if resp.code == RC.CONTROLLER_BROKER_ID_INVALID:  # another broker took that id first: ask again
            tmp.unlink(missing_ok=True)
        self._ok(resp)
        _write_durable(path, f"{self.cfg.cluster}#{self.cfg.broker_name}#{applied}")
        tmp.unlink(missing_ok=True)
        return applied

    async def _register(self) -> ReplicaInfo:
        ext = {**self._names(), "brokerId": str(self.controller_id), "brokerAddress": self.cfg.broker_addr,
               "invokeTime": str(int(time.time() * 1000))}  # fmt: skip
        resp = await self.client.leader_call(RequestCode.CONTROLLER_REGISTER_BROKER, ext, idempotent=True)
        return parse_info(self._ok(resp))

    def _names(self) -> dict[str, str]:
        return {"clusterName": self.cfg.cluster, "brokerName": self.cfg.broker_name}

    @staticmethod
    def _ok(resp: RemotingCommand) -> RemotingCommand:
        if resp.code != RC.SUCCESS:
            raise ControllerError(resp.code, resp.remark)
        return resp

    # ------------------------------------------------------------------ heartbeats

    async def _heartbeat_loop(self) -> None:
        period = self.cfg.heartbeat_interval_ms / 1000.0
        while True:
            await asyncio.sleep(period)  # sleep-ok: heartbeat period
            await self._send_heartbeats()

    async def _send_heartbeats(self) -> None:
        epoch, max_offset, confirm = self.target.replication_position()
        ext = {**self._names(), "brokerAddr": self.cfg.broker_addr, "brokerId": str(self.controller_id),
               "epoch": str(epoch), "maxOffset": str(max_offset), "confirmOffset": str(confirm),
               "heartbeatTimeoutMills": str(self.cfg.heartbeat_timeout_ms),
               "electionPriority": str(self.cfg.election_priority)}  # fmt: skip
        for addr in self.cfg.controller_addrs:
            try:
                await asyncio.wait_for(self.remoting.invoke_oneway(addr, request(RequestCode.BROKER_HEARTBEAT,
                                       dict(ext), oneway=True)), 1.0)  # fmt: skip
                self.stats["heartbeats"] += 1
            except (OSError, ConnectionError, TimeoutError, Exception):  # noqa: BLE001 - the others still get theirs
                self.stats["heartbeat_failures"] += 1

    # ------------------------------------------------------------------ replica info

    async def _poll_loop(self) -> None:
        period = self.cfg.sync_broker_metadata_period_ms / 1000.0
        while True:
            try:
                await asyncio.wait_for(self._poll_now.wait(), period)
            except TimeoutError:
                pass
            self._poll_now.clear()
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the role, try again next period
                self.log.info("controller_poll_failed", error=str(exc))

    def request_poll(self) -> None:
        self._poll_now.set()

    async def poll(self) -> None:
        sent = time.monotonic_ns() // 1_000_000
        resp = await self.client.leader_call(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                             {"brokerName": self.cfg.broker_name}, idempotent=True)  # fmt: skip
        self.stats["polls"] += 1
        if resp.code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            info = await self._register()
        else:
            info = parse_info(self._ok(resp))
        await self.apply(info, sent)

    async def on_notify(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008) from a controller."""
        self.stats["notifications"] += 1
        await self.apply(parse_info(cmd), None)

    # ------------------------------------------------------------------ roles

    async def apply(self, info: ReplicaInfo, requested_at_ms: int | None) -> None:
        """Act on the controller's view of the set (any source). Serialized: role changes never interleave."""
        async with self._lock:
            await self._apply(info, requested_at_ms)

    async def _apply(self, info: ReplicaInfo, requested_at_ms: int | None) -> None:
        me = self.controller_id
        if me is None or info.master_epoch < self.master_epoch:
            return
        self.info = info
        newer = info.master_epoch > self.master_epoch or self.role == "NONE"
        if info.master_id is None or not info.master_addr:
            if newer or self.role != "MASTER":
                await self._elect()
            return
        if not newer:
            if self.role == "MASTER" and info.master_id == me:
                self.target.on_sync_state_set(info.sync_state_set, info.sss_epoch, requested_at_ms)
            return
        if info.master_id == me:
            await self.target.become_master(me, info.master_epoch, info.sync_state_set, info.sss_epoch)
            self.role = "MASTER"
        else:
            await self.target.become_slave(me, info.master_id, info.master_addr, info.master_epoch)
            self.role = "SLAVE"
        self.master_epoch = info.master_epoch
        self.log.info("controller_role_applied", role=self.role, master_epoch=info.master_epoch,
                      master_id=info.master_id, sync_state_set=sorted(info.sync_state_set))  # fmt: skip

    async def _elect(self) -> None:
        """No master known: ask to be elected (the controller picks by its policy; the answer names the master)."""
        self.stats["elections"] += 1
        ext = {**self._names(), "brokerId": str(self.controller_id), "designateElect": "false",
               "invokeTime": str(int(time.time() * 1000))}  # fmt: skip
        try:
            resp = await self.client.leader_call(RequestCode.CONTROLLER_ELECT_MASTER, ext)
        except (ControllerError, OSError, ConnectionError, TimeoutError) as exc:
            self.log.info("controller_elect_failed", error=str(exc))
            return
        if resp.code in (RC.SUCCESS, RC.CONTROLLER_MASTER_STILL_EXIST):
            info = parse_info(resp)
            if info.master_id is not None and info.master_epoch >= self.master_epoch:
                await self._apply(info, None)
        else:
            self.log.info("controller_elect_refused", code=resp.code, remark=resp.remark)

    async def alter_sync_state_set(self, a: AlterSyncStateSet) -> tuple[frozenset[int], int]:
        body = orjson.dumps({"syncStateSet": sorted(a.new_sync_state_set), "syncStateSetEpoch": a.sync_state_set_epoch})
        ext = {"brokerName": self.cfg.broker_name, "masterBrokerId": str(a.master_broker_id),
               "masterEpoch": str(a.master_epoch), "invokeTime": str(int(time.time() * 1000))}  # fmt: skip
        resp = self._ok(await self.client.leader_call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body))
        info = orjson.loads(resp.body) if resp.body else {}
        epoch = _int(resp.ext.get("newSyncStateSetEpoch"), -1)
        if epoch < 0:
            epoch = int(info.get("syncStateSetEpoch", a.sync_state_set_epoch + 1))
        return frozenset(int(x) for x in info.get("syncStateSet", a.new_sync_state_set)), epoch


def _write_durable(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)
