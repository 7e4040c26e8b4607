"""The NFQUEUE delay (``harness/delayer.py``): its schedule and netlink encoding (any user), and (root) a delay
between two network namespaces measured by TCP round trips, gone after the heal with nothing left behind."""

from __future__ import annotations

import json
import statistics
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import delayer
from tests.chaos.harness.delayer import Schedule, flow_key, nlmsg, parse_attrs, parse_messages
from tests.chaos.harness.net import NetnsNet, netns_available
from tests.support import free_port


def _ipv4(src: bytes, dst: bytes, sport: int, dport: int, ihl: int = 5) -> bytes:
    head = bytes([0x40 | ihl]) + b"\0" * 8 + bytes([6]) + b"\0\0" + src + dst + b"\0" * (ihl * 4 - 20)
    return head + struct.pack("!HH", sport, dport) + b"\0" * 16


def test_flow_keys_tell_flows_and_directions_apart_and_skip_ip_options() -> None:
    a, b = bytes([10, 0, 0, 2]), bytes([10, 0, 0, 3])
    assert flow_key(_ipv4(a, b, 1000, 80)) == flow_key(_ipv4(a, b, 1000, 80, ihl=7))  # options skipped
    keys = {flow_key(_ipv4(a, b, 1000, 80)), flow_key(_ipv4(b, a, 80, 1000)), flow_key(_ipv4(a, b, 1001, 80))}
    assert len(keys) == 3


def test_the_schedule_delays_within_the_jitter_and_keeps_each_flows_order() -> None:
    s = Schedule(100.0, 50.0, seed=4)
    arrivals = [(bytes([i % 3]), i, i * 0.001) for i in range(300)]  # 3 interleaved flows, 1 packet per ms
    at = {pid: s.add(key, pid, now) for key, pid, now in arrivals}
    assert all(now + 0.05 <= at[pid] <= now + 0.15 + 0.05 for _, pid, now in arrivals[:3])
    assert all(at[pid] >= now + 0.05 for _, pid, now in arrivals)
    released = s.due(10.0)
    assert sorted(released) == list(range(300)) and s.wait_s(10.0) is None
    for flow in range(3):
        ids = [pid for pid in released if pid % 3 == flow]
        assert ids == sorted(ids)  # FIFO per flow
    assert released != sorted(released)  # ... but flows overtake each other
    delays = sorted(at[pid] - now for _, pid, now in arrivals)
    assert 0.09 < statistics.median(delays) < 0.16


def test_nfnetlink_messages_round_trip() -> None:
    msg = nlmsg(delayer.NFQNL_MSG_VERDICT, delayer.NLM_F_REQUEST, 7, 3,
                [(delayer.NFQA_VERDICT_HDR, struct.pack("!II", 1, 42)), (5, b"abc")])
    [(kind, seq, payload)] = parse_messages(msg + b"")
    assert kind == (3 << 8) | 1 and seq == 7 and struct.unpack_from("!BBH", payload) == (0, 0, 3)
    attrs = parse_attrs(payload)
    assert struct.unpack("!II", attrs[delayer.NFQA_VERDICT_HDR]) == (1, 42) and attrs[5] == b"abc"
    assert len(msg) % 4 == 0 and len(parse_messages(msg + msg)) == 2


ECHO = ("import socket,sys\ns=socket.create_server((sys.argv[1], int(sys.argv[2])))\nprint('ready', flush=True)\n"
        "while True:\n c,_=s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
        " while (d := c.recv(64)):\n  c.sendall(d)\n c.close()\n")
RTT = ("import json,socket,sys,time\nc=socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)\n"
       "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\nout=[]\nfor _ in range(int(sys.argv[3])):\n"
       " t=time.perf_counter(); c.sendall(b'x'*16); got=b''\n while len(got) < 16:\n  got += c.recv(16)\n"
       " out.append((time.perf_counter()-t)*1000)\nprint(json.dumps(out))\n")


@pytest.fixture
def pair() -> Iterator[tuple[NetnsNet, int]]:
    """Namespaces n0 and n1 with an echo server in n1; yields (net, the server's port)."""
    net = NetnsNet(seed=11)
    srv = None
    try:
        net.setup(["n0", "n1"])
        port = free_port()
        srv = subprocess.Popen([*net.prefix("n1"), sys.executable, "-c", ECHO, net.host("n1"), str(port)],
                               stdout=subprocess.PIPE, text=True)
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        yield net, port
    finally:
        if srv is not None:
            srv.kill()  # our own child
            srv.wait(5)
        net.teardown()


def _rtts(net: NetnsNet, port: int, n: int) -> list[float]:
    out = subprocess.run([*net.prefix("n0"), sys.executable, "-c", RTT, net.host("n1"), str(port), str(n)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def _leftovers(net: NetnsNet) -> list[str]:
    """NFQUEUE rules or bound queues in the nodes' namespaces."""
    ipt = delayer.iptables() or "iptables"
    found = []
    for name in net.ips:
        rules = subprocess.run([*net.prefix(name), ipt, "-w", "-S"], capture_output=True, text=True, timeout=10)
        found += [f"{name}: {r}" for r in rules.stdout.splitlines() if "NFQUEUE" in r]
        queues = subprocess.run([*net.prefix(name), "cat", "/proc/net/netfilter/nfnetlink_queue"],
                                capture_output=True, text=True, timeout=10)
        found += [f"{name}: queue {q}" for q in queues.stdout.splitlines() if q.strip()]
    return found


@pytest.mark.skipif(netns_available() is not None, reason=f"network namespaces: {netns_available()}")
@pytest.mark.skipif(delayer.iptables() is None, reason="iptables not installed (Debian package iptables)")
def test_delay_between_namespaces_by_tcp_round_trips(pair: tuple[NetnsNet, int]) -> None:
    net, port = pair
    before = statistics.median(_rtts(net, port, 20))
    net.slow(["n1"], 100.0, 50.0, 0.0)  # both directions: every round trip is delayed twice
    proc = net._delays["n1"].proc
    assert proc is not None and len(_leftovers(net)) == 3  # two rules, one queue
    both = _rtts(net, port, 12)
    net.heal()
    net.slow(["n1"], 100.0, 50.0, 0.0, direction="out")  # only what n1 sends: once per round trip
    out_only = _rtts(net, port, 12)
    net.heal()
    after = _rtts(net, port, 20)
    print(f"\nRTT medians: before {before:.2f} ms, both {statistics.median(both):.1f} ms "
          f"(min {min(both):.1f}), out only {statistics.median(out_only):.1f} ms (min {min(out_only):.1f}), "
          f"after {statistics.median(after):.2f} ms; delayers: {net.delay_reports}")
    assert before < 10 and statistics.median(after) < 10
    assert statistics.median(both) >= 150 and min(both) >= 90
    assert statistics.median(out_only) >= 90 and min(out_only) >= 45
    assert all(r["packets"] > 0 and r["overruns"] == 0 and r["verdict_errors"] == 0 for r in net.delay_reports)
    assert proc.poll() is not None and not Path(f"/proc/{proc.pid}/cmdline").exists()
    assert _leftovers(net) == [] and not net._delays
