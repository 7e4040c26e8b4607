"""The HA deployment as real processes: the 3-member controller group (which also serves the name-server role)
and N broker containers in the peer-to-peer cross layout of conf/container/2c-1m1s (3c-1m2s): container i masters
broker set i (``brokerElectionPriority`` 1) and holds a slave of every other set. Controller mode,
``allAckInSyncStateSet=true`` (SYNC replication: a send is acknowledged once every member of the sync state set
holds it). In netns mode every process has its own network namespace, so replication, heartbeats, the name
servers and the harness's connections are all separate links that partitions can cut.

Producers and consumers find a set's master the way a RocketMQ client does, from the name servers' route
(broker id 0), refreshed at most every ``ROUTE_TTL_S``: ``master_addr`` is asked before every request, so a
failover is followed once the new master has registered.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from brokerd.remoting import RemotingClient, request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError
from tests.support import VENV_BIN, broker_port, free_port

from .deployments import READY_TIMEOUT_S, ControllerGroup, until
from .history import RoleSample
from .net import Network, ProxyNet
from .proc import ProcNode

SETS = "abcdefgh"
ROUTE_TTL_S = 0.2
HA_READY_TIMEOUT_S = max(READY_TIMEOUT_S, 60.0)
NET_ERRORS = (ConnectionClosed, RemotingTimeout, ControllerError, OSError)

# The shipped HA broker configuration (conf/container/2c-1m1s) with what a chaos run changes, and why:
HA_BROKER_DEFAULTS: dict[str, Any] = {
    "enableControllerMode": "true", "allAckInSyncStateSet": "true", "brokerHeartbeatInterval": 300,
    "checkSyncStateSetPeriod": 1000, "slaveReadEnable": "true", "autoCreateTopicEnable": "true",
    "allowMetadataIncrementalSync": "true",  # RIP-81 (docs/metadata-sync.md), as shipped
    # a slave that stops acknowledging (cut off, hung) leaves the sync state set after 3 s instead of 15 s, so
    # a master cut from its slave takes writes again within the partition target (5 s)
    "haMaxTimeSlaveNotCatchup": 3000,
    "registerNameServerPeriod": 2000,
    # small segments and indexes: the runs roll commit-log segments, and truncations cross them
    "mappedFileSizeCommitLog": 4 * 1024 * 1024, "maxHashSlotNum": 20_000, "maxIndexNum": 80_000,
    "diskSpaceWarningLevelRatio": 0.99, "diskSpaceCleanForciblyRatio": 0.99, "flushIntervalCommitLog": 200,
}  # fmt: skip
# conf/controller/3n, with the liveness timeout of tests/ha_cluster.py (the shipped 3000 ms also works)
HA_CONTROLLER_DEFAULTS = {"brokerHeartbeatTimeoutMs": "1500", "enableElectUncleanMaster": "false",
                          "notifyBrokerRoleChanged": "true"}


@dataclass(frozen=True)
class BrokerSpot:
    """One broker: its set, the container process holding it, its rank (0: the preferred master), its port."""

    bset: str
    node: str
    rank: int
    port: int


class HADeployment:
    """``containers`` containers (c0, c1, ...), as many broker sets, ``replicas`` brokers per set (default: one in
    every container), and the controllers n0-n2."""

    def __init__(self, root: Path, net: Network, *, containers: int = 2, replicas: int | None = None,
                 flush: str = "ASYNC_FLUSH", powerloss: bool = False, broker_extra: dict[str, Any] | None = None,
                 controller_extra: dict[str, str] | None = None) -> None:  # fmt: skip
        self.root, self.net, self.flush = root, net, flush
        self.replicas = replicas or containers
        if not 1 <= self.replicas <= containers:
            raise ValueError("replicas must be between 1 and the number of containers")
        self.name = f"ha-{containers}c"
        self.ctl = ControllerGroup(root, net, n=3, powerloss=powerloss,
                                   extra={**HA_CONTROLLER_DEFAULTS, **(controller_extra or {})})
        self.ns_ports = self._add_name_servers()
        self.containers = [f"c{i}" for i in range(containers)]
        net.setup(self.containers)
        self.sets = [f"broker-{SETS[i]}" for i in range(containers)]
        self.spots = [BrokerSpot(bset, self.containers[(si + k) % containers], k, broker_port())
                      for si, bset in enumerate(self.sets) for k in range(self.replicas)]
        self.broker_extra = {**HA_BROKER_DEFAULTS, "flushDiskType": flush, **(broker_extra or {})}
        self.nodes: dict[str, ProcNode] = dict(self.ctl.nodes)
        for c in self.containers:
            self.nodes[c] = self._container(c, powerloss)
        self._advertised = {f"{net.host(s.node)}:{s.port}": self.addr(s) for s in self.spots}
        self._client: RemotingClient | None = None
        self._masters: dict[str, str | None] = {}
        self._route_at = -1.0
        self._route_lock: asyncio.Lock | None = None
        self._ns_next = 0

    # ------------------------------------------------------------------ configuration

    def _add_name_servers(self) -> list[int]:
        """Every controller member also serves the name-server role (``namesrvListenPort``)."""
        ports = []
        for nm in self.ctl.names:
            port = free_port()
            conf = self.root / nm / "controller.conf"
            conf.write_text(conf.read_text() + f"namesrvListenPort={port}\n")
            ports.append(port)
        return ports

    def _container(self, node: str, powerloss: bool) -> ProcNode:
        d = self.root / node
        d.mkdir(parents=True, exist_ok=True)
        ctl = ";".join(f"{self.net.host(nm)}:{p}" for nm, p in zip(self.ctl.names, self.ctl.ports, strict=True))
        ns = ";".join(f"{self.net.host(nm)}:{p}" for nm, p in zip(self.ctl.names, self.ns_ports, strict=True))
        paths = []
        for s in (s for s in self.spots if s.node == node):
            props = {"brokerClusterName": "ChaosCluster", "brokerName": s.bset, "brokerId": s.rank,
                     "brokerRole": "SYNC_MASTER" if s.rank == 0 else "SLAVE", "brokerElectionPriority": s.rank + 1,
                     "brokerIP1": self.net.host(node), "listenPort": s.port,
                     "storePathRootDir": str(d / "store" / s.bset), "controllerAddr": ctl, **self.broker_extra}
            path = d / f"{s.bset}.conf"
            path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            paths.append(str(path))
        conf = d / "container.conf"
        conf.write_text(f"listenPort={free_port()}\nembeddedNamesrvEnable=false\nnamesrvAddr={ns}\nmetricsPort=-1\n"
                        f"brokerConfigPaths={':'.join(paths)}\ncontainerStateFile={d / 'container-state.json'}\n"
                        f"logsRoot={d / 'logs'}\n")
        journal = (self.root / "journals" / f"{node}.jsonl") if powerloss else None
        if journal is not None:
            journal.parent.mkdir(exist_ok=True)
        return ProcNode(node, "container", [str(VENV_BIN / "mqbrokercontainer"), "-c", str(conf)],
                        d / "container.log", [d / "store"], journal=journal, prefix=self.net.prefix(node),
                        bsets=sorted({s.bset for s in self.spots if s.node == node}))

    def addr(self, s: BrokerSpot) -> str:
        return self.net.client_addr(s.node, s.port)

    def topology(self) -> dict[str, list[str]]:
        """Broker address -> [its process, its broker set] (recorded in the history for the checkers)."""
        return {self.addr(s): [s.node, s.bset] for s in self.spots}

    # ------------------------------------------------------------------ processes

    def start(self) -> None:
        self.ctl.start()
        for c in self.containers:
            if not self.nodes[c].alive():
                self.nodes[c].start()

    def stop(self) -> None:
        for c in self.containers:
            self.nodes[c].stop()
        self.ctl.stop()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def client(self) -> RemotingClient:
        if self._client is None:
            self._client = RemotingClient(connect_timeout=1.0)
        return self._client

    def network_fault_limit(self, names: list[str]) -> str | None:
        if isinstance(self.net, ProxyNet):
            return ("HA in proxy mode: the brokers reach the controllers, the name servers and each other directly "
                    "(addresses come from the controller), so no network fault can cut them: use --net netns")
        return None

    # ------------------------------------------------------------------ where things are

    def broker_sets(self) -> dict[str, list[str]]:
        return {b: [self.addr(s) for s in self.spots if s.bset == b] for b in self.sets}

    def namesrv_addr(self) -> str:
        return ";".join(self.net.client_addr(nm, p) for nm, p in zip(self.ctl.names, self.ns_ports, strict=True))

    def controller_addrs(self) -> list[str]:
        return self.ctl.controller_addrs()

    def client_addr_of(self, advertised: str) -> str:
        return self._advertised.get(advertised) or self.ctl.client_addr_of(advertised)

    async def controller_leader(self) -> str | None:
        return await self.ctl.controller_leader()

    async def master_addr(self, bset: str) -> str | None:
        """The set's master as the name servers route it (broker id 0), cached for ``ROUTE_TTL_S``."""
        if time.monotonic() - self._route_at > ROUTE_TTL_S:
            if self._route_lock is None:
                self._route_lock = asyncio.Lock()
            async with self._route_lock:
                if time.monotonic() - self._route_at > ROUTE_TTL_S:
                    await self._refresh_route()
        return self._masters.get(bset)

    async def _refresh_route(self) -> None:
        """Ask the name servers in turn (the first that answers wins); keep the last route if none answers."""
        addrs = self.namesrv_addr().split(";")
        for i in range(len(addrs)):
            ns = addrs[(self._ns_next + i) % len(addrs)]
            try:
                r = await self.client().invoke(ns, request(105, {"topic": "TBW102"}), 0.5)
            except NET_ERRORS:
                continue
            if r.code != 0:
                continue
            masters: dict[str, str | None] = dict.fromkeys(self.sets)
            for bd in orjson.loads(r.body or b"{}").get("brokerDatas", []):
                adv = bd.get("brokerAddrs", {}).get("0")
                if bd.get("brokerName") in masters and adv:
                    masters[bd["brokerName"]] = self.client_addr_of(str(adv))
            self._masters = masters
            self._ns_next = (self._ns_next + i) % len(addrs)
            break
        self._route_at = time.monotonic()

    async def roles(self, t0: float) -> list[RoleSample]:
        """One GET_BROKER_RUNTIME_INFO poll of every broker, concurrently."""
        polls = await asyncio.gather(*(self._role(s, t0) for s in self.spots))
        return [p for p in polls if p is not None]

    async def _role(self, s: BrokerSpot, t0: float) -> RoleSample | None:
        call = time.monotonic() - t0
        try:
            r = await self.client().invoke(self.addr(s), request(28, {}), 1.0)
        except NET_ERRORS:
            return None
        if r.code != 0:
            return None
        return role_sample(s.bset, self.addr(s), orjson.loads(r.body or b"{}").get("table", {}), call,
                           time.monotonic() - t0)

    async def replica_state(self) -> dict[str, Any]:
        """Per broker set, the controller's view: master address, master epoch, sync state set (addresses)."""
        c = ControllerClient(self.controller_addrs(), client=self.client(), timeout=1.0)
        table = await c.sync_state_data(self.sets)
        out: dict[str, Any] = {}
        for bset, info in table.items():
            master = info.get("masterAddress")
            out[bset] = {"master": self.client_addr_of(master) if master else None,
                         "epoch": int(info.get("masterEpoch", 0)),
                         "sss": sorted(self.client_addr_of(x["brokerAddress"]) for x in info.get("inSyncReplicas", []))}
        return out

    async def wait_ready(self, names: list[str] | None = None, timeout: float = HA_READY_TIMEOUT_S) -> None:
        """Every process up (and not paused), a controller leader, and in every broker set: a master the
        controller names, with every replica in the sync state set, routed by the name servers and answering as
        master at the controller's epoch. So every fault starts from a fully replicated deployment."""

        async def ready() -> bool:
            for n in self.nodes.values():
                if not n.alive():
                    raise RuntimeError(f"{n.name} exited:\n{n.tail()}")
                if n.paused:
                    return False
            if await self.controller_leader() is None:
                return False
            state = await self.replica_state()
            self._route_at = -1.0
            for bset in self.sets:
                st = state.get(bset)
                if not st or not st["master"] or len(st["sss"]) < self.replicas:
                    return False
                if await self.master_addr(bset) != st["master"]:
                    return False
            polls = {p.broker: p for p in await self.roles(time.monotonic())}
            return all((p := polls.get(state[b]["master"])) is not None and p.master and p.epoch == state[b]["epoch"]
                       for b in self.sets)

        await until(ready, timeout, "every set with a master, a full sync state set and a route")

    def settings(self) -> dict[str, Any]:
        return {"deployment": self.name, "flush": self.flush, "net": self.net.kind, "replicas": self.replicas,
                "layout": {b: [s.node for s in self.spots if s.bset == b] for b in self.sets},
                "broker_config": self.broker_extra, "controller": HA_CONTROLLER_DEFAULTS,
                "raft_offsets": self.ctl.offsets}


def role_sample(bset: str, addr: str, table: dict[str, Any], call: float, ret: float) -> RoleSample:
    """A broker's runtime info as a role sample. In controller mode a broker reports masterEpoch 0 until the
    controller has given it a role: then it is not counted as master, whatever its configured brokerRole."""
    epoch = int(table["masterEpoch"]) if str(table.get("masterEpoch", "")).isdigit() else None
    master = table.get("brokerRole", "") != "SLAVE" and bool(epoch)
    writable = master and table.get("status", "running") == "running"
    return RoleSample(bset, addr, master, writable, epoch, call, ret)
