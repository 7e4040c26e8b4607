"""Helpers for integration tests: free ports, waiting on conditions, running the daemons and the real client."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENV_BIN = pathlib.Path(sys.executable).parent
CLIENT_PY = os.environ.get("ROCKETMQ_CLIENT_PYTHON") or str(ROOT / ".venv-client" / "bin" / "python")
CLIENT_SCRIPT = str(ROOT / "tests" / "clients" / "rmq_client.py")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_RNG = random.Random()
_handed_out: set[int] = set()


def free_port() -> int:
    """A free port outside the kernel's ephemeral range, never handed out before in this process: the daemons bind
    it later, and no kernel-chosen port (an outgoing connection, a bind to port 0) can take it in between."""
    lo, hi = _ephemeral_range()
    low_band = (10000, lo - 1) if lo - 1 > 12000 else (hi + 1, 65000)
    for _ in range(2000):
        p = _RNG.randrange(*low_band)
        if p not in _handed_out and port_free(p):
            _handed_out.add(p)
            return p
    raise RuntimeError("no free port")


def broker_port() -> int:
    """A port p with p, p-2 and p+1 free (main, fast and HA ports)."""
    for _ in range(2000):
        p = free_port()
        if p - 2 not in _handed_out and p + 1 not in _handed_out and port_free(p - 2) and port_free(p + 1):
            _handed_out.update((p - 2, p + 1))
            return p
    raise RuntimeError("no free broker port triple")


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001
            last_exc = e
        time.sleep(interval)  # sleep-ok: polling interval of a deadline-bounded wait
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))


async def until(cond: Callable[[], object], what: str, timeout: float = 10.0, interval: float = 0.01) -> None:
    """``wait_for`` for coroutines: poll ``cond`` on the running loop until it is truthy, failing after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)  # sleep-ok: polling interval of a deadline-bounded wait


def can_connect(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def write_broker_conf(path: pathlib.Path, *, name: str, port: int, store: pathlib.Path, **extra: Any) -> pathlib.Path:
    props = {"brokerClusterName": "DefaultCluster", "brokerName": name, "brokerId": 0, "brokerRole": "ASYNC_MASTER",
             "brokerIP1": "127.0.0.1", "listenPort": port, "storePathRootDir": str(store),
             "flushDiskType": "ASYNC_FLUSH", "registerNameServerPeriod": 2000,
             # keep preallocated files small: tests start many brokers
             "mappedFileSizeCommitLog": 32 * 1024 * 1024, "maxHashSlotNum": 50_000, "maxIndexNum": 200_000,
             # the physical disk thresholds apply to the host's real disk: keep tests independent of how full it is
             "diskSpaceWarningLevelRatio": 0.99, "diskSpaceCleanForciblyRatio": 0.99,
             # a send is refused once it waited this long since it arrived (processors/admission.py): RocketMQ's
             # 200 ms would refuse a test's send whenever the shared 2-core machine leaves the broker without a CPU
             # that long; tests of the rule and the benchmarks set their own
             "waitTimeMillsInSendQueue": 1000}
    props.update(extra)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class Daemon:
    """A daemon subprocess with its output captured to a file."""

    def __init__(self, args: list[str], log_path: pathlib.Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Daemon:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=str(ROOT), start_new_session=True)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


def container_cmd(conf: pathlib.Path) -> list[str]:
    return [str(VENV_BIN / "mqbrokercontainer"), "-c", str(conf)]


class ClientRun:
    """The real RocketMQ client (C++ core) running tests/clients/rmq_client.py in its own venv.
    Its JSON output lines are collected as they arrive (`rows`, with when each arrived in `arrived`, monotonic)."""

    def __init__(self, mode: str, env: dict[str, Any], log_dir: pathlib.Path, command: list[str] | None = None) -> None:
        """``command``: another client speaking the same JSON lines (e.g. ``ons_command()``, the Node client)."""
        log_dir.mkdir(parents=True, exist_ok=True)
        full = {**os.environ, **{k: str(v) for k, v in env.items()}, "LOG_DIR": str(log_dir)}
        self.rows: list[dict[str, Any]] = []
        self.arrived: list[float] = []
        self.noise: list[bytes] = []
        self.proc = subprocess.Popen([*(command or [CLIENT_PY, CLIENT_SCRIPT]), mode], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=full, cwd=str(log_dir))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                row = json.loads(line)
            except ValueError:
                self.noise.append(line)
            else:
                self.arrived.append(time.monotonic())
                self.rows.append(row)

    def received(self) -> list[dict[str, Any]]:
        return [r["recv"] for r in list(self.rows) if "recv" in r]

    def wait(self, timeout: float) -> tuple[int, list[dict[str, Any]]]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        return self.proc.returncode, list(self.rows)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def ons_command() -> list[str] | None:
    """The ali-ons (Node) client's command line (scripts/test installs it), None when Node or it is missing."""
    import shutil

    modules = os.environ.get("ONS_NODE_PATH") or str(ROOT / ".node-client" / "node_modules")
    node = shutil.which("node")
    if node is None or not os.path.isdir(os.path.join(modules, "ali-ons")):
        return None
    os.environ["NODE_PATH"] = modules
    return [node, str(ROOT / "tests" / "clients" / "ons_client.js")]


def run_client(mode: str, env: dict[str, Any], log_dir: pathlib.Path, timeout: float = 120) -> tuple[int, list[dict[str, Any]]]:
    return ClientRun(mode, env, log_dir).wait(timeout)


def received(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["recv"] for r in rows if "recv" in r]


async def arpc(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
               timeout: float = 5.0, creds: tuple[str, str] | None = None) -> Any:
    """One remoting request on a fresh connection (our own wire client; signed with ``creds`` (ACL))."""
    from brokerd.acl.glue import signing_client
    from brokerd.remoting import RemotingClient, request

    client = signing_client(*creds) if creds else RemotingClient()
    try:
        return await client.invoke(addr, request(code, dict(ext or {}), body), timeout)  # signing adds fields
    finally:
        await client.close()


def rpc(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
        timeout: float = 5.0, creds: tuple[str, str] | None = None) -> Any:
    """Blocking `arpc` for synchronous tests."""
    import asyncio

    return asyncio.run(arpc(addr, code, ext, body, timeout, creds))


def topics(addr: str) -> set[str]:
    """The topics a broker has (GET_ALL_TOPIC_CONFIG)."""
    r = rpc(addr, 21)
    return set(json.loads(r.body)["topicConfigTable"]) if r.code == 0 else set()


class Cluster:
    """An mqbrokercontainer subprocess with an embedded name server and N brokers, on free ports."""

    def __init__(self, tmp: pathlib.Path, brokers: int = 1, container_extra: dict[str, Any] | None = None,
                 admin_creds: tuple[str, str] | None = None, **broker_extra: Any) -> None:
        container_extra = container_extra or {}
        self.tmp = tmp
        self.admin_creds = admin_creds  # ACL on: the admin account the readiness checks sign with
        self.namesrv_port = free_port()
        self.admin_port = free_port()
        self.ports: list[int] = []
        paths = []
        for i in range(brokers):
            port = broker_port()
            self.ports.append(port)
            name = f"broker-{chr(ord('a') + i)}"
            paths.append(str(write_broker_conf(tmp / f"{name}.conf", name=name, port=port,
                                               store=tmp / "store" / name, **broker_extra)))
        self.conf = tmp / "container.conf"
        self.conf.write_text(f"listenPort={self.admin_port}\nembeddedNamesrvEnable=true\n"
                             f"embeddedNamesrvPort={self.namesrv_port}\nbrokerConfigPaths={':'.join(paths)}\n"
                             f"metricsPort=0\ncontainerStateFile={tmp / 'container-state.json'}\n"
                             f"logsRoot={tmp / 'logs'}\n" + "".join(f"{k}={v}\n" for k, v in container_extra.items()))
        self.daemon: Daemon | None = None

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def broker_addr(self, i: int = 0) -> str:
        return f"127.0.0.1:{self.ports[i]}"

    def start(self, timeout: float = 30) -> Cluster:
        self.daemon = Daemon(container_cmd(self.conf), self.tmp / "container.log").start()
        wait_for(lambda: all(can_connect(p) for p in self.ports) and can_connect(self.namesrv_port), timeout,
                 "container ports to accept connections")
        # every broker registered with the name server (TBW102 routable on each)
        wait_for(lambda: self._registered(), timeout, "brokers registered with the name server")
        return self

    def _registered(self) -> bool:
        r = rpc(self.namesrv, 105, {"topic": "TBW102"}, creds=self.admin_creds)
        if r.code != 0:
            return False
        import orjson

        route = orjson.loads(r.body)
        return len(route["brokerDatas"]) == len(self.ports)

    def stop(self) -> int | None:
        return self.daemon.stop() if self.daemon else None

    def client_env(self, **kw: Any) -> dict[str, Any]:
        return {"NAMESRV": self.namesrv, **kw}


def kernel_stamps_live() -> bool:
    """Whether the kernel stamps received packets when they arrive. It turns stamping on asynchronously (a work item)
    when the host's first stamped socket asks for it: until then a packet is stamped when it is read. A datagram is
    read 20 ms after it was sent: a stamp from its arrival is that much older than the read."""
    from brokerd.remoting.arrival import SO_TIMESTAMPNS

    if SO_TIMESTAMPNS is None:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        tx.sendto(b"x", rx.getsockname())
        sent = time.time()
        time.sleep(0.02)  # sleep-ok: the probe's own delay between arrival and read
        _, anc, _, _ = rx.recvmsg(1, socket.CMSG_SPACE(16))
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack_from("qq", raw)
            return sec + nsec * 1e-9 < sent + 0.01
    return False


ACL_SAMPLE = ROOT / "conf" / "acl" / "plain_acl.yml"
ACL_USER = ("RocketMQ", "12345678")  # the sample's ordinary account
ACL_ADMIN = ("rocketmq2", "12345678")  # the sample's admin account


def acl_cluster(tmp: pathlib.Path, **container_extra: Any) -> Cluster:
    """A started one-broker Cluster with ACL on over a copy of the shipped conf/acl/plain_acl.yml (``acl_path``);
    the brokers and readiness checks sign with the admin account."""
    acl = tmp / "plain_acl.yml"
    shutil.copy(ACL_SAMPLE, acl)
    c = Cluster(tmp, brokers=1, admin_creds=ACL_ADMIN,
                container_extra={"aclEnable": "true", "aclFilePath": acl, **container_extra},
                aclEnable="true", aclFilePath=acl, aclAccessKey=ACL_ADMIN[0], aclSecretKey=ACL_ADMIN[1]).start()
    c.acl_path = acl  # type: ignore[attr-defined]
    return c


class ConsumeQueueFault:
    """Every consume-queue put failing with OSError ``err`` (a full disk, a broken one) while ``on`` is True."""

    def __init__(self, monkeypatch: Any, err: int, *, on: bool = False) -> None:
        from brokerd.store import consume_queue

        self.on = on
        real = consume_queue.ConsumeQueue.put

        def put(cq: Any, *args: int) -> None:
            if self.on:
                raise OSError(err, os.strerror(err))
            real(cq, *args)

        monkeypatch.setattr(consume_queue.ConsumeQueue, "put", put)


class DiskFault:
    """A store's commit-log flushes (its services' syncer) stalled or failing, as a hanging or broken disk:
    ``stall()`` parks every sync job until ``release()`` runs them; ``fail(err)`` answers every job ``err``."""

    def __init__(self, store: Any, monkeypatch: Any) -> None:
        self.syncer = store.services.syncer
        self.real = self.syncer.submit
        self.parked: list[tuple[list[int], list[int], Callable[[int], None]]] = []
        self._mp = monkeypatch

    def stall(self) -> DiskFault:
        self._mp.setattr(self.syncer, "submit", lambda d, f, done: self.parked.append((d, f, done)))
        return self

    def fail(self, err: int) -> DiskFault:
        def failing(dir_fds: list[int], file_fds: list[int], done: Callable[[int], None]) -> None:
            for fd in dir_fds + file_fds:
                os.close(fd)
            asyncio.get_running_loop().call_soon(done, err)
        self._mp.setattr(self.syncer, "submit", failing)
        return self

    def release(self) -> None:
        """The disk works again: the parked jobs run, later ones too."""
        self._mp.setattr(self.syncer, "submit", self.real)
        parked, self.parked = self.parked, []
        for job in parked:
            self.real(*job)
