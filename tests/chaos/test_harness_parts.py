"""Harness parts without a deployment: message ids across broker sets, the fault generator's targets, the cut
recorder, and (root) network namespaces added in two parts with loss on both directions."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerd.remoting import request
from brokerd.remoting.command import RemotingCommand
from tests.chaos.harness.history import FaultEvent, History
from tests.chaos.harness.nemesis import CONTAINER_KINDS, CutRecorder, generate
from tests.chaos.harness.net import NetnsNet, netns_available, partition
from tests.chaos.harness.workload import BrokerWorkload, WorkloadSpec
from tests.support import free_port


class _TwoSets:
    """Just enough of a deployment for the producers: two broker sets, each with one (fake) master."""

    def broker_sets(self) -> dict[str, list[str]]:
        return {"broker-a": ["a:1"], "broker-b": ["b:1"]}

    async def master_addr(self, bset: str) -> str | None:
        return self.broker_sets()[bset][0]


async def test_message_ids_are_unique_across_broker_sets() -> None:
    """Every set has producers p0, p1 sending to queues 0..n: the ids must still differ (they key the checks:
    an id acknowledged in two sets would hide a loss in one of them)."""
    h = History()
    w = BrokerWorkload(_TwoSets(), h, time.monotonic(), WorkloadSpec(producers=2, queues=2), 1)  # type: ignore[arg-type]
    offsets: dict[str, int] = {}

    async def invoke(addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        offsets[addr] = offsets.get(addr, -1) + 1
        await asyncio.sleep(0)  # sleep-ok: yield, as a network answer would
        return request(0, {"queueOffset": str(offsets[addr]), "queueId": cmd.ext["e"]})

    w.client.invoke = invoke  # type: ignore[method-assign]
    tasks = [asyncio.ensure_future(w.sender(f"p{p}", b, q)) for b in ("broker-a", "broker-b") for p in (0, 1)
             for q in (0, 1)]
    while sum(1 for s in h.sends if s.ok) < 400:
        await asyncio.sleep(0.001)  # sleep-ok: let the fake senders run
    w.stop.set()
    await asyncio.gather(*tasks)
    acked = [s.id for s in h.sends if s.ok]
    assert len(acked) == len(set(acked)) and {s.broker for s in h.sends} == {"a:1", "b:1"}
    await w.client.close()


def test_container_only_faults_get_a_container_target() -> None:
    plan = generate(5, ["cut-ctl", "cut-peers", "kill"], 30, targets=["leader", "controller", "container", "c1"])
    assert {f.target for f in plan if f.kind in CONTAINER_KINDS} <= {"container", "c1"}
    assert {f.target for f in plan if f.kind == "kill"} >= {"leader", "controller"}


def test_the_cut_recorder_keeps_every_directed_pair() -> None:
    blocked: list[tuple[str, str]] = []

    class Net:
        def block(self, src: str, dst: str) -> None:
            blocked.append((src, dst))

    ev = FaultEvent("isolate", "c0", 0.0)
    partition(CutRecorder(Net(), ev.cut), [["c0"], ["n0", "c1"]])
    assert sorted(map(tuple, ev.cut)) == sorted(blocked) == [("c0", "c1"), ("c0", "n0"), ("c1", "c0"), ("n0", "c0")]


def _nft_rules(net: NetnsNet, name: str) -> str:
    return subprocess.run(["ip", "netns", "exec", net.ns(name), "nft", "list", "table", "inet", "chaos"],
                          capture_output=True, text=True, timeout=10).stdout


def _reaches(net: NetnsNet, src: str, dst: str) -> bool:
    """A TCP connection from ``src``'s namespace to a listener in ``dst``'s (python, no ping needed)."""
    port = free_port()
    srv = subprocess.Popen(["ip", "netns", "exec", net.ns(dst), sys.executable, "-c",
                            "import socket,sys; s=socket.create_server((sys.argv[1], int(sys.argv[2]))); "
                            "c, _ = s.accept(); c.sendall(b'ok')", net.host(dst), str(port)])
    code = ("import socket,sys,time\nend=time.time()+10\nwhile True:\n try:\n"
            "  print(socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).recv(2).decode()); break\n"
            " except OSError:\n  if time.time()>end: raise\n  time.sleep(0.05)\n")  # sleep-ok: listener start
    try:
        out = subprocess.run(["ip", "netns", "exec", net.ns(src), sys.executable, "-c", code, net.host(dst),
                              str(port)], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() == "ok"
    finally:
        srv.kill()
        srv.wait(5)


@pytest.mark.skipif(netns_available() is not None, reason=f"network namespaces: {netns_available()}")
def test_netns_nodes_added_in_two_parts_share_one_bridge_and_loss_hits_both_ways(tmp_path: Path) -> None:
    net = NetnsNet(seed=3)
    try:
        net.setup(["n0", "n1"])  # the controller group
        net.setup(["c0"])  # then the containers
        assert len(set(net.ips.values())) == 3 and net.host("c0").startswith(net.subnet)
        assert _reaches(net, "c0", "n1")  # across the parts: one bridge
        if net.nft:
            net.slow(["c0"], 0.0, 0.0, 0.05)
            rules = _nft_rules(net, "c0")
            assert rules.count("numgen random mod 1000 < 50 drop") == 2, rules
            net.heal()
            assert "numgen" not in _nft_rules(net, "c0")
        with pytest.raises(ValueError):
            net.setup(["c0"])
    finally:
        net.teardown()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert net.run_id not in names

