"""A ControllerServer on real loopback sockets over the in-memory FakeRaft, plus fake brokers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection, ConnectionClosed, Dispatcher
from brokerd.remoting.server import RemotingServer
from controller.config import ControllerConfig, config_from_properties
from controller.server import ControllerServer
from controller.statemachine.machine import ControllerStateMachine
from tests.unit.controller.fake_raft import FakeRaft

PEERS = "n0-127.0.0.1:19001;n1-127.0.0.1:19002;n2-127.0.0.1:19003"  # port-ok: data, nothing binds it


async def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll a condition until it holds or the deadline passes."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)  # sleep-ok: poll interval of a deadline-bounded wait


def make_config(**overrides: str) -> ControllerConfig:
    props = {"controllerDLegerGroup": "g", "controllerDLegerPeers": PEERS, "controllerDLegerSelfId": "n0",
             "controllerStorePath": "/tmp/unused-controller-store"}
    props.update(overrides)
    return config_from_properties(props)


class Harness:
    def __init__(self, cfg: ControllerConfig, leader: bool = True) -> None:
        self.cfg = cfg
        self.sm = ControllerStateMachine()
        self.raft = FakeRaft(self.sm, node_id="n0", leader=leader, peers=cfg.peers)
        self.srv = ControllerServer(cfg, self.raft, self.sm)
        disp = Dispatcher("controller")
        disp.register_all(self.srv.handlers())
        self.remoting = RemotingServer(disp, host="127.0.0.1", port=0, name="controller")
        self.client = RemotingClient()

    async def start(self) -> None:
        await self.srv.start()
        await self.remoting.start()

    async def stop(self) -> None:
        await self.client.close()
        await self.remoting.stop(grace=1)
        await self.srv.stop()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.remoting.port}"

    async def call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
        return await self.client.invoke(self.addr, request(code, ext or {}, body), 5.0)


@dataclass
class FakeBroker:
    """Listens for NOTIFY_BROKER_ROLE_CHANGED and heartbeats the controller on its own connection."""

    cluster: str
    name: str
    broker_id: int
    controller_addr: str
    notifications: list[RemotingCommand] = field(default_factory=list)
    server: RemotingServer | None = None
    client: RemotingClient = field(default_factory=RemotingClient)
    beating: asyncio.Task[None] | None = None
    more_controllers: list[str] = field(default_factory=list)  # heartbeats go to every controller

    async def start(self) -> None:
        disp = Dispatcher("broker")

        def on_notify(conn: Connection, cmd: RemotingCommand) -> None:
            self.notifications.append(cmd)

        disp.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, on_notify)
        self.server = RemotingServer(disp, host="127.0.0.1", port=0)
        await self.server.start()

    @property
    def addr(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    def heartbeat_cmd(self, epoch: int = 0, max_offset: int = 0) -> RemotingCommand:
        return request(RequestCode.BROKER_HEARTBEAT, {
            "clusterName": self.cluster, "brokerName": self.name, "brokerId": str(self.broker_id),
            "brokerAddr": self.addr, "epoch": str(epoch), "maxOffset": str(max_offset), "confirmOffset": "0",
            "heartbeatTimeoutMills": "10000"}, oneway=True)

    async def heartbeat_once(self, epoch: int = 0, max_offset: int = 0) -> None:
        for addr in [self.controller_addr, *self.more_controllers]:
            try:
                await self.client.invoke_oneway(addr, self.heartbeat_cmd(epoch, max_offset))
            except (ConnectionClosed, OSError):
                if addr == self.controller_addr and not self.more_controllers:
                    raise

    def start_beating(self, interval: float, max_offset: int = 0) -> None:
        async def loop() -> None:
            while True:
                await self.heartbeat_once(max_offset=max_offset)
                await asyncio.sleep(interval)  # sleep-ok: the heartbeat period itself
        self.beating = asyncio.get_running_loop().create_task(loop())

    async def stop_beating(self, close_channel: bool = False) -> None:
        if self.beating is not None:
            self.beating.cancel()
            await asyncio.gather(self.beating, return_exceptions=True)
            self.beating = None
        if close_channel:
            self.client.close_connection(self.controller_addr)

    async def stop(self) -> None:
        await self.stop_beating()
        await self.client.close()
        if self.server is not None:
            await self.server.stop(grace=1)
