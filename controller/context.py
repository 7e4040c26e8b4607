"""What the request handlers and the elector need from the controller role, as narrow Protocols.

`controller.server.ControllerServer` builds the handlers (`controller.handlers.*`) and the `Elector` and hands
itself to them as their context; they depend on these Protocols only, never on the server class, so the
imports run one way (server -> handlers/elector -> context).
"""

from __future__ import annotations

from typing import Protocol

from controller.config import ControllerConfig
from controller.executor import DecideFn, ReadFn
from controller.liveness import BrokerKey, LivenessTracker
from controller.statemachine.image import ControllerImage
from controller.statemachine.reply import Reply


class RequestExecutor(Protocol):
    """Runs a decision through Raft (`write`) or answers a read at the configured consistency."""

    async def write(self, decide: DecideFn) -> Reply: ...

    async def read(self, fn: ReadFn) -> Reply: ...

    async def unsafe_read(self, fn: ReadFn) -> Reply: ...


class LeadershipView(Protocol):
    """Whether this member currently leads the Raft group."""

    @property
    def is_leader(self) -> bool: ...


class ControllerState(Protocol):
    """The state both the handlers and the elector read, and the role-change push both trigger."""

    @property
    def cfg(self) -> ControllerConfig: ...

    @property
    def image(self) -> ControllerImage: ...

    @property
    def live(self) -> LivenessTracker: ...

    @property
    def executor(self) -> RequestExecutor: ...

    def notify_role_change(self, broker_name: str) -> None: ...


class ElectorContext(ControllerState, Protocol):
    """What `controller.elector.Elector` uses."""

    @property
    def raft(self) -> LeadershipView: ...

    @property
    def heartbeat_timeout_ms(self) -> int: ...


class HandlerContext(ControllerState, Protocol):
    """What the wire handlers (`controller.handlers.*`) use."""

    @property
    def honor_heartbeat_timeout(self) -> bool: ...

    def metadata_header(self) -> dict[str, str]: ...

    def update_config(self, props: dict[str, str]) -> None: ...

    def forget_brokers(self, broker_name: str, ids: str | None) -> None: ...

    def on_broker_revived(self, broker_name: str, broker_id: int) -> None: ...

    def on_heartbeat_channel_closed(self, keys: set[BrokerKey]) -> None: ...
