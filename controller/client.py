"""Async client for a controller group: leader discovery, 2007 redirects, typed request helpers.

Used by mqadmin's controller commands, the integration tests and the benchmark; a broker can use it too.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout


class ControllerError(Exception):
    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"controller answered {code}: {remark}")
        self.code = code
        self.remark = remark


def split_addrs(spec: str) -> list[str]:
    """"ip:port;ip:port" (RocketMQ's controllerAddr format; commas accepted too) -> list."""
    return [a.strip() for a in spec.replace(",", ";").split(";") if a.strip()]


def body_json(cmd: RemotingCommand) -> Any:
    return orjson.loads(cmd.body) if cmd.body else None


class ControllerClient:
    def __init__(self, addrs: list[str] | str, *, client: RemotingClient | None = None, timeout: float = 3.0) -> None:
        self.addrs = split_addrs(addrs) if isinstance(addrs, str) else list(addrs)
        if not self.addrs:
            raise ValueError("no controller address given")
        self.remoting = client if client is not None else RemotingClient(connect_timeout=timeout)
        self._own = client is None
        self.timeout = timeout
        self.leader: str | None = None

    async def close(self) -> None:
        if self._own:
            await self.remoting.close()

    async def call(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                   timeout: float | None = None) -> RemotingCommand:
        return await self.remoting.invoke(addr, request(code, dict(ext or {}), body), timeout or self.timeout)

    async def metadata(self, addr: str) -> dict[str, str]:
        resp = await self.call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
        if resp.code != RC.SUCCESS:
            raise ControllerError(resp.code, resp.remark)
        return dict(resp.ext)

    async def find_leader(self, deadline_s: float = 10.0) -> str:
        """Ask every member for the leader until one names it (or itself is leader)."""
        end = time.monotonic() + deadline_s
        while True:
            for addr in self.addrs:
                try:
                    meta = await self.metadata(addr)
                except (ConnectionClosed, RemotingTimeout, ControllerError, OSError):
                    continue
                if meta.get("isLeader") == "true":
                    self.leader = addr
                    return addr
                lead = meta.get("controllerLeaderAddress")
                if lead:
                    self.leader = lead
                    return lead
            if time.monotonic() >= end:
                raise ControllerError(RC.CONTROLLER_NOT_LEADER, f"no controller leader found among {self.addrs}")
            await asyncio.sleep(0.05)  # sleep-ok: polling other processes for an election to finish

    async def leader_call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                          deadline_s: float = 10.0, idempotent: bool = False) -> RemotingCommand:
        """Send to the leader, following CONTROLLER_NOT_LEADER redirects until the deadline.

        A request that may have reached a controller (timeout, connection lost after sending) is re-sent only
        when `idempotent`; otherwise the error is raised, because the outcome is unknown.
        """
        end = time.monotonic() + deadline_s
        while True:
            addr = self.leader or await self.find_leader(max(0.1, end - time.monotonic()))
            try:
                conn = await self.remoting.connection(addr)
            except (ConnectionClosed, OSError):
                self.leader = None  # not sent: always safe to retry elsewhere
                if time.monotonic() >= end:
                    raise
                continue
            try:
                resp = await conn.request(request(code, dict(ext or {}), body), self.timeout)
            except (ConnectionClosed, RemotingTimeout, OSError):
                self.leader = None
                if not idempotent or time.monotonic() >= end:
                    raise
                continue
            if resp.code != RC.CONTROLLER_NOT_LEADER:
                return resp
            self.leader = resp.ext.get("controllerLeaderAddress")
            if time.monotonic() >= end:
                return resp
            if not self.leader:
                await asyncio.sleep(0.05)  # sleep-ok: the group is electing a leader

    # -- typed helpers (each raises ControllerError on a non-success code unless noted) -------------------

    @staticmethod
    def _ok(resp: RemotingCommand) -> RemotingCommand:
        if resp.code != RC.SUCCESS:
            raise ControllerError(resp.code, resp.remark)
        return resp

    async def sync_state_data(self, broker_names: list[str], addr: str | None = None) -> dict[str, Any]:
        body = orjson.dumps(broker_names)
        code = RequestCode.CONTROLLER_GET_SYNC_STATE_DATA
        resp = await (self.call(addr, code, body=body) if addr else self.leader_call(code, body=body))
        data = body_json(self._ok(resp)) or {}
        table: dict[str, Any] = data.get("replicasInfoTable", {})
        return table

    async def elect_master(self, cluster: str, broker_name: str, broker_id: int, designate: bool = True,
                           addr: str | None = None) -> RemotingCommand:
        ext = {"clusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id),
               "designateElect": "true" if designate else "false", "invokeTime": str(int(time.time() * 1000))}
        code = RequestCode.CONTROLLER_ELECT_MASTER
        return await (self.call(addr, code, ext) if addr else self.leader_call(code, ext))

    async def clean_broker_data(self, cluster: str, broker_name: str, ids: str | None, clean_living: bool,
                                addr: str | None = None) -> RemotingCommand:
        ext = {"clusterName": cluster, "brokerName": broker_name,
               "isCleanLivingBroker": "true" if clean_living else "false", "invokeTime": str(int(time.time() * 1000))}
        if ids:
            ext["brokerControllerIdsToClean"] = ids
        code = RequestCode.CLEAN_BROKER_DATA
        return await (self.call(addr, code, ext) if addr else self.leader_call(code, ext))

    async def get_config(self, addr: str) -> str:
        resp = self._ok(await self.call(addr, RequestCode.GET_CONTROLLER_CONFIG))
        return (resp.body or b"").decode()

    async def update_config(self, addr: str, props: dict[str, str]) -> None:
        body = "".join(f"{k}={v}\n" for k, v in props.items()).encode()
        self._ok(await self.call(addr, RequestCode.UPDATE_CONTROLLER_CONFIG, body=body))
