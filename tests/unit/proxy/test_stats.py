"""What a worker process reports and the container adds up: counters through their wire form (bad entries
skipped), totals; a worker's config through its command line."""

from __future__ import annotations

import json

from brokerd.proxy.config import GrpcProxyConfig, config_from_wire
from brokerd.proxy.convert import Limits
from brokerd.proxy.stats import GrpcStats
from brokerd.proxy.workers import config_to_wire


def test_counters_travel_and_add_up() -> None:
    a, b = GrpcStats(), GrpcStats()
    a.answered("SendMessage", "OK")
    a.answered("SendMessage", "OK")
    a.messages_sent = 2
    b.answered("SendMessage", "OK")
    b.answered("AckMessage", "INVALID_RECEIPT_HANDLE")
    b.messages_acked, b.auth_refused = 5, 1
    back = GrpcStats.from_wire(json.loads(json.dumps(b.to_wire())))
    total = GrpcStats.total([a, back])
    assert total.requests == {("SendMessage", "OK"): 3, ("AckMessage", "INVALID_RECEIPT_HANDLE"): 1}
    assert (total.messages_sent, total.messages_acked, total.auth_refused) == (2, 5, 1)
    junk = GrpcStats.from_wire({"requests": [["x"], ["SendMessage", "OK", "3"], ["Q", "OK", 4]], "messages_sent": "x"})
    assert junk.requests == {("Q", "OK"): 4} and junk.messages_sent == 0


def test_a_workers_config_comes_back_as_it_was_given() -> None:
    cfg = GrpcProxyConfig(listen_host="127.0.0.1", listen_port=18081, acl_file_path="/etc/acl.yml", reuse_port=True,  # port-ok: data, nothing binds it
                          limits=Limits(max_message_size=1024), max_long_polling_ms=9000)
    spec = json.loads(config_to_wire(cfg, ["127.0.0.1:9876"], 2, 1.5))  # port-ok: data, nothing binds it
    assert config_from_wire(spec["config"]) == cfg
    assert (spec["namesrv"], spec["index"], spec["grace"]) == (["127.0.0.1:9876"], 2, 1.5)  # port-ok: data, nothing binds it
