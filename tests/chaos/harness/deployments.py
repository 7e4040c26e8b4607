"""Deployments as real processes: the default single container and the 3-member controller group; the HA
deployments (``ha-2c``, ``ha-3c``: containers in the cross layout with the controller group) are in ``ha.py``.

A ``Deployment`` is a set of ``ProcNode`` processes on a ``Network`` plus what the workload and the nemesis need
to find in it (see ``Deployment`` and docs/chaos.md, "Adding a deployment").
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

import orjson

from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError
from tests.support import VENV_BIN, arpc, broker_port, free_port, port_free

from .history import RoleSample
from .net import Network, ProxyNet
from .proc import ProcNode

READY_TIMEOUT_S = 40.0


class Deployment(Protocol):
    name: str
    net: Network
    nodes: dict[str, ProcNode]

    def start(self) -> None: ...
    def stop(self) -> None: ...
    async def wait_ready(self, names: list[str] | None = None, timeout: float = READY_TIMEOUT_S) -> None: ...
    def broker_sets(self) -> dict[str, list[str]]: ...
    async def master_addr(self, bset: str) -> str | None: ...
    def namesrv_addr(self) -> str | None: ...
    def controller_addrs(self) -> list[str]: ...
    def client_addr_of(self, advertised: str) -> str: ...
    async def controller_leader(self) -> str | None: ...
    async def roles(self, t0: float) -> list[RoleSample]: ...
    def settings(self) -> dict[str, Any]: ...
    async def replica_state(self) -> dict[str, Any]:
        """Per broker set: master, epoch and sync state set (HA); {} elsewhere. Recorded with each fault."""
    def topology(self) -> dict[str, list[str]]:
        """Broker address -> [its process, its broker set]."""
    def network_fault_limit(self, names: list[str]) -> str | None:
        """Why a network fault touching these processes cannot be applied faithfully here (None: it can)."""
    async def aclose(self) -> None:
        """Close the deployment's own client connections (before the event loop ends)."""


class _Basics:
    """What the single container and the controller group share: no replicas, faults reach every link."""

    nodes: dict[str, ProcNode]

    async def replica_state(self) -> dict[str, Any]:
        return {}

    def network_fault_limit(self, names: list[str]) -> str | None:
        return None

    async def aclose(self) -> None:
        return None


async def until(cond: Any, timeout: float, what: str) -> None:
    """Poll an async condition until it holds or the deadline passes."""
    end = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < end:
        try:
            if await cond():
                return
        except (ConnectionClosed, RemotingTimeout, ControllerError, OSError) as e:
            last = e
        await asyncio.sleep(0.05)  # sleep-ok: polling interval of a deadline-bounded wait
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}" + (f" ({last!r})" if last else ""))



class SingleContainer(_Basics):
    """``mqbrokercontainer`` with an embedded name server and ``brokers`` brokers (broker-a, broker-b, ...),
    every broker a master of its own broker set (the default deployment)."""

    name = "single"

    def __init__(self, root: Path, net: Network, *, flush: str = "SYNC_FLUSH", brokers: int = 1,
                 powerloss: bool = False, tmpfs_mb: int = 0, broker_extra: dict[str, Any] | None = None) -> None:
        self.root, self.net, self.flush = root, net, flush
        self.tmpfs_mb = tmpfs_mb
        self.node_name = "c0"
        self.net.setup([self.node_name])
        host = net.host(self.node_name)
        self.dir = root / self.node_name
        self.store = self.dir / "store"
        self.store.mkdir(parents=True, exist_ok=True)
        self.namesrv_port, self.admin_port = free_port(), free_port()
        self.ports = {f"broker-{chr(ord('a') + i)}": broker_port() for i in range(brokers)}
        extra = {"flushDiskType": flush, "flushIntervalCommitLog": 200, **(broker_extra or {})}
        paths = [str(self._broker_conf(b, p, host, extra)) for b, p in self.ports.items()]
        conf = self.dir / "container.conf"
        conf.write_text(f"listenPort={self.admin_port}\nembeddedNamesrvEnable=true\n"
                        f"embeddedNamesrvPort={self.namesrv_port}\nbrokerConfigPaths={':'.join(paths)}\n"
                        f"metricsPort=-1\ncontainerStateFile={self.dir / 'container-state.json'}\n"
                        f"logsRoot={self.dir / 'logs'}\n")
        node = ProcNode(self.node_name, "container", [str(VENV_BIN / "mqbrokercontainer"), "-c", str(conf)],
                        self.dir / "container.log", [self.store], prefix=net.prefix(self.node_name),
                        journal=(root / "journals" / "c0.jsonl") if powerloss else None, bsets=list(self.ports))
        if node.journal is not None:
            node.journal.parent.mkdir(exist_ok=True)
        self.nodes = {self.node_name: node}
        self._mounted = False

    def _broker_conf(self, name: str, port: int, host: str, extra: dict[str, Any]) -> Path:
        props = {"brokerClusterName": "ChaosCluster", "brokerName": name, "brokerId": 0, "brokerRole": "ASYNC_MASTER",
                 "brokerIP1": host, "listenPort": port, "storePathRootDir": str(self.store / name),
                 "registerNameServerPeriod": 2000, "mappedFileSizeCommitLog": 4 * 1024 * 1024,
                 "maxHashSlotNum": 20_000, "maxIndexNum": 80_000, "diskSpaceWarningLevelRatio": 0.99,
                 "diskSpaceCleanForciblyRatio": 0.99, "autoCreateTopicEnable": "true", **extra}
        path = self.dir / f"{name}.conf"
        self.dir.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self) -> None:
        if self.tmpfs_mb and not self._mounted:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_mb}m", "tmpfs", str(self.store)],
                           check=True, capture_output=True, timeout=30)
            self._mounted = True
        for n in self.nodes.values():
            if not n.alive():
                n.start()

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.store)], capture_output=True, timeout=30)
            self._mounted = False

    async def wait_ready(self, names: list[str] | None = None, timeout: float = READY_TIMEOUT_S) -> None:
        node = self.nodes[self.node_name]

        async def ready() -> bool:
            if not node.alive():
                raise RuntimeError(f"{node.name} exited:\n{node.tail()}")
            r = await arpc(self.namesrv_addr(), 105, {"topic": "TBW102"}, timeout=2.0)
            return r.code == 0 and len(orjson.loads(r.body)["brokerDatas"]) == len(self.ports)

        await until(ready, timeout, f"{node.name} brokers registered")

    def broker_sets(self) -> dict[str, list[str]]:
        return {b: [self.net.client_addr(self.node_name, p)] for b, p in self.ports.items()}

    async def master_addr(self, bset: str) -> str | None:
        return self.net.client_addr(self.node_name, self.ports[bset])

    def namesrv_addr(self) -> str:
        return self.net.client_addr(self.node_name, self.namesrv_port)

    def controller_addrs(self) -> list[str]:
        return []

    def client_addr_of(self, advertised: str) -> str:
        host, _, port = advertised.rpartition(":")
        return self.net.client_addr(self.node_name, int(port))

    async def controller_leader(self) -> str | None:
        return None

    async def roles(self, t0: float) -> list[RoleSample]:
        return [s for b in self.ports if (s := await broker_role(b, (await self.master_addr(b)) or "", t0))]

    def settings(self) -> dict[str, Any]:
        return {"deployment": self.name, "flush": self.flush, "net": self.net.kind, "brokers": list(self.ports)}

    def topology(self) -> dict[str, list[str]]:
        return {addr: [self.node_name, b] for b, addrs in self.broker_sets().items() for addr in addrs}

    def fill_disk(self) -> Path:
        """Fill the store's filesystem (a tmpfs of ``tmpfs_mb``) with a ballast file; returns it."""
        if not self._mounted:
            raise RuntimeError("full disk needs the store on its own small filesystem (tmpfs_mb, root)")
        ballast = self.store / "ballast"
        st = os.statvfs(self.store)
        free = st.f_bavail * st.f_frsize
        with open(ballast, "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, max(free - 4096, 4096))
            except OSError:
                pass
        return ballast

    def free_disk(self) -> None:
        (self.store / "ballast").unlink(missing_ok=True)


async def broker_role(bset: str, addr: str, t0: float) -> RoleSample | None:
    """One poll of a broker's role (GET_BROKER_RUNTIME_INFO); None when it does not answer."""
    call = time.monotonic() - t0
    try:
        r = await arpc(addr, 28, timeout=1.0)
    except (ConnectionClosed, RemotingTimeout, OSError):
        return None
    if r.code != 0:
        return None
    table = orjson.loads(r.body or b"{}").get("table", {})
    master = table.get("brokerRole", "") != "SLAVE"
    epoch = int(table["masterEpoch"]) if str(table.get("masterEpoch", "")).isdigit() else None
    writable = master and table.get("status", "running") == "running"
    return RoleSample(bset, addr, master, writable, epoch, call, time.monotonic() - t0)


class ControllerGroup(_Basics):
    """Three (``n``) ``mqcontroller`` members. In proxy mode every Raft link goes through a proxy: member i uses
    raftPortOffset 1000*(i+1), so it listens on P_i + off_i and dials member j at P_j + off_i, where the proxy
    (i -> j) forwards to P_j + off_j."""

    name = "controller"

    def __init__(self, root: Path, net: Network, *, n: int = 3, powerloss: bool = False,
                 extra: dict[str, str] | None = None) -> None:
        self.root, self.net, self.n = root, net, n
        self.names = [f"n{i}" for i in range(n)]
        net.setup(self.names)
        proxied = net if isinstance(net, ProxyNet) else None
        self.offsets = [1000 * (i + 1) if proxied else 1000 for i in range(n)]
        self.ports = self._ports()
        peers = ";".join(f"{nm}-{net.host(nm)}:{p}" for nm, p in zip(self.names, self.ports, strict=True))
        self.nodes: dict[str, ProcNode] = {}
        for i, nm in enumerate(self.names):
            d = root / nm
            d.mkdir(parents=True, exist_ok=True)
            props = {"controllerDLegerGroup": "chaos", "controllerDLegerPeers": peers, "controllerDLegerSelfId": nm,
                     "controllerStorePath": str(d / "store"), "controllerListenHost": net.host(nm),
                     "raftPortOffset": str(self.offsets[i]), "raftElectionTimeoutMs": "500",
                     "raftHeartbeatIntervalMs": "100", "brokerHeartbeatTimeoutMs": "60000", **(extra or {})}
            (d / "controller.conf").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.nodes[nm] = ProcNode(nm, "controller", [str(VENV_BIN / "mqcontroller"), "-c", str(d / "controller.conf")],
                                      d / "controller.log", [d / "store"], prefix=net.prefix(nm),
                                      journal=(root / "journals" / f"{nm}.jsonl") if powerloss else None)
            (root / "journals").mkdir(exist_ok=True)
        if proxied is not None:
            for i, a in enumerate(self.names):
                for j, b in enumerate(self.names):
                    if i != j:
                        proxied.link(a, b, self.ports[j] + self.offsets[i], self.ports[j] + self.offsets[j])
        self._client_addr = {f"{net.host(nm)}:{p}": net.client_addr(nm, p) for nm, p in zip(self.names, self.ports,
                                                                                             strict=True)}

    def _ports(self) -> list[int]:
        out: list[int] = []
        while len(out) < self.n:
            p = free_port()
            if all(p + o < 65536 and port_free(p + o) for o in set(self.offsets)) and p not in out:
                out.append(p)
        return out

    def start(self) -> None:
        for n in self.nodes.values():
            if not n.alive():
                n.start()

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()

    def controller_addrs(self) -> list[str]:
        return list(self._client_addr.values())

    def addr_of(self, name: str) -> str:
        return self.net.client_addr(name, self.ports[self.names.index(name)])

    def client_addr_of(self, advertised: str) -> str:
        return self._client_addr.get(advertised, advertised)

    async def wait_ready(self, names: list[str] | None = None, timeout: float = READY_TIMEOUT_S) -> None:
        async def ready() -> bool:
            for nm in names or self.names:
                if not self.nodes[nm].alive():
                    raise RuntimeError(f"{nm} exited:\n{self.nodes[nm].tail()}")
            return await self.controller_leader() is not None

        await until(ready, timeout, "a controller leader")

    async def controller_leader(self) -> str | None:
        """The member that answers it is leader (asked directly, not through redirects)."""
        c = ControllerClient(self.controller_addrs(), timeout=0.5)
        try:
            for nm in self.names:
                node = self.nodes[nm]
                if not node.alive() or node.paused:
                    continue
                try:
                    meta = await c.metadata(self.addr_of(nm))
                except (ConnectionClosed, RemotingTimeout, ControllerError, OSError):
                    continue
                if meta.get("isLeader") == "true":
                    return nm
            return None
        finally:
            await c.close()

    def broker_sets(self) -> dict[str, list[str]]:
        return {}

    async def master_addr(self, bset: str) -> str | None:
        return None

    def namesrv_addr(self) -> str | None:
        return None

    async def roles(self, t0: float) -> list[RoleSample]:
        return []

    def settings(self) -> dict[str, Any]:
        return {"deployment": self.name, "net": self.net.kind, "members": self.names, "raft_offsets": self.offsets}

    def topology(self) -> dict[str, list[str]]:
        return {}


DEPLOYMENTS = ("single", "controller", "ha-2c", "ha-3c")


def make_deployment(kind: str, root: Path, net: Network, **kw: Any) -> Deployment:
    if kind == "single":
        return SingleContainer(root, net, **kw)
    if kind == "controller":
        return ControllerGroup(root, net, **{k: v for k, v in kw.items() if k in ("n", "powerloss", "extra")})
    if kind in ("ha-2c", "ha-3c"):
        from .ha import HADeployment  # ha.py builds on this module

        keep = ("flush", "powerloss", "broker_extra", "controller_extra", "replicas")
        return HADeployment(root, net, containers=int(kind[3]), **{k: v for k, v in kw.items() if k in keep})
    raise ValueError(f"unknown deployment {kind!r}: {', '.join(DEPLOYMENTS)}")
