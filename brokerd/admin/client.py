"""The admin client: remoting requests to name servers and brokers (signed with the operator's account when one is
given) and the walk of the name server's route and cluster tables that every mqadmin command starts from, as
RocketMQ's DefaultMQAdminExt does it. Errors are one-line `AdminError`s naming what is wrong."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from brokerd.acl.glue import signing_client
from brokerd.admin.model import ClusterInfo, TopicRoute, body_json
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout

TIMEOUT = 5.0  # DefaultMQAdminExt's timeoutMillis
SUCCESS = 0
TOPIC_NOT_EXIST = 17
REQUEST_CODE_NOT_SUPPORTED = 3
CLUSTER_ERROR = "Make sure the specified clusterName exists or the name server connected to is correct."


class AdminError(Exception):
    """A command failed: the message is the one line printed to the operator."""


class ServerError(AdminError):
    """A name server or broker answered an error code."""

    def __init__(self, code: int, remark: str | None, addr: str, what: str = "") -> None:
        self.code, self.remark, self.addr = code, remark or "", addr
        prefix = f"{what}: " if what else ""
        super().__init__(f"{prefix}CODE: {code}  DESC: {self.remark}  BROKER: {addr}")


class NotSupported(ServerError):
    """The server does not implement this request code."""


def split_namesrv(text: str | None) -> list[str]:
    return [a.strip() for a in (text or "").split(";") if a.strip()]


def _same_host(a: str, b: str) -> bool:
    ha, _, pa = a.rpartition(":")
    hb, _, pb = b.rpartition(":")
    if pa != pb:
        return False
    try:
        return socket.gethostbyname(ha) == socket.gethostbyname(hb)
    except OSError:
        return ha == hb


class AdminClient:
    def __init__(self, namesrv: Sequence[str], creds: tuple[str, str] | None = None, timeout: float = TIMEOUT) -> None:
        self.namesrv = list(namesrv)
        self.timeout = timeout
        self.remoting = signing_client(*creds) if creds else RemotingClient()
        self._cluster: ClusterInfo | None = None

    async def close(self) -> None:
        await self.remoting.close()

    # -- transport ---------------------------------------------------------------------------------------------

    async def invoke(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                     timeout: float | None = None, language: str | None = None) -> RemotingCommand:
        cmd = request(code, dict(ext or {}), body)
        if language:
            cmd.language = language
        try:
            return await self.remoting.invoke(addr, cmd, timeout or self.timeout)
        except RemotingTimeout:
            raise AdminError(f"no answer from {addr} within {timeout or self.timeout:g}s (request code {code})") from None
        except (ConnectionClosed, OSError, ValueError) as e:
            raise AdminError(f"cannot reach {addr}: {e}") from None

    async def call(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                   what: str = "", timeout: float | None = None) -> RemotingCommand:
        """A request that must succeed: any other answer raises ServerError (NotSupported for an unknown code)."""
        resp = await self.invoke(addr, code, ext, body, timeout)
        if resp.code == REQUEST_CODE_NOT_SUPPORTED:
            raise NotSupported(resp.code, resp.remark or f"request code {code} not supported", addr, what)
        if resp.code != SUCCESS:
            raise ServerError(resp.code, resp.remark, addr, what)
        return resp

    async def call_json(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                        what: str = "", timeout: float | None = None) -> dict[Any, Any]:
        return body_json((await self.call(addr, code, ext, body, what, timeout)).body)

    def require_namesrv(self) -> list[str]:
        if not self.namesrv:
            raise AdminError("no name server address: give -n host:port (or set NAMESRV_ADDR)")
        return self.namesrv

    async def namesrv_invoke(self, code: int, ext: dict[str, str] | None = None,
                             body: bytes | None = None) -> tuple[str, RemotingCommand]:
        """Ask the name servers in turn until one answers (the client's failover): (its address, the answer)."""
        last: AdminError | None = None
        for addr in self.require_namesrv():
            try:
                resp = await self.invoke(addr, code, ext, body)
            except AdminError as e:
                last = e
                continue
            return addr, resp
        assert last is not None
        raise last

    async def namesrv_call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                           what: str = "") -> RemotingCommand:
        addr, resp = await self.namesrv_invoke(code, ext, body)
        if resp.code != SUCCESS:
            cls = NotSupported if resp.code == REQUEST_CODE_NOT_SUPPORTED else ServerError
            raise cls(resp.code, resp.remark, addr, what)
        return resp

    # -- the name server's tables ------------------------------------------------------------------------------

    async def cluster_info(self, fresh: bool = False) -> ClusterInfo:
        if self._cluster is None or fresh:
            self._cluster = ClusterInfo.from_json(body_json((await self.namesrv_call(106)).body))
        return self._cluster

    async def route(self, topic: str) -> TopicRoute:
        addr, resp = await self.namesrv_invoke(105, {"topic": topic})
        if resp.code == TOPIC_NOT_EXIST:
            raise AdminError(f"topic {topic} does not exist: {resp.remark or 'no route info'}")
        if resp.code != SUCCESS:
            raise ServerError(resp.code, resp.remark, addr, f"route of {topic}")
        return TopicRoute.from_json(body_json(resp.body))

    async def cluster_names(self, cluster: str) -> list[str]:
        names = (await self.cluster_info()).names_in(cluster)
        if not names:
            raise AdminError(f"cluster {cluster} not found. {CLUSTER_ERROR}")
        return names

    async def masters(self, cluster: str) -> list[str]:
        await self.cluster_names(cluster)
        masters = (await self.cluster_info()).masters(cluster)
        if not masters:
            raise AdminError(f"cluster {cluster} has no master broker registered")
        return masters

    async def all_addrs(self, cluster: str) -> list[str]:
        await self.cluster_names(cluster)
        return (await self.cluster_info()).all_addrs(cluster)

    async def broker_name_of(self, addr: str) -> str:
        ci = await self.cluster_info()
        name = ci.name_of_addr(addr)
        if name is None:
            name = next((n for n, b in ci.brokers.items() if any(_same_host(addr, a) for a in b.addrs.values())), None)
        if name is None:
            raise AdminError(f"broker {addr} is not registered with the name server. {CLUSTER_ERROR}")
        return name

    async def check_broker_addr(self, addr: str) -> str:
        """A broker address given with -b: must be a registered broker when a name server is known."""
        if not self.namesrv:
            return addr
        await self.broker_name_of(addr)
        return addr

    async def check_broker_name(self, name: str) -> None:
        if name not in (await self.cluster_info()).brokers:
            raise AdminError(f"broker {name} is not registered with the name server")

    async def master_of_name(self, name: str) -> str:
        b = (await self.cluster_info()).brokers.get(name)
        if b is None:
            raise AdminError(f"broker {name} is not registered with the name server")
        addr = b.master()
        if addr is None:
            raise AdminError(f"broker {name} has no master registered")
        return addr
