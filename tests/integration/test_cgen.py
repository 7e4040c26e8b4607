"""The compiled benchmark clients against a real broker. The load generator (scripts/bench/gen.c): every send it
reports acknowledged is stored (the broker's max offsets add up to its count), each with its own UNIQ_KEY, the
stored messages look like the ones the Python generator (loadgen.py, json_uniq shape) sends, and every send
shape's frames are acknowledged. The consumer (scripts/bench/consume.c) gets what its subscription selects; the POP
consumer (scripts/bench/pop.c) acknowledges every message once."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

from brokerd.message import decode_records
from scripts.bench import cgen
from scripts.bench.shapes import SHAPES, capture_shapes, heartbeat_frame
from tests.pop_client import PopClient
from tests.support import Cluster, rpc

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None,
                                reason="no C compiler (gcc/cc) to build scripts/bench/gen.c")
QUEUES = 8


def create_topic(addr: str, topic: str) -> None:
    assert rpc(addr, 17, {"topic": topic, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES)}).code == 0


def stored(addr: str, topic: str) -> list[Any]:
    """Every message of the topic, pulled queue by queue from offset 0 up to the queue's max offset."""
    out = []
    for q in range(QUEUES):
        top = int(rpc(addr, 30, {"topic": topic, "queueId": str(q)}).ext["offset"])
        off = 0
        while off < top:
            r = rpc(addr, 11, {"consumerGroup": "cgen_cg", "topic": topic, "queueId": str(q), "queueOffset": str(off),
                               "maxMsgNums": "256", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                               "subscription": "*", "subVersion": "0"})  # fmt: skip
            assert r.code == 0, r
            msgs = decode_records(r.body)
            out += msgs
            off = int(r.ext["nextBeginOffset"])
    return out


def shape(m: Any) -> dict[str, Any]:
    return {"topic": m.topic, "props": sorted(k for k in m.properties if k not in ("MIN_OFFSET", "MAX_OFFSET")),
            "tags": m.tags, "wait": m.properties.get("WAIT"), "body_len": len(m.body), "flag": m.flag,
            "sys_flag": m.sys_flag, "uniq_len": len(m.properties.get("UNIQ_KEY", ""))}


def test_every_send_the_compiled_generator_counts_as_acked_is_stored_like_the_python_generators(
        tmp_path: pathlib.Path) -> None:
    c = Cluster(tmp_path, brokers=1).start()
    try:
        addr = c.broker_addr()
        create_topic(addr, "CGen")
        create_topic(addr, "PyGen")
        res = cgen.run(addr, "CGen", timeout=60, conns=4, inflight=16, total=2000, body=128, queues=QUEUES)
        assert res["sent"] == res["answered"] == res["acked"] == 2000, res
        assert res["errors"] == {} and res["unmatched"] == 0 and res["timed_out"] is False, res
        lat = res["latency"]
        assert isinstance(lat, dict) and lat["count"] == 2000
        assert 0 < lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["p99.9_ms"] <= lat["max_ms"], lat
        maxes = [int(rpc(addr, 30, {"topic": "CGen", "queueId": str(q)}).ext["offset"]) for q in range(QUEUES)]
        assert sum(maxes) == res["acked"] and min(maxes) == max(maxes) == 2000 // QUEUES, maxes

        py = subprocess.run([sys.executable, "-m", "scripts.bench.loadgen", "produce", "--addr", addr, "--topic",
                             "PyGen", "--conns", "1", "--inflight", "8", "--total", "16", "--body", "128",
                             "--queues", str(QUEUES)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        assert json.loads(py.stdout.strip().splitlines()[-1])["errors"] == 0
        c_msgs, py_msgs = stored(addr, "CGen"), stored(addr, "PyGen")
        assert len(c_msgs) == 2000 and len({m.properties["UNIQ_KEY"] for m in c_msgs}) == 2000
        py_shape = {k: v for k, v in shape(py_msgs[0]).items() if k != "topic"}
        assert all({k: v for k, v in shape(m).items() if k != "topic"} == py_shape for m in c_msgs), \
            (shape(c_msgs[0]), py_shape)
    finally:
        c.stop()


def test_open_loop_sends_on_schedule_and_reports_its_own_lateness(tmp_path: pathlib.Path) -> None:
    c = Cluster(tmp_path, brokers=1).start()
    try:
        addr = c.broker_addr()
        create_topic(addr, "COpen")
        out = tmp_path / "lat.bin"
        res = cgen.run(addr, "COpen", timeout=60, conns=2, rate=2000, seconds=0.5, body=64, queues=QUEUES,
                       lat_out=out)
        assert res["mode"] == "open" and res["sent"] == res["acked"] == 1000, res
        assert out.stat().st_size == 1000 * 8  # one latency (a double) per answered send
        late = res["gen_late"]
        assert isinstance(late, dict) and 0 <= late["p99_ms"] <= late["max_ms"], late
        maxes = [int(rpc(addr, 30, {"topic": "COpen", "queueId": str(q)}).ext["offset"]) for q in range(QUEUES)]
        assert sum(maxes) == 1000
    finally:
        c.stop()


def test_every_send_shape_from_its_frames_file_is_acknowledged_and_stored(tmp_path: pathlib.Path) -> None:
    """Each shape's templates (JSON and binary headers, SEND_MESSAGE 10, batches, delays, half messages, retry
    topics, the captured clients' frames) patched per send by the compiled generator: every send acknowledged, and
    the plain shapes' messages all in their topic with distinct UNIQ_KEYs."""
    c = Cluster(tmp_path, brokers=1).start()
    try:
        addr = c.broker_addr()
        for shape in (*SHAPES, "tagged", *capture_shapes()):
            topic = "%RETRY%cgen_cg" if shape == "retry_topic" else "Shape" + "".join(ch for ch in shape if ch.isalnum())
            create_topic(addr, topic)
            per = 16 if shape == "batch16" else 1
            res = cgen.run(addr, topic, timeout=60, shape=shape, conns=2, inflight=8, total=96 // per, body=64,
                           queues=QUEUES)
            assert res["acked"] == 96 // per and res["msgs"] == 96 and res["errors"] == {}, (shape, res)
            if shape in ("delay_level", "transaction_half", "retry_topic"):
                continue  # stored in the schedule / half topic
            msgs = stored(addr, topic)
            uniq = {m.properties["UNIQ_KEY"] for m in msgs}
            assert len(msgs) == 96 and len(uniq) == 96 and all(len(m.body) == 64 for m in msgs), shape
    finally:
        c.stop()


def test_the_compiled_consumer_gets_what_its_subscription_selects(tmp_path: pathlib.Path) -> None:
    """mqconsume as a push consumer (subscription registered by its heartbeat): '*' gets everything, a tag filter
    and an SQL92 filter the half they select; open-loop sends carry their due time, so every consumed message has
    an end-to-end latency. With --commit each pull commits the queue's offset so far, as the Java push consumer's."""
    c = Cluster(tmp_path, brokers=1, enablePropertyFilter="true").start()
    try:
        addr = c.broker_addr()
        create_topic(addr, "Tagged")
        res = cgen.run(addr, "Tagged", timeout=60, shape="tagged", conns=2, rate=4000, seconds=0.2, body=64,
                       queues=QUEUES)
        assert res["acked"] == 800
        end = [int(rpc(addr, 30, {"topic": "Tagged", "queueId": str(q)}).ext["offset"]) for q in range(QUEUES)]
        for sub, etype, want in (("*", "TAG", 800), ("TagA", "TAG", 400), ("a BETWEEN 0 AND 4", "SQL92", 400)):
            hb = tmp_path / f"hb-{etype}-{want}"
            group = f"cg_{etype}_{want}"
            hb.write_bytes(heartbeat_frame(group, "Tagged", sub, etype))
            out = tmp_path / f"e2e-{etype}-{want}.bin"
            r = cgen.consume(addr, "Tagged", [0] * QUEUES, end=end, group=group, heartbeat=hb, sub=sub,
                             expression_type=etype, ts=True, lat_out=out, timeout=60)
            assert r["msgs"] == want and r["other"] == 0 and r["timed_out"] is False, (sub, r)
            assert out.stat().st_size == want * 8  # one end-to-end latency per message
        got = cgen.consume(addr, "Tagged", [0] * QUEUES, end=end, group="cg_pull", sub="TagB", timeout=60)
        assert got["msgs"] == 400  # no heartbeat: the subscription travels with each pull
        got = cgen.consume(addr, "Tagged", [0] * QUEUES, end=end, group="cg_commit", commit=True, timeout=60)
        assert got["msgs"] == 800
        committed = [int(rpc(addr, 14, {"consumerGroup": "cg_commit", "topic": "Tagged", "queueId": str(q)}).ext["offset"])
                     for q in range(QUEUES)]  # fmt: skip
        assert committed == [(e - 1) // 32 * 32 for e in end]  # each pull commits what the ones before it got
    finally:
        c.stop()


def test_the_compiled_pop_consumer_acknowledges_every_message_once(tmp_path: pathlib.Path) -> None:
    """mqpop (scripts/bench/pop.c) with one BATCH_ACK per answer and with one ACK per message: every message of the
    topic popped and acknowledged (each answer's records match its offsets), and the group has nothing left in
    flight: a later pop of the group finds no message."""
    c = Cluster(tmp_path, brokers=1).start()
    try:
        addr = c.broker_addr()
        create_topic(addr, "CPop")
        assert cgen.run(addr, "CPop", timeout=60, conns=2, inflight=16, total=2000, body=64, queues=QUEUES)["acked"] == 2000
        for ack, conns, inflight in (("batch", 1, 8), ("batch", 8, 1), ("single", 2, 4)):
            group = f"cpop_{ack}_{conns}"
            r = cgen.pop(addr, "CPop", 2000, group=group, conns=conns, inflight=inflight, ack=ack, timeout=60)
            assert r["msgs"] == r["popped"] == 2000 and r["errors"] == 0 and r["timed_out"] is False, r
            assert r["ack_requests"] == (2000 if ack == "single" else r["found"]), r
            left = asyncio.run(pop_once(addr, group))
            assert left.code != 0 and not left.msgs, (ack, left.code)
    finally:
        c.stop()


async def pop_once(addr: str, group: str) -> Any:
    cli = PopClient(addr, group)
    try:
        return await cli.pop("CPop", 32, invisible=60_000)
    finally:
        await cli.close()
