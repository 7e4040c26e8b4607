"""Networks a deployment's processes run in, and the network faults on them.

Node names are the deployment's process names; ``CLIENT`` is the harness itself (producers, consumers, the
controller client). Faults: ``block(src, dst)`` drops packets from src to dst (one way; ``partition`` blocks
both ways between groups), ``slow(names, delay_ms, jitter_ms, loss)`` and ``heal()``.

* ``LoopbackNet`` — everything on 127.0.0.1, no network faults (``Unsupported``).
* ``NetnsNet`` (root) — each node in its own network namespace, a veth pair to a per-run bridge in the root
  namespace (the harness is ``CLIENT`` at the bridge address). Drops with nftables in the nodes' namespaces
  (``nft``; without it ``ip route`` blackholes, which fail sends at once instead of silently); loss with
  nftables ``numgen``; delay through NFQUEUE: iptables queues the node's packets to a delayer process in its
  namespace that holds each ``delay ± jitter`` ms, order kept per flow (``delayer.py``; no ``sch_netem``
  needed). Names are unique per run (``ch<pid hex><n>``) and removed by ``teardown`` (also on failure;
  ``cleanup_stale`` removes what a killed harness left).
* ``ProxyNet`` (any user) — every link through a fault-injecting TCP proxy (``proxy.py``); the deployment
  registers the links it can route through proxies (see ``deployments.py``).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from typing import Any, Protocol

from tests.support import free_port

from .delayer import NsDelay, iptables
from .proxy import ProxyHub

CLIENT = "client"


class Unsupported(RuntimeError):
    """This network cannot inject that fault here (the reason is the message)."""


class Network(Protocol):
    kind: str

    def setup(self, names: list[str]) -> None: ...
    def host(self, name: str) -> str: ...
    def prefix(self, name: str) -> list[str]: ...
    def client_addr(self, name: str, port: int) -> str: ...
    def block(self, src: str, dst: str) -> None: ...
    def slow(self, names: list[str], delay_ms: float, jitter_ms: float, loss: float) -> None: ...
    def heal(self) -> None: ...
    def teardown(self) -> None: ...


class Blocker(Protocol):
    def block(self, src: str, dst: str) -> None: ...


def partition(net: Blocker, groups: list[list[str]]) -> None:
    """Block every pair of nodes in different groups, both ways (a node in no group is not affected)."""
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            for x in a:
                for y in b:
                    net.block(x, y)
                    net.block(y, x)


class LoopbackNet:
    kind = "loopback"

    def setup(self, names: list[str]) -> None:
        pass

    def host(self, name: str) -> str:
        return "127.0.0.1"

    def prefix(self, name: str) -> list[str]:
        return []

    def client_addr(self, name: str, port: int) -> str:
        return f"127.0.0.1:{port}"

    def block(self, src: str, dst: str) -> None:
        raise Unsupported("loopback network: no network faults (use --net netns or --net proxy)")

    def slow(self, names: list[str], delay_ms: float, jitter_ms: float, loss: float) -> None:
        raise Unsupported("loopback network: no network faults (use --net netns or --net proxy)")

    def heal(self) -> None:
        pass

    def teardown(self) -> None:
        pass


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {res.stderr.strip() or res.stdout.strip()}")
    return res


def netns_available() -> str | None:
    """None when network namespaces can be used here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) not installed"
    return None


def _used_subnets() -> set[str]:
    out = _run(["ip", "-4", "-o", "addr", "show"], check=False).stdout
    return {".".join(m.split(".")[:3]) for m in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", out)}


class NetnsNet:
    kind = "netns"

    def __init__(self, seed: int = 0) -> None:
        why = netns_available()
        if why:
            raise Unsupported(f"network namespaces: {why}")
        self.run_id = f"{os.getpid():x}"[-5:] + f"{random.Random(seed).randrange(16 * 16):02x}"
        self.bridge = f"chb{self.run_id}"
        used = _used_subnets()
        rng = random.Random()
        self.subnet = next(s for s in (f"10.{rng.randrange(128, 250)}.{rng.randrange(1, 250)}" for _ in range(100))
                           if s not in used)
        self.client_ip = f"{self.subnet}.1"
        self.ips: dict[str, str] = {}
        self.nft = shutil.which("nft") is not None
        self._routes: list[list[str]] = []
        self._delays: dict[str, NsDelay] = {}
        self.delay_reports: list[dict[str, Any]] = []  # the delayers' counters, one per healed delay
        self._made: list[tuple[str, str]] = []  # ("ns", name) / ("link", name), for teardown

    def ns(self, name: str) -> str:
        return f"ch{self.run_id}{name}"

    def setup(self, names: list[str]) -> None:
        """Add these nodes (the bridge is made by the first call: a deployment of several parts, e.g. the
        controller group and the containers of an HA deployment, calls it once per part)."""
        try:
            if not self._made:
                _run(["ip", "link", "add", self.bridge, "type", "bridge"])
                self._made.append(("link", self.bridge))
                _run(["ip", "addr", "add", f"{self.client_ip}/24", "dev", self.bridge])
                _run(["ip", "link", "set", self.bridge, "up"])
            for name in names:
                if name in self.ips:
                    raise ValueError(f"node {name!r} is already set up")
                i = len(self.ips)
                self._add_node(name, f"{self.subnet}.{i + 2}", i)
        except BaseException:
            self.teardown()
            raise

    def _add_node(self, name: str, ip: str, i: int) -> None:
        ns, veth = self.ns(name), f"chv{self.run_id}{i}"
        _run(["ip", "netns", "add", ns])
        self._made.append(("ns", ns))
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"chp{self.run_id}{i}"])
        self._made.append(("link", veth))
        _run(["ip", "link", "set", f"chp{self.run_id}{i}", "netns", ns])
        _run(["ip", "-n", ns, "link", "set", f"chp{self.run_id}{i}", "name", "eth0"])
        _run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0"])
        for dev in ("eth0", "lo"):
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
        _run(["ip", "link", "set", veth, "master", self.bridge])
        _run(["ip", "link", "set", veth, "up"])
        if self.nft:
            self._nft(name, "add table inet chaos")
            for hook in ("input", "output"):
                self._nft(name, f"add chain inet chaos {hook} {{ type filter hook {hook} priority 0; policy accept; }}")
        self.ips[name] = ip

    def _nft(self, name: str, rule: str) -> None:
        _run(["ip", "netns", "exec", self.ns(name), "nft", *rule.split()])

    def host(self, name: str) -> str:
        return self.ips[name]

    def prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(name)]

    def client_addr(self, name: str, port: int) -> str:
        return f"{self.ips[name]}:{port}"

    def _ip(self, name: str) -> str:
        return self.client_ip if name == CLIENT else self.ips[name]

    def block(self, src: str, dst: str) -> None:
        if self.nft and dst != CLIENT:
            self._nft(dst, f"add rule inet chaos input ip saddr {self._ip(src)} drop")
        elif self.nft:
            self._nft(src, f"add rule inet chaos output ip daddr {self.client_ip} drop")
        else:
            cmd = ["ip", "route", "add", "blackhole", f"{self._ip(dst)}/32"]
            full = cmd if src == CLIENT else ["ip", "-n", self.ns(src), *cmd[1:]]
            _run(full)
            self._routes.append(full)

    def slow(self, names: list[str], delay_ms: float, jitter_ms: float, loss: float, direction: str = "both") -> None:
        """Delay (``delay_ms`` ± ``jitter_ms`` per packet) and loss on every link of these nodes; ``direction``
        (delay only): ``both``, ``out`` (packets the node sends) or ``in`` (packets it receives)."""
        for name in names:
            if delay_ms or jitter_ms:
                self._delay(name, delay_ms, jitter_ms, direction)
            if loss:  # both directions: every link of the node loses packets either way
                if not self.nft:
                    raise Unsupported("packet loss needs nftables (nft) in netns mode")
                for hook, dev in (("input", "iifname"), ("output", "oifname")):
                    self._nft(name, f"add rule inet chaos {hook} {dev} != lo numgen random mod 1000 < "
                                    f"{int(loss * 1000)} drop")

    def _delay(self, name: str, delay_ms: float, jitter_ms: float, direction: str) -> None:
        if iptables() is None:
            raise Unsupported("delay in netns mode needs iptables (Debian package iptables) for NFQUEUE")
        if name in self._delays:
            raise ValueError(f"{name} is already delayed")
        d = NsDelay(self.prefix(name), delay_ms, jitter_ms, direction, seed=len(self.delay_reports))
        try:
            d.start()
        except (OSError, RuntimeError) as e:
            raise Unsupported(f"NFQUEUE delay: {e}") from e
        self._delays[name] = d

    def heal(self) -> None:
        for name, d in list(self._delays.items()):
            self.delay_reports.append({"node": name, **d.stop()})
        self._delays.clear()
        for name in self.ips:
            if self.nft:
                for hook in ("input", "output"):
                    self._nft(name, f"flush chain inet chaos {hook}")
        for r in self._routes:
            _run([*r[: r.index("add")], "del", *r[r.index("add") + 1 :]], check=False)
        self._routes.clear()

    def teardown(self) -> None:
        if self.ips:
            self.heal()
        for kind, name in reversed(self._made):
            if kind == "ns":
                _run(["ip", "netns", "del", name], check=False)
            else:
                _run(["ip", "link", "del", name], check=False)
        self._made.clear()
        self.ips.clear()


def cleanup_stale() -> list[str]:
    """Remove namespaces and links of runs whose harness process is gone (names carry its pid)."""
    removed: list[str] = []
    if netns_available():
        return removed
    names = _run(["ip", "netns", "list"], check=False).stdout.split()
    links = re.findall(r"\d+: (ch[bv][0-9a-f]+)[@:]", _run(["ip", "-o", "link"], check=False).stdout)
    for n in [x for x in names if x.startswith("ch")] + links:
        pid_hex = n[3:8] if n.startswith(("chb", "chv")) else n[2:7]
        if not _pid_alive_hex(pid_hex):
            args = ["ip", "netns", "del", n] if n in names else ["ip", "link", "del", n]
            _run(args, check=False)
            removed.append(n)
    return removed


def _pid_alive_hex(tail: str) -> bool:
    """True if some live process id ends with these hex digits (the names keep only the last 5)."""
    try:
        want = int(tail, 16)
    except ValueError:
        return True
    return any(int(p) & 0xFFFFF == want for p in os.listdir("/proc") if p.isdigit())


class ProxyNet:
    """Links through ``ProxyHub``. Nodes run on 127.0.0.1; ``expose`` puts a proxy between the harness and a
    node's port, ``link`` between two nodes (the deployment must make the dialing node use the proxy port)."""

    kind = "proxy"

    def __init__(self, seed: int = 0) -> None:
        self.hub = ProxyHub(seed)
        self._exposed: dict[tuple[str, int], int] = {}

    def setup(self, names: list[str]) -> None:
        pass

    def host(self, name: str) -> str:
        return "127.0.0.1"

    def prefix(self, name: str) -> list[str]:
        return []

    def expose(self, name: str, port: int) -> int:
        if (name, port) not in self._exposed:
            listen = free_port()
            self.hub.add(CLIENT, name, listen, ("127.0.0.1", port))
            self._exposed[(name, port)] = listen
        return self._exposed[(name, port)]

    def link(self, src: str, dst: str, listen_port: int, target_port: int) -> None:
        self.hub.add(src, dst, listen_port, ("127.0.0.1", target_port))

    def client_addr(self, name: str, port: int) -> str:
        return f"127.0.0.1:{self.expose(name, port)}"

    def block(self, src: str, dst: str) -> None:
        self.hub.set_drop(src, dst)

    def slow(self, names: list[str], delay_ms: float, jitter_ms: float, loss: float) -> None:
        for name in names:
            for x in self.hub.touching(name):
                x.faults.delay_ms, x.faults.jitter_ms, x.faults.loss = delay_ms, jitter_ms, loss

    def heal(self) -> None:
        self.hub.heal()

    def teardown(self) -> None:
        self.hub.close()


def make_network(kind: str, seed: int) -> Network:
    """``auto``: network namespaces when root, else the proxy."""
    if kind == "auto":
        kind = "netns" if netns_available() is None else "proxy"
    if kind == "netns":
        return NetnsNet(seed)
    if kind == "proxy":
        return ProxyNet(seed)
    if kind == "loopback":
        return LoopbackNet()
    raise ValueError(f"unknown network {kind!r}: loopback, netns, proxy or auto")
