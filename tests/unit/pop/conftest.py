"""A broker as the POP service sees it (``BrokerContext``), over a real message store and real metadata files in
tmp_path: no sockets. ``PopHarness.clock`` drives the service's notion of now."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

from brokerd.broker_config import BrokerConfig
from brokerd.clients import ConsumerManager
from brokerd.context import BrokerStats
from brokerd.ha.acks import PutAcks
from brokerd.message import MessageInner, decode_records
from brokerd.metadata import BrokerMetadata
from brokerd.metadata.topic import TopicConfig
from brokerd.pop.service import PopService
from brokerd.stats import BrokerStatsManager
from brokerd.store.message_store import MessageStore
from tests.unit.store.conftest import STORE_HOST, config, make_msg

CLUSTER = "PopCluster"


class FakeBroker:
    """The members of ``BrokerContext`` the POP parts use."""

    def __init__(self, root: Path, store: MessageStore, **cfg: Any) -> None:
        self.cfg = dataclasses.replace(BrokerConfig(), broker_cluster_name=CLUSTER, broker_name="broker-a",
                                       store_path_root_dir=str(root), **cfg)
        self.store = store
        self.meta = BrokerMetadata(str(root / "config"), cluster_name=CLUSTER, broker_name="broker-a")
        self.meta.load()
        self.acks = PutAcks(store, None)
        self.log = structlog.get_logger("test").bind(broker="broker-a")
        self.consumers = ConsumerManager(on_change=lambda g: None)
        self.stats = BrokerStats()
        self.stats_manager = BrokerStatsManager(CLUSTER)
        self.master = True
        self.namesrv_addrs: list[str] = []

    def is_master(self) -> bool:
        return self.master

    def is_writeable(self) -> bool:
        return self.master

    def is_readable(self) -> bool:
        return True


class PopHarness:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.now = 1_800_000_000_000
        self.svc = PopService(broker)  # type: ignore[arg-type]
        self.svc.core.now = lambda: self.now

    @property
    def store(self) -> MessageStore:
        return self.broker.store

    def revive_records(self) -> int:
        """Records in the revive log's queue."""
        return self.svc.core.log.local.max_offset_in_queue(self.svc.core.revive_topic, 0)

    def end_turn(self) -> None:
        """What the end of a loop turn does: the deferred acks are written, the moved commit points stored."""
        self.svc.core.flush()
        self.svc.core.commit_offsets()

    def topic(self, name: str, queues: int = 1) -> None:
        self.broker.meta.topics.update(TopicConfig(name, queues, queues))

    def send(self, topic: str, n: int, queue_id: int = 0, tags: str | None = None, prefix: str = "m") -> None:
        for i in range(n):
            res = self.store.append_message(make_msg(topic, queue_id, f"{prefix}{i}".encode(), tags=tags,
                                                     keys=f"{prefix}{i}"))
            assert res.ok

    def bodies(self, topic: str, queue_id: int = 0) -> list[bytes]:
        r = self.store.get_message(topic, queue_id, 0, 1000)
        return [m.body for buf in r.buffers for m in decode_records(bytes(buf))]


HarnessFactory = Callable[..., Awaitable[PopHarness]]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[HarnessFactory]:
    stores: list[MessageStore] = []

    async def factory(root: Path | None = None, store_cfg: dict[str, Any] | None = None, **cfg: Any) -> PopHarness:
        root = root or tmp_path / "b"
        store = MessageStore(config(root / "store", **{"mapped_file_size_commit_log": 4 << 20, **(store_cfg or {})}),
                             store_host=STORE_HOST)
        await store.start()
        stores.append(store)
        return PopHarness(FakeBroker(root, store, **cfg))

    yield factory
    for s in stores:
        if s._services is not None:
            await s.shutdown()


def msg(topic: str, body: bytes) -> MessageInner:
    return make_msg(topic, 0, body)
