"""Packet delay without ``sch_netem``: iptables sends a namespace's packets to an NFQUEUE, and this process holds
each one ``delay ± jitter`` ms (uniform, as netem's default) before it accepts it. Per flow (protocol, addresses,
ports, direction) packets are released in the order they arrived: a packet's release time is at least its
predecessor's, so TCP is delayed, not reordered.

Two halves:

* the delayer process (``python delayer.py --queue N --delay-ms D --jitter-ms J``, run inside the target's
  namespace: queues are per network namespace). Standard library only: it speaks nfnetlink_queue over an
  ``AF_NETLINK`` / ``NETLINK_NETFILTER`` socket (``NfQueue``). It prints ``ready`` once bound, and when its
  standard input closes (the harness healing the fault, or the harness gone) it accepts everything it still
  holds, in order, prints its counters as one JSON line and exits;
* ``NsDelay`` (the harness's side): starts that process with ``ip netns exec``, inserts the iptables rules that
  queue the namespace's packets (``INPUT``, ``OUTPUT`` or both; loopback excluded; ``--queue-bypass``, so a
  missing delayer lets packets through instead of cutting the node off), and at heal removes the rules first,
  then lets the delayer drain.

Kernel needs: ``CONFIG_NETFILTER_XT_TARGET_NFQUEUE``, ``CONFIG_NETFILTER_NETLINK_QUEUE`` and iptables (legacy
preferred: ``iptables-legacy``, else ``iptables``)."""

from __future__ import annotations

import argparse
import errno
import heapq
import json
import os
import random
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD = 1, 2, 10
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_GSO = 4  # whole GSO packets are queued (fewer packets to hold; we never change them)
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1
COPY_RANGE = 80  # the IPv4 header (up to 60 bytes) and the ports
MAXLEN = 1 << 16  # packets the kernel may hold for the queue
_HDR = struct.Struct("=IHHII")  # nlmsghdr
_NFGEN = struct.Struct("!BBH")  # nfgenmsg: family, version, res_id (the queue number)


def nlmsg(msg_type: int, flags: int, seq: int, queue: int, attrs: list[tuple[int, bytes]]) -> bytes:
    """One nfnetlink_queue message: header, nfgenmsg, attributes (each padded to 4 bytes)."""
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, queue)
    for kind, data in attrs:
        body += struct.pack("=HH", 4 + len(data), kind) + data + b"\0" * (-len(data) % 4)
    return _HDR.pack(_HDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq, 0) + body


def parse_messages(buf: bytes) -> list[tuple[int, int, bytes]]:
    """(type, seq, payload after nlmsghdr) of every message in one netlink datagram."""
    out, off = [], 0
    while off + _HDR.size <= len(buf):
        length, kind, _flags, seq, _pid = _HDR.unpack_from(buf, off)
        if length < _HDR.size:
            break
        out.append((kind, seq, buf[off + _HDR.size: off + length]))
        off += (length + 3) & ~3
    return out


def parse_attrs(payload: bytes) -> dict[int, bytes]:
    """The attributes after the nfgenmsg of a message payload (nested flags masked off)."""
    out, off = {}, _NFGEN.size
    while off + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = payload[off + 4: off + length]
        off += (length + 3) & ~3
    return out


def flow_key(packet: bytes) -> bytes:
    """Protocol, source and destination address and ports of an IPv4 packet (its first bytes); other packets
    are keyed by their first 40 bytes."""
    if len(packet) >= 20 and packet[0] >> 4 == 4:
        ihl = (packet[0] & 15) * 4
        return packet[9:10] + packet[12:20] + packet[ihl: ihl + 4]
    return packet[:40]


@dataclass
class Schedule:
    """Release times: ``delay ± jitter`` after arrival, never before the flow's previous packet."""

    delay_ms: float
    jitter_ms: float
    seed: int = 0
    last: dict[bytes, float] = field(default_factory=dict)
    heap: list[tuple[float, int, int]] = field(default_factory=list)  # (release, arrival number, packet id)
    seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def add(self, key: bytes, packet_id: int, now: float) -> float:
        d = max(0.0, self.delay_ms + self.rng.uniform(-self.jitter_ms, self.jitter_ms)) / 1000
        at = max(now + d, self.last.get(key, 0.0))
        self.last[key] = at
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, packet_id))
        if len(self.last) > 4096:  # forget flows with nothing held
            self.last = {k: t for k, t in self.last.items() if t > now}
        return at

    def due(self, now: float) -> list[int]:
        """Packet ids whose time has come, in release order (so in arrival order within each flow)."""
        out = []
        while self.heap and self.heap[0][0] <= now:
            out.append(heapq.heappop(self.heap)[2])
        return out

    def everything(self) -> list[int]:
        return [heapq.heappop(self.heap)[2] for _ in range(len(self.heap))]

    def wait_s(self, now: float) -> float | None:
        return max(0.0, self.heap[0][0] - now) if self.heap else None


class NfQueue:
    """A bound nfnetlink_queue: packet notifications in, verdicts out."""

    def __init__(self, queue: int) -> None:
        self.queue = queue
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:  # room for many notifications between two reads (root: past rmem_max)
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        self.errors = 0  # error answers to verdicts
        self.overruns = 0  # notifications lost (ENOBUFS): their packets stay queued until unbind (dropped)

    def _config(self, attrs: list[tuple[int, bytes]]) -> None:
        self.seq += 1
        self.sock.send(nlmsg(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self.seq, self.queue, attrs))
        while True:
            for kind, seq, payload in parse_messages(self.sock.recv(65536)):
                if kind == NLMSG_ERROR and seq == self.seq:
                    err = -struct.unpack_from("=i", payload)[0]
                    if err:
                        raise OSError(err, f"nfqueue config {attrs[0][0]}: {os.strerror(err)}")
                    return

    def bind(self) -> None:
        self._config([(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET))])
        self._config([(NFQA_CFG_PARAMS, struct.pack("!IB", COPY_RANGE, NFQNL_COPY_PACKET)),
                      (NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", MAXLEN)),
                      (NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO)),
                      (NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO))])

    def receive(self) -> list[tuple[int, bytes]]:
        """(packet id, first bytes) of every notification waiting, without blocking."""
        out: list[tuple[int, bytes]] = []
        while True:
            try:
                buf = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return out
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                self.overruns += 1
                continue
            for kind, _seq, payload in parse_messages(buf):
                if kind == NLMSG_ERROR:
                    self.errors += int(struct.unpack_from("=i", payload)[0] != 0)
                elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    attrs = parse_attrs(payload)
                    if NFQA_PACKET_HDR in attrs:
                        out.append((struct.unpack_from("!I", attrs[NFQA_PACKET_HDR])[0], attrs.get(NFQA_PAYLOAD, b"")))

    def accept(self, ids: list[int]) -> None:
        """One verdict message per packet, sent in batches (the kernel applies them in order)."""
        for i in range(0, len(ids), 1024):
            self.sock.send(b"".join(nlmsg(NFQNL_MSG_VERDICT, NLM_F_REQUEST, 0, self.queue,
                                          [(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, pid))])
                                    for pid in ids[i: i + 1024]))

    def close(self) -> None:
        try:
            self._config([(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, socket.AF_INET))])
        except OSError:
            pass
        self.sock.close()


def serve(q: NfQueue, sched: Schedule, out: Any = sys.stdout) -> dict[str, Any]:
    """Hold and release until standard input closes; then release everything still held, in order."""
    sel = selectors.DefaultSelector()
    sel.register(q.sock, selectors.EVENT_READ, "nl")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    stats = {"packets": 0, "max_held": 0, "drained": 0}
    print("ready", file=out, flush=True)
    closing = False
    while not closing:
        for key, _ in sel.select(sched.wait_s(time.monotonic())):
            if key.data == "stdin" and not os.read(sys.stdin.fileno(), 4096):
                closing = True
        now = time.monotonic()
        for pid, packet in q.receive():
            sched.add(flow_key(packet), pid, now)
            stats["packets"] += 1
        stats["max_held"] = max(stats["max_held"], len(sched.heap))
        q.accept(sched.due(time.monotonic()))
    for pid, packet in q.receive():  # the rules are gone: what is left was queued before
        sched.add(flow_key(packet), pid, time.monotonic())
        stats["packets"] += 1
    rest = sched.everything()
    q.accept(rest)
    stats["drained"] = len(rest)
    return {**stats, "verdict_errors": q.errors, "overruns": q.overruns}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="hold every packet of an NFQUEUE delay ± jitter ms, then accept it")
    ap.add_argument("--queue", type=int, default=0)
    ap.add_argument("--delay-ms", type=float, default=100.0)
    ap.add_argument("--jitter-ms", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    q = NfQueue(a.queue)
    try:
        q.bind()
        stats = serve(q, Schedule(a.delay_ms, a.jitter_ms, a.seed))
    finally:
        q.close()
    print(json.dumps(stats), flush=True)
    return 0


# ------------------------------------------------------------------------------------------ the harness's side


def iptables() -> str | None:
    """The iptables binary to use (legacy first), None when none is installed."""
    return shutil.which("iptables-legacy") or shutil.which("iptables")


@dataclass
class NsDelay:
    """A delay on one namespace: the delayer process in it and the rules that queue its packets.
    ``direction``: ``both`` (packets in and out), ``out`` (sent by the node) or ``in`` (received by it)."""

    prefix: list[str]  # ip netns exec <ns>
    delay_ms: float
    jitter_ms: float
    direction: str = "both"
    queue: int = 0
    seed: int = 0
    proc: subprocess.Popen[bytes] | None = None
    rules: list[list[str]] = field(default_factory=list)

    def start(self, timeout: float = 10.0) -> None:
        ipt = iptables()
        if ipt is None:
            raise FileNotFoundError("iptables is not installed (Debian package iptables)")
        chains = {"both": ("INPUT", "OUTPUT"), "out": ("OUTPUT",), "in": ("INPUT",)}[self.direction]
        self.proc = subprocess.Popen([*self.prefix, sys.executable, __file__, "--queue", str(self.queue),
                                      "--delay-ms", str(self.delay_ms), "--jitter-ms", str(self.jitter_ms),
                                      "--seed", str(self.seed)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = _read_line(self.proc, timeout)
            if line != "ready":
                raise RuntimeError(f"delayer did not start: {line!r} {self._stderr()}")
            for chain in chains:
                dev = "-i" if chain == "INPUT" else "-o"
                rule = [*self.prefix, ipt, "-w", "-I", chain, "!", dev, "lo", "-j", "NFQUEUE",
                        "--queue-num", str(self.queue), "--queue-bypass"]
                res = subprocess.run(rule, capture_output=True, text=True, timeout=30)
                if res.returncode != 0:
                    raise RuntimeError(f"{' '.join(rule)}: {res.stderr.strip()}")
                self.rules.append(rule)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> dict[str, Any]:
        """Rules out first (no packet is queued after), then the delayer releases what it holds and exits.
        Returns its counters ({} if it had to be killed)."""
        for rule in self.rules:
            cmd = [*rule[: rule.index("-I")], "-D", *rule[rule.index("-I") + 1:]]
            subprocess.run(cmd, capture_output=True, timeout=30)
        self.rules.clear()
        proc, self.proc = self.proc, None
        if proc is None:
            return {}
        try:
            out, _ = proc.communicate(b"", timeout=timeout)  # closes its stdin: drain and exit
        except subprocess.TimeoutExpired:
            proc.kill()  # our own child, by its pid
            proc.communicate()
            return {}
        lines = out.decode(errors="replace").splitlines()
        try:
            return dict(json.loads(lines[-1])) if lines and lines[-1].startswith("{") else {}
        except ValueError:
            return {}

    def _stderr(self) -> str:
        if self.proc is None or self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace").strip()[-500:]


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The child's first output line, waiting at most ``timeout`` (an exited child gives '')."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = end - time.monotonic()
        if left <= 0 or not sel.select(left):
            return ""
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace").strip()


if __name__ == "__main__":
    sys.exit(main())
