"""Crash safety of the whole broker: SIGKILL the container during production, restart, check the log."""

from __future__ import annotations

import asyncio
import pathlib
import random

import pytest

from brokerd.message import body_crc, decode_records
from brokerd.remoting import RemotingClient, request
from tests.support import Cluster, arpc

pytestmark = pytest.mark.integration
QUEUES = 4


def send(i: int) -> object:
    return request(310, {"a": "pg", "b": "T_crash", "c": "TBW102", "d": str(QUEUES), "e": str(i % QUEUES), "f": "0",
                         "g": "1", "h": "0", "i": f"UNIQ_KEY\x01U{i}\x02seq\x01{i}\x02", "j": "0", "k": "false"},
                   f"crash-body-{i}".encode() * 8)


async def produce_until_killed(addr: str, start: int, acked: dict[int, tuple[int, int]], kill_after: int,
                               kill: object) -> None:
    client = RemotingClient()
    sem = asyncio.Semaphore(64)
    killed = asyncio.Event()

    async def one(i: int) -> None:
        async with sem:
            if killed.is_set():
                return
            try:
                r = await client.invoke(addr, send(i), timeout=5)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - the broker died under us
                return
            if r.code == 0:
                acked[i] = (int(r.ext["queueId"]), int(r.ext["queueOffset"]))
                if len(acked) >= kill_after and not killed.is_set():
                    killed.set()
                    kill()  # type: ignore[operator]

    await asyncio.gather(*(one(i) for i in range(start, start + kill_after * 3)))
    await client.close()


async def read_all(addr: str) -> dict[int, object]:
    """Every message of every queue, decoded (a corrupt record fails decoding or its CRC)."""
    out = {}
    for q in range(QUEUES):
        off = 0
        while True:
            r = await arpc(addr, 11, {"consumerGroup": "g_check", "topic": "T_crash", "queueId": str(q),
                                      "queueOffset": str(off), "maxMsgNums": "32", "sysFlag": "4",
                                      "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                                      "subVersion": "0"})
            if r.code != 0:
                assert r.code == 19, (r.code, r.remark)
                break
            for m in decode_records(r.body):
                assert m.body_crc == body_crc(m.body)
                assert m.queue_id == q and m.queue_offset == off
                out[int(m.properties["seq"])] = m
                off += 1
            assert int(r.ext["nextBeginOffset"]) == off
    return out


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_sigkill_during_production_loses_no_acknowledged_message(tmp_path: pathlib.Path, flush: str) -> None:
    rng = random.Random(7)
    cluster = Cluster(tmp_path, brokers=1, flushDiskType=flush, flushIntervalCommitLog=200,
                      mappedFileSizeCommitLog=256 * 1024)
    acked: dict[int, tuple[int, int]] = {}
    start = 0
    for round_ in range(3):
        cluster.start()
        addr = cluster.broker_addr()
        before = dict(acked)
        assert cluster.daemon is not None
        asyncio.run(produce_until_killed(addr, start, acked, kill_after=len(before) + rng.randint(300, 900),
                                         kill=cluster.daemon.kill))
        start += 100_000
        assert not cluster.daemon.alive()
        cluster.daemon.stop()
        cluster.start()
        stored = asyncio.run(read_all(addr))
        if flush == "SYNC_FLUSH":
            missing = [i for i in acked if i not in stored]
            assert not missing, f"round {round_}: {len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
            for i, (q, off) in acked.items():
                assert (stored[i].queue_id, stored[i].queue_offset) == (q, off)
        else:
            acked = {i: v for i, v in acked.items() if i in stored}  # loss allowed, corruption not
        assert stored, "nothing survived"
        assert cluster.stop() == 0
