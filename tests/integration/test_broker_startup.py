"""A broker answers nothing from a half-loaded store: requests that reach its ports while it recovers get
SYSTEM_BUSY (clients retry), never an answer such as PULL_OFFSET_MOVED that would send consumers back."""

from __future__ import annotations

from pathlib import Path

from brokerd.broker import Broker
from brokerd.broker_config import BrokerConfig
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import request
from brokerd.remoting.connection import Connection

PULL = {"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "10522", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}


async def test_requests_before_the_store_is_recovered_are_answered_busy(tmp_path: Path) -> None:
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), listen_port=30911, broker_name="startup",  # port-ok: never bound
                       max_hash_slot_num=1000, max_index_num=4000)  # fmt: skip
    b = Broker(cfg, RemotingClient(), namesrv_addrs=[])
    conn = Connection(b.dispatcher)
    for d in (b.dispatcher, b.fast_dispatcher):
        handler = d.lookup(11)
        assert handler is not None
        resp = handler(conn, request(11, PULL))
        assert resp.code == ResponseCode.SYSTEM_BUSY and "starting" in (resp.remark or "")
    await b.start()
    try:
        handler = b.dispatcher.lookup(11)
        assert handler is not None
        resp = handler(conn, request(11, PULL))
        assert resp is None or resp.code != ResponseCode.SYSTEM_BUSY
    finally:
        await b.shutdown()
