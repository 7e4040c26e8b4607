"""An HA deployment as real processes on free ports: the 3-node controller group (which also serves the name-server
role) and N broker containers in the peer-to-peer cross layout of conf/container/ (container i masters set i and
holds a slave of every other set). Shared by the HA integration tests, scripts/bench/ha.py and the chaos harness.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import time
from typing import Any

import orjson

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import request
from controller.client import ControllerClient
from tests.integration.controller.cluster import ControllerProcs
from tests.support import Daemon, broker_port, can_connect, container_cmd, free_port, wait_for

SETS = "abcdefgh"


class HACluster:
    """``containers`` containers, ``containers`` broker sets, ``replicas`` brokers per set (1 master + slaves).

    ``broker_extra`` goes into every broker config (RocketMQ keys), ``controller_extra`` into every controller's.
    """

    def __init__(self, tmp: pathlib.Path, containers: int = 2, replicas: int = 2, *,
                 broker_extra: dict[str, Any] | None = None, controller_extra: dict[str, str] | None = None,
                 sets: int | None = None) -> None:  # fmt: skip
        if not 1 <= replicas <= containers:
            raise ValueError("replicas must be between 1 and the number of containers")
        self.tmp = tmp
        self.n = containers
        self.sets = [f"broker-{SETS[i]}" for i in range(containers if sets is None else sets)]
        self.namesrv_ports = [free_port() for _ in range(3)]
        extra = {"brokerHeartbeatTimeoutMs": "1500", **(controller_extra or {})}
        self.ctl = ControllerProcs(tmp, extra=extra)
        for i, p in enumerate(self.namesrv_ports):  # each member also serves the name-server role
            conf = tmp / f"n{i}.conf"
            conf.write_text(conf.read_text() + f"namesrvListenPort={p}\n")
        self.broker_ports: dict[tuple[str, int], int] = {}  # (set, container) -> listen port
        self.daemons: dict[int, Daemon] = {}
        self.confs = [self._write_container(c, replicas, broker_extra or {}) for c in range(containers)]

    # ------------------------------------------------------------------ configuration

    @property
    def namesrv_addrs(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.namesrv_ports]

    @property
    def namesrv(self) -> str:
        return ";".join(self.namesrv_addrs)

    def _write_container(self, c: int, replicas: int, extra: dict[str, Any]) -> pathlib.Path:
        paths = []
        for si, name in enumerate(self.sets):
            holders = [(si + k) % self.n for k in range(replicas)]  # the master's container, then the next ones
            if c not in holders:
                continue
            rank = holders.index(c)
            port = broker_port()
            self.broker_ports[(name, c)] = port
            props: dict[str, Any] = {
                "brokerClusterName": "DefaultCluster", "brokerName": name, "brokerId": rank,
                "brokerRole": "SYNC_MASTER" if rank == 0 else "SLAVE", "brokerElectionPriority": rank + 1,
                "brokerIP1": "127.0.0.1", "listenPort": port, "storePathRootDir": str(self.tmp / f"c{c}" / name),
                "enableControllerMode": "true", "controllerAddr": ";".join(self.ctl.addrs),
                "allAckInSyncStateSet": "true", "brokerHeartbeatInterval": 300, "checkSyncStateSetPeriod": 1000,
                "haMaxTimeSlaveNotCatchup": 3000,
                "flushDiskType": "ASYNC_FLUSH", "registerNameServerPeriod": 5000,
                "mappedFileSizeCommitLog": 64 * 1024 * 1024, "maxHashSlotNum": 50_000, "maxIndexNum": 200_000,
                "diskSpaceWarningLevelRatio": 0.99, "diskSpaceCleanForciblyRatio": 0.99, **extra}  # fmt: skip
            path = self.tmp / f"c{c}-{name}.conf"
            path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            paths.append(str(path))
        conf = self.tmp / f"container-{c}.conf"
        conf.write_text(f"listenPort={free_port()}\nembeddedNamesrvEnable=false\nnamesrvAddr={self.namesrv}\n"
                        f"metricsPort=0\nbrokerConfigPaths={':'.join(paths)}\n"
                        f"containerStateFile={self.tmp / f'c{c}-state.json'}\nlogsRoot={self.tmp / 'logs'}\n")
        return conf

    # ------------------------------------------------------------------ processes

    def start(self, timeout: float = 60) -> HACluster:
        try:
            self.ctl.start_all()
            wait_for(lambda: all(can_connect(p) for p in self.namesrv_ports), timeout, "controllers' name servers")
            for c in range(self.n):
                self.start_container(c)
            for c in range(self.n):
                self.wait_container(c, timeout)
            wait_for(lambda: all(self.master_of(s) for s in self.sets), timeout, "a registered master in every set")
        except AssertionError as e:  # a deployment that did not come up: say what its processes said
            raise AssertionError(f"{e}\n{self.startup_report()}") from None
        return self

    def startup_report(self, lines: int = 30) -> str:
        """Each process's state and the end of its log (a start that timed out)."""
        out = [f"--- controller {i} ({'alive' if self.ctl.alive(i) else 'exited'}) ---\n{self.ctl.tail(i, lines)}"
               for i in range(len(self.ctl.addrs))]
        out += [f"--- container {c} ({'alive' if d.alive() else 'exited'}) ---\n"
                + "\n".join(d.output().splitlines()[-lines:]) for c, d in self.daemons.items()]
        return "\n".join(out)

    def start_container(self, c: int) -> None:
        self.daemons[c] = Daemon(container_cmd(self.confs[c]), self.tmp / f"container-{c}.log").start()

    def wait_container(self, c: int, timeout: float = 60) -> None:
        ports = [p for (_, cc), p in self.broker_ports.items() if cc == c]
        wait_for(lambda: all(can_connect(p) for p in ports), timeout, f"container {c}'s brokers")

    def kill_container(self, c: int, sig: int = signal.SIGKILL) -> None:
        d = self.daemons[c]
        if sig == signal.SIGKILL:
            d.kill()
        else:
            assert d.proc is not None
            d.proc.send_signal(sig)

    def stop(self) -> None:
        for d in self.daemons.values():
            if d.alive():
                d.stop(timeout=20)
        self.ctl.stop_all()

    def logs(self, lines: int = 60) -> str:
        out = []
        for c, d in self.daemons.items():
            out.append(f"--- container {c} ---\n" + "\n".join(d.output().splitlines()[-lines:]))
        return "\n".join(out)

    # ------------------------------------------------------------------ observation

    def broker_addr(self, name: str, c: int) -> str:
        return f"127.0.0.1:{self.broker_ports[(name, c)]}"

    def master_of(self, name: str, topic: str = "TBW102") -> str | None:
        """The set's master address as the name servers route it (None while there is none)."""
        return asyncio.run(self.amaster_of(name, topic))

    async def amaster_of(self, name: str, topic: str = "TBW102", client: RemotingClient | None = None) -> str | None:
        own = client is None
        cli = client or RemotingClient()
        try:
            for ns in self.namesrv_addrs:
                try:
                    r = await cli.invoke(ns, request(105, {"topic": topic}), 1.0)
                except Exception:  # noqa: BLE001 - that name server is down: ask the next
                    continue
                if r.code != 0 or not r.body:
                    continue
                for bd in orjson.loads(r.body).get("brokerDatas", []):
                    if bd.get("brokerName") == name:
                        addr = bd.get("brokerAddrs", {}).get("0")
                        if addr:
                            return str(addr)
            return None
        finally:
            if own:
                await cli.close()

    async def runtime(self, addr: str, client: RemotingClient | None = None) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table."""
        own = client is None
        cli = client or RemotingClient()
        try:
            r = await cli.invoke(addr, request(28, {}), 2.0)
            return dict(orjson.loads(r.body).get("table", {})) if r.code == 0 and r.body else {}
        finally:
            if own:
                await cli.close()

    def container_of(self, addr: str) -> int:
        port = int(addr.rsplit(":", 1)[1])
        return next(c for (_, c), p in self.broker_ports.items() if p == port)

    def in_sync(self, name: str) -> int:
        """How many replicas of set ``name`` the controllers hold in its sync state set (0 while none answers)."""
        async def ask() -> int:
            c = ControllerClient(self.ctl.addrs)
            try:
                table = await c.sync_state_data([name])
            finally:
                await c.close()
            return len(table.get(name, {}).get("inSyncReplicas", []))
        try:
            return asyncio.run(ask())
        except Exception:  # noqa: BLE001 - no leader yet, a controller restarting: ask again
            return 0

    def wait_in_sync(self, name: str, replicas: int, timeout: float = 30) -> None:
        """Until ``replicas`` replicas of set ``name`` are in its sync state set (electable if the master fails)."""
        wait_for(lambda: self.in_sync(name) >= replicas, timeout, f"{replicas} replicas of {name} in sync")

    def wait_master(self, name: str, not_addr: str | None = None, timeout: float = 30) -> str:
        def found() -> str | None:
            m = self.master_of(name)
            return m if m and m != not_addr else None

        addr: str = wait_for(found, timeout, f"a master of {name}" + (f" other than {not_addr}" if not_addr else ""))
        return addr


def elapsed_ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)
