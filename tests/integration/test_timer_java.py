"""RocketMQ's own Java remoting producer (rocketmq-client 5.3.1, tests/clients/java/remoting: TimerProducer) sends
timer messages with ``Message.setDeliverTimeMs`` and ``setDelayTimeSec`` to a real container: each is answered
SEND_OK, reaches its real topic at (never before) its time, and one beyond ``timerMaxDelaySec`` is refused with
RocketMQ's MESSAGE_ILLEGAL."""

from __future__ import annotations

import asyncio
import json
import pathlib
import time

import pytest

from brokerd import message as m
from brokerd.remoting import RemotingClient
from tests.integration.test_timer import BROKER, now_ms, pull_all
from tests.java_support import run_java
from tests.support import Cluster

pytestmark = pytest.mark.integration
COUNT = 40


def test_the_java_client_sends_timer_messages(tmp_path: pathlib.Path) -> None:
    cl = Cluster(tmp_path, brokers=1, **BROKER).start()
    try:
        started = now_ms()
        r = run_java("remoting", "org.pyrmq.tests.timer.TimerProducer", [cl.namesrv, "JavaTimer", str(COUNT), "3000"],
                     timeout=240)  # fmt: skip
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        assert r.returncode == 0, r.stderr[-3000:]
        sent = {row["key"]: row for row in rows if "key" in row}
        assert len(sent) == COUNT and all(row["status"] == "SEND_OK" for row in sent.values())
        [far] = [row for row in rows if "far" in row]
        assert far["far"] == 13 and "timer message illegal" in far["remark"], far

        async def read() -> list[m.MessageExt]:
            client = RemotingClient()
            try:
                deadline = time.monotonic() + 60
                while True:
                    got = [x for q in range(4) for x in await pull_all(client, cl.broker_addr(), "JavaTimer", q)]
                    if len(got) >= COUNT or time.monotonic() > deadline:
                        return got
                    await asyncio.sleep(0.3)  # sleep-ok: polling the real topic with a deadline
            finally:
                await client.close()

        got = asyncio.run(read())
        assert sorted(x.properties[m.KEYS] for x in got) == sorted(sent)
        for x in got:
            row = sent[x.properties[m.KEYS]]
            assert x.store_timestamp >= row["sentAt"] + 3000 > started, (x.properties, row)  # not before its time
            assert x.store_timestamp >= int(x.properties[m.TIMER_OUT_MS])
            assert (m.TIMER_DELIVER_MS if int(x.properties[m.KEYS][1:]) % 2 == 0 else m.TIMER_DELAY_SEC) in x.properties
    finally:
        cl.stop()
