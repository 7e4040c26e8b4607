"""gRPC clients as the endpoint tracks them: one session per client id (its settings, its Telemetry stream, its
channels to brokers, requests waiting for its answers), expired after ``client_idle_ms`` without a request."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

from brokerd.acl.plain import Account
from brokerd.proxy import pb
from brokerd.proxy.transport import ChannelSet

PRODUCER = 1
PUSH_CONSUMER = 2
SIMPLE_CONSUMER = 3
PULL_CONSUMER = 4
CONSUMER_TYPES = frozenset({PUSH_CONSUMER, SIMPLE_CONSUMER, PULL_CONSUMER, 5, 6})
TYPE_NAMES = {0: "unspecified", 1: "producer", 2: "push_consumer", 3: "simple_consumer", 4: "pull_consumer",
              5: "lite_push_consumer", 6: "lite_simple_consumer"}

_nonces = itertools.count(1)


class ClientSession:
    def __init__(self, client_id: str, language: str, version: str, peer: tuple[str, int], channels: ChannelSet,
                 account: Account | None) -> None:
        self.client_id = client_id
        self.language = language
        self.version = version
        self.peer = peer
        self.peer_text = f"{peer[0]}:{peer[1]}"
        self.channels = channels
        self.account = account
        self.settings: Any = None  # the client's raw Settings (Telemetry)
        self.effective: Any = None  # the settings the endpoint answered (merged with the endpoint's and the group's)
        self.client_type = 0
        self.group: str | None = None
        self.last_seen = time.monotonic()
        self.telemetry: asyncio.Queue[Any] | None = None  # commands to write on the client's Telemetry stream
        self.waiting: dict[str, asyncio.Future[Any]] = {}  # nonce -> the client's answer (stack trace, verify)
        self.closed = False

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def apply_settings(self, raw: Any) -> None:
        self.settings = raw
        if raw.HasField("client_type"):
            self.client_type = int(raw.client_type)
        if raw.HasField("subscription") and raw.subscription.HasField("group"):
            self.group = raw.subscription.group.name

    @property
    def is_consumer(self) -> bool:
        return self.client_type in CONSUMER_TYPES

    def topics(self) -> list[str]:
        """The topics the client publishes to or subscribes to (its settings)."""
        s = self.settings
        if s is None:
            return []
        if s.HasField("publishing"):
            return [t.name for t in s.publishing.topics if t.name]
        if s.HasField("subscription"):
            return [e.topic.name for e in s.subscription.subscriptions if e.topic.name]
        return []

    def subscriptions(self) -> list[tuple[str, int, str]]:
        """(topic, filter type, expression) of each subscription entry."""
        s = self.settings
        if s is None or not s.HasField("subscription"):
            return []
        return [(e.topic.name, int(e.expression.type), e.expression.expression or "*")
                for e in s.subscription.subscriptions]

    def push(self, cmd: Any) -> bool:
        """Write ``cmd`` on the client's Telemetry stream; False when it has none open."""
        if self.telemetry is None or self.closed:
            return False
        self.telemetry.put_nowait(cmd)
        return True

    def ask(self, build: Callable[[str], Any]) -> asyncio.Future[Any] | None:
        """Send the command ``build(nonce)`` over Telemetry; the future completes with the client's answer."""
        nonce = f"{self.client_id}-{next(_nonces)}"
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self.push(build(nonce)):
            return None
        self.waiting[nonce] = fut
        fut.add_done_callback(lambda _f: self.waiting.pop(nonce, None))
        return fut

    def answer(self, nonce: str, status: Any, value: Any) -> None:
        fut = self.waiting.pop(nonce, None)
        if fut is not None and not fut.done():
            fut.set_result((status, value))


class SessionRegistry:
    def __init__(self) -> None:
        self.sessions: dict[str, ClientSession] = {}

    def get(self, client_id: str) -> ClientSession | None:
        return self.sessions.get(client_id)

    def add(self, session: ClientSession) -> None:
        self.sessions[session.client_id] = session

    def remove(self, client_id: str) -> ClientSession | None:
        s = self.sessions.pop(client_id, None)
        if s is not None:
            s.closed = True
            if s.telemetry is not None:
                s.telemetry.put_nowait(None)
            for fut in s.waiting.values():
                if not fut.done():
                    fut.cancel()
        return s

    def idle(self, idle_s: float) -> list[ClientSession]:
        cutoff = time.monotonic() - idle_s
        return [s for s in self.sessions.values() if s.last_seen < cutoff and s.telemetry is None]

    def producers_of(self, group: str) -> list[ClientSession]:
        """Sessions publishing to topic ``group`` (gRPC producers' group is the topic) with a Telemetry stream."""
        return [s for s in self.sessions.values() if s.telemetry is not None and s.settings is not None
                and s.settings.HasField("publishing") and group in s.topics()]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.sessions.values():
            name = TYPE_NAMES.get(s.client_type, "unspecified")
            out[name] = out.get(name, 0) + 1
        return out


def telemetry_command(**kw: Any) -> Any:
    return pb.TelemetryCommand(**kw)
