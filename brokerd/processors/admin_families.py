"""The broker's admin request families, one module each (RocketMQ's AdminBrokerProcessor split by what it serves):

| module | codes |
|---|---|
| admin_topic | 17, 18, 21, 23, 202, 215, 305, 316, 351 |
| admin_group | 200, 201, 207, 225, 314, 352 |
| admin_consumer | 203, 204, 208, 300, 303, 317, 328, 343, 345 |
| admin_client | 222 (+ 220 to the consumers), 223 (+ 221), 307, 309 (forwarded to one consumer) |
| admin_broker | 25, 26, 27, 306, 329, 907, 1007 |
| admin_stats | 28, 315 |
| admin_message | 321 |
| admin_acl | 50, 51, 52, 53, 54 |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from brokerd.processors.admin_acl import AclAdmin
from brokerd.processors.admin_broker import BrokerAdmin
from brokerd.processors.admin_client import ClientAdmin
from brokerd.processors.admin_consumer import ConsumerAdmin
from brokerd.processors.admin_group import GroupAdmin
from brokerd.processors.admin_message import MessageAdmin
from brokerd.processors.admin_stats import StatsAdmin
from brokerd.processors.admin_topic import TopicAdmin
from brokerd.remoting.connection import Dispatcher, Handler

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


class AdminFamily(Protocol):
    def handlers(self) -> dict[int, Handler]: ...


def admin_processors(broker: BrokerContext) -> list[AdminFamily]:
    return [TopicAdmin(broker), GroupAdmin(broker), ConsumerAdmin(broker), ClientAdmin(broker), BrokerAdmin(broker),
            StatsAdmin(broker), MessageAdmin(broker), AclAdmin(broker)]


def register_admin(broker: BrokerContext, *dispatchers: Dispatcher) -> None:
    """Register every admin family on ``dispatchers`` (after the other processors: a family may wrap their
    handlers, as the reset gate wraps pulls and commits)."""
    for family in admin_processors(broker):
        wraps: dict[int, Callable[[Handler], Handler]] = getattr(family, "wraps", dict)()
        for d in dispatchers:
            d.register_all(family.handlers())
            for code, wrap in wraps.items():
                inner = d.lookup(code)
                if inner is not None:
                    d.register(code, wrap(inner))
