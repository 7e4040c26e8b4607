"""What a name-server request processor may use of the name server: `NamesrvContext`.

`service.py` builds the processors (`processors_broker`, `processors_route`, `processors_kv`, `processors_admin`)
and hands each the service as a `NamesrvContext`; no processor imports `service.py`, so the imports run one way:
service → processors → context → config / routeinfo / kvconfig.
"""

from __future__ import annotations

from typing import Protocol

from brokerd.namesrv.config import NamesrvConfig
from brokerd.namesrv.kvconfig import KVConfigTable
from brokerd.namesrv.routeinfo import RouteInfoManager
from brokerd.remoting.connection import Connection


class NamesrvContext(Protocol):
    """The name server's state as its request processors see it."""

    @property
    def cfg(self) -> NamesrvConfig:
        """Settings (topic-list switches, order-topic config, `GET_NAMESRV_CONFIG`)."""
        ...

    @property
    def routes(self) -> RouteInfoManager:
        """The route table: brokers, topics, clusters."""
        ...

    @property
    def kv(self) -> KVConfigTable:
        """The KV config (namespaces such as ORDER_TOPIC_CONFIG)."""
        ...

    @property
    def ready(self) -> bool:
        """False during the `waitSecondsForService` start-up window."""
        ...

    def track_channel(self, conn: Connection) -> None:
        """Remove the brokers registered over `conn` when it closes."""
        ...

    def update_config(self, props: dict[str, str]) -> None:
        """UPDATE_NAMESRV_CONFIG: validate and apply `props` (camelCase keys), then persist them to the config file
        the name server was started with, if any; raises ConfigError naming a bad or unknown key."""
        ...
