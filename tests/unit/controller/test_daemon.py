"""The daemon wiring (controller port + name-server role) with the fake Raft standing in for the driver."""

from __future__ import annotations

import pathlib

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode as Q
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import request
from controller.config import ControllerConfig, config_from_properties
from controller.daemon import ControllerDaemon
from controller.raft_port import RaftLike
from controller.statemachine.machine import ControllerStateMachine
from tests.support import free_port
from tests.unit.controller.fake_raft import FakeRaft


def _free_port() -> int:
    return free_port()  # outside the kernel's ephemeral range (tests/support.py)


async def test_daemon_serves_controller_and_namesrv_roles(tmp_path: pathlib.Path) -> None:
    port, ns_port = _free_port(), _free_port()
    cfg = config_from_properties({
        "controllerDLegerGroup": "g", "controllerDLegerPeers": f"n0-127.0.0.1:{port}", "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(tmp_path), "controllerListenHost": "127.0.0.1", "namesrvListenPort": str(ns_port)})

    def fake(c: ControllerConfig, sm: ControllerStateMachine) -> RaftLike:
        return FakeRaft(sm, node_id=c.self_id, peers=c.peers)

    d = ControllerDaemon(cfg, raft_factory=fake)
    await d.start()
    client = RemotingClient()
    try:
        assert d.namesrv_port == ns_port and (tmp_path / "n0").is_dir()
        r = await client.invoke(f"127.0.0.1:{port}", request(Q.CONTROLLER_GET_METADATA_INFO), 3)
        assert r.code == RC.SUCCESS and r.ext["isLeader"] == "true" and r.ext["controllerLeaderAddress"] == cfg.self_addr
        r = await client.invoke(f"127.0.0.1:{ns_port}", request(Q.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"}), 3)
        assert r.code == RC.TOPIC_NOT_EXIST
        # the controller port does not answer name-server requests, and vice versa
        r = await client.invoke(f"127.0.0.1:{port}", request(Q.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"}), 3)
        assert r.code == RC.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await client.close()
        await d.stop()
