"""The C send lane against the Python send path: the same request stream into two brokers, one with the lane
and one without, must leave the same records, consume-queue entries, key index and answers (real files,
in-process brokers, the connection fed like a socket would feed it)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from brokerd.broker import Broker
from brokerd.broker_config import BrokerConfig
from brokerd.message import decode_record, encode_batch_body, encode_properties, native_uniq_prefix, tags_code_of
from brokerd.metadata.topic import PERM_READ, TopicConfig
from brokerd.native import native
from brokerd.remoting import RemotingClient, RemotingCommand, encode, encode_binary, request
from brokerd.remoting.codec import FrameDecoder
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.connection import Connection
from brokerd.store.flags import NOT_WRITEABLE, WRITE_LOGICS_QUEUE_ERROR
from tests.support import ConsumeQueueFault, DiskFault

pytestmark = pytest.mark.skipif(native is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")

TOPICS = ("LaneA", "LaneB", "Lane_C-" + "x" * 100)


GENERATED = "GENERATED".ljust(32, "0")  # what the Python path assigns here; the lane's own ids are read as this


@pytest.fixture(autouse=True)
def same_generated_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages without a UNIQ_KEY get a generated one (a process-wide counter): the same on both brokers here
    (the lane's generated ids, of the same length, are compared as GENERATED after checking they are unique)."""
    import brokerd.message

    monkeypatch.setattr(brokerd.message, "new_uniq_id", lambda: GENERATED)


def lane_generated(uniq: str) -> bool:
    return uniq.startswith(native_uniq_prefix())


class Transport:
    """Collects what the connection writes."""

    def __init__(self) -> None:
        self.frames: list[RemotingCommand] = []
        self._dec = FrameDecoder()

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:  # flow control: the test feeds the connection itself
        pass

    def resume_reading(self) -> None:
        pass

    def writelines(self, data: list[bytes]) -> None:
        self.frames += self._dec.feed(b"".join(bytes(d) for d in data))

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("10.1.2.3", 40000), "sockname": ("127.0.0.1", 10911)}.get(name, default)  # port-ok: data

    def close(self) -> None:
        pass


async def start_broker(root: Path, lane: bool, **cfg: Any) -> tuple[Broker, Connection, Transport]:
    """An in-process broker; overload shedding off unless asked for (it depends on timing, which differs between
    the two brokers of a comparison: a flush stalled by other work on the disk would refuse sends on one only)."""
    cfg = {"broker_fast_failure_enable": False, "max_hash_slot_num": 5000, "max_index_num": 20000, **cfg}
    port = 30911  # port-ok: only the store host in records and message ids; in-process brokers bind nothing
    conf = BrokerConfig(store_path_root_dir=str(root), listen_port=port, broker_name="lane-test", **cfg)
    b = Broker(conf, RemotingClient(), namesrv_addrs=[])
    await b.start()
    for t in TOPICS:
        b.meta.topics.update(TopicConfig(t, 4, 4))
    if not lane:
        b.dispatcher.lane = None
    conn = Connection(b.dispatcher)
    tr = Transport()
    conn.connection_made(tr)  # type: ignore[arg-type]
    return b, conn, tr


@contextlib.asynccontextmanager
async def restarted(b: Broker) -> AsyncIterator[Broker]:
    """A new broker on the store of ``b`` (already shut down)."""
    b2 = Broker(b.cfg, RemotingClient(), namesrv_addrs=[])
    await b2.start()
    try:
        yield b2
    finally:
        await b2.shutdown()


def send(opaque: int, topic: str, qid: int, props: dict[str, str] | str, body: bytes, *, v1: bool = False,
         code: int | None = None, oneway: bool = False, batch: str = "false", binary: bool = False) -> bytes:  # fmt: skip
    names = (("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
              "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch") if v1
             else tuple("abcdefghijklm"))  # fmt: skip
    raw = props if isinstance(props, str) else encode_properties(props).decode()
    values = ("pg", topic, "TBW102", "4", str(qid), "0", "1700000000123", str(opaque % 7), raw,
              "0", "false", "16", batch)  # fmt: skip
    cmd = request(code or (10 if v1 else 310), dict(zip(names, values, strict=True)), body, oneway=oneway)
    cmd.opaque = opaque
    return encode_binary(cmd) if binary else encode(cmd)


ODD_PROPERTIES = ("KEYS\x01a\x02KEYS\x01b\x02", "\x01v\x02TAGS\x01T\x02", "TAGS\x01a\x01b\x02", "TAGS\x01\x02",
                  "\x02\x02WAIT\x01true\x02", "TAGS\x01x\x02\x01\x01\x02", "KEYS\x01k\x02TAGS\x01t\\u0001\x02")


def mixed_stream(seed: int, n: int, binary: float = 0.0) -> list[bytes]:
    """Mostly plain sends, with every kind of request the lane must leave to Python mixed in; a ``binary`` share
    of the sends have ROCKETMQ binary headers."""
    rnd = random.Random(seed)
    frames = []
    for i in range(1, n + 1):
        topic = rnd.choice(TOPICS)
        props = {"UNIQ_KEY": f"U{seed:04d}{i:027d}", "WAIT": "true" if rnd.random() < 0.95 else "false"}
        if rnd.random() < 0.25:  # as the Node client ali-ons sends: the broker assigns one
            del props["UNIQ_KEY"]
        if rnd.random() < 0.7:
            props["TAGS"] = rnd.choice(["TagA", "TagB", "t\u00e9g", "\U0001F600"])
        if rnd.random() < 0.5:
            props["KEYS"] = rnd.choice(["k1", "k1 k2", f"key-{i}", " spaced  keys "])
        if rnd.random() < 0.2:
            props["user\u00e9"] = "v\\\"al\n" * rnd.randint(1, 3)
        if rnd.random() < 0.05:
            props["CLUSTER"] = "client-said"
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.choice((rnd.randint(0, 300), rnd.randint(0, 5000)))))
        if rnd.random() < 0.05:  # a properties string no dict encodes: repeated names, empty parts, \x01 in a value
            frames.append(send(i, topic, rnd.randrange(4), rnd.choice(ODD_PROPERTIES) + f"UNIQ_KEY\x01O{i}", body,
                               v1=rnd.random() < 0.3, binary=rnd.random() < binary))
            continue
        kind = rnd.random()
        if kind < 0.04:
            props["DELAY"] = "2"
        elif kind < 0.06:
            frames.append(encode(dataclasses.replace(request(320, {"a": "pg", "b": topic, "c": "TBW102", "d": "4",
                                                                   "e": "1", "f": "0", "g": "1", "h": "0", "i": "",
                                                                   "j": "0", "m": "true"},
                                                             encode_batch_body([(0, b"b1", props), (0, b"b2", {})])),
                                                     opaque=i)))  # fmt: skip
            continue
        elif kind < 0.08:
            frames.append(send(i, topic, 2, props, body, oneway=True))
            continue
        elif kind < 0.10:
            frames.append(send(i, "%RETRY%g_lane", 0, props, body))
            continue
        elif kind < 0.12:
            frames.append(send(i, topic, 9, props, body))  # no such queue
            continue
        elif kind < 0.14:
            frames.append(encode(dataclasses.replace(request(11, {
                "consumerGroup": "g", "topic": topic, "queueId": "1", "queueOffset": "0", "maxMsgNums": "4",
                "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                "subVersion": "0"}), opaque=i)))  # fmt: skip
            continue
        batch = rnd.choice(["false", "0", "", "false", "0"]) if rnd.random() < 0.98 else rnd.choice(["1", "TRUE"])
        frames.append(send(i, topic, rnd.randrange(4), props, body, v1=rnd.random() < 0.3, batch=batch,
                           binary=rnd.random() < binary))
    return frames


def feed(conn: Connection, frames: list[bytes], seed: int) -> None:
    """Deliver the stream in random chunks, frames straddling reads as on a socket."""
    stream = b"".join(frames)
    rnd = random.Random(seed)
    pos = 0
    while pos < len(stream):
        n = rnd.choice([7, 100, 1500, 9000, 65536])
        conn.data_received(stream[pos:pos + n])
        pos += n


def records(b: Broker) -> list[tuple[Any, ...]]:
    """Every record; UNIQ_KEYs the lane generated read as GENERATED (checked unique and 32 hex digits first)."""
    log = b.store.commit_log
    out = []
    generated: set[str] = set()
    for _phys, f, pos, size in log.walk(log.min_offset, log.max_offset):
        if size > 0:
            m, _ = decode_record(f.mm, pos)
            uniq = m.properties.get("UNIQ_KEY", "")
            if lane_generated(uniq):
                assert uniq not in generated and len(uniq) == 32 and int(uniq, 16) >= 0
                generated.add(uniq)
                m.properties["UNIQ_KEY"] = GENERATED
            out.append((m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.flag, m.sys_flag, m.born_timestamp,
                        m.born_host, m.store_host, m.reconsume_times, m.body, m.properties, m.store_size,
                        m.body_crc))  # fmt: skip
    return out


def queues(b: Broker) -> dict[tuple[str, int], list[tuple[int, ...] | None]]:
    """Every consume-queue entry; delay-queue tags (delivery times: store time + delay) are left out."""
    qs = b.store.queue_store.queues
    out = {k: [cq.entry(o) for o in range(cq.min_offset, cq.max_offset)] for k, cq in sorted(qs.items())}
    return {k: [e[:2] if e and k[0] == "SCHEDULE_TOPIC_XXXX" else e for e in v] for k, v in out.items()}


def lane_generated_keys(b: Broker) -> list[tuple[str, str, int]]:
    """(topic, UNIQ_KEY, physical offset) of the records whose UNIQ_KEY the lane generated."""
    log = b.store.commit_log
    out = []
    for _phys, f, pos, size in log.walk(log.min_offset, log.max_offset):
        if size > 0:
            m, _ = decode_record(f.mm, pos)
            if lane_generated(m.properties.get("UNIQ_KEY", "")):
                out.append((m.topic, m.properties["UNIQ_KEY"], m.commit_log_offset))
    return out


def ext_of(c: RemotingCommand) -> dict[str, str]:
    """An answer's fields; the UNIQ_KEYs the lane generated in a transactionId (a batch's: joined) read as
    GENERATED."""
    tid = c.ext.get("transactionId")
    if tid is None:
        return c.ext
    return {**c.ext, "transactionId": ",".join(GENERATED if lane_generated(x) else x for x in tid.split(","))}


def answers(tr: Transport) -> dict[int, tuple[int, str | None, dict[str, str]]]:
    return {c.opaque: (c.code, c.remark, ext_of(c)) for c in tr.frames}


async def all_answered(*trs: Transport) -> None:
    """SYNC_FLUSH answers come from flush callbacks: wait until the counts stop growing and agree."""
    deadline = asyncio.get_running_loop().time() + 20
    last = None
    while asyncio.get_running_loop().time() < deadline:
        counts = [len(t.frames) for t in trs]
        if counts == last and len(set(counts)) == 1:
            return
        last = counts
        await asyncio.sleep(0.05)  # sleep-ok: polling the answer count with a deadline
    raise AssertionError(f"answers did not settle: {last}")


def one_connection(broker: Any, raw: bytes, ext: Callable[[Any], Any]) -> tuple[list[Any], bool]:
    """``raw`` into a fresh connection of ``broker``: its answers (opaque, code, remark, ext(answer)) and whether
    it closed the connection."""
    conn = Connection(broker.dispatcher)
    tr = Transport()
    conn.connection_made(tr)  # type: ignore[arg-type]
    closed: list[bool] = []
    conn.close = lambda c=closed: c.append(True)  # type: ignore[method-assign,misc]
    conn.data_received(raw)
    return [(c.opaque, c.code, c.remark, ext(c)) for c in tr.frames], bool(closed)


@pytest.mark.parametrize(("flush", "binary"), [("ASYNC_FLUSH", 0.0), ("SYNC_FLUSH", 0.0), ("ASYNC_FLUSH", 0.5)])
async def test_lane_stores_and_answers_exactly_like_the_python_path(tmp_path: Path, flush: str, binary: float) -> None:
    frames = mixed_stream(11, 600, binary)
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane, flush_disk_type=flush)
                                for name, lane in (("a", True), ("b", False))]  # fmt: skip
    try:
        feed(ca, frames, 3)
        feed(cb, frames, 4)
        await all_answered(ta, tb)
        assert a.send_lane is not None and a.send_lane.handled > 300, "the lane must take the plain sends"
        ra, rb = answers(ta), answers(tb)
        assert ra.keys() == rb.keys() and len(ra) > 550
        for opaque, want in rb.items():  # same codes, remarks, message ids and queue offsets
            assert ra[opaque] == want, opaque
        assert records(a) == records(b)
        assert queues(a) == queues(b)
        found = 0
        for key in ("k1", "k2", "key-17", "spaced", "keys", "U0011000000000000000000000000005"):
            for t in TOPICS:
                qa, qb = (sorted(decode_record(buf)[0].commit_log_offset
                                 for buf in x.store.query_message(t, key, 64, 0, 2**62).buffers) for x in (a, b))
                assert qa == qb
                found += len(qa)
        assert found > 50
        generated = lane_generated_keys(a)
        assert len(generated) > 50, "sends without a UNIQ_KEY must take the lane"
        for topic, uniq, phys in generated[:40]:  # the lane's own UNIQ_KEYs are in the key index
            assert [decode_record(buf)[0].commit_log_offset
                    for buf in a.store.query_message(topic, uniq, 4, 0, 2**62).buffers] == [phys]
        sends = sum(1 for f in frames if FrameDecoder().feed(f)[0].code in (10, 310, 320))
        why = a.send_lane.fallbacks
        # every send left to Python is counted (the lane's requests store one message each, its batches two)
        batches = sum(1 for f in frames if FrameDecoder().feed(f)[0].code == 320)
        lane_requests = sends - sum(why.values())
        assert lane_requests <= a.send_lane.handled <= lane_requests + batches
        assert min(why["batch"], why["oneway"], why["queue_not_ready"]) > 0
        assert why["header"] == why["new_topic"] == why["retry_topic"] == 0  # retry sends take the lane too
        assert sum(1 for r in records(a) if r[0] == "%RETRY%g_lane") > 5
        assert a.stats.msgs_in == b.stats.msgs_in and a.stats.bytes_in == b.stats.bytes_in
        assert a.store.max_phy_offset == b.store.max_phy_offset
        assert a.store.dispatched_offset == a.store.max_phy_offset
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_records_survive_restart_and_segment_rolls_inside_one_read(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True, mapped_file_size_commit_log=64 * 1024)
    frames = [send(i, "LaneA", i % 4, {"UNIQ_KEY": f"R{i:031d}", "TAGS": "x"}, bytes([i % 251]) * 900)
              for i in range(1, 401)]  # fmt: skip
    try:
        feed(conn, frames[:4], 1)  # the first message of each queue admits it
        conn.data_received(b"".join(frames[4:]))  # ~370 KB in one read: the segment fills 5 times
        assert {c.code for c in tr.frames} == {0} and len(tr.frames) == 400
        assert b.send_lane is not None and b.send_lane.handled >= 390
        assert len(b.store.commit_log.files) >= 6
        before = records(b)
    finally:
        await b.shutdown()
    async with restarted(b) as b2:
        after = records(b2)
        assert after == before and len(after) == 400
        assert sorted(r[2] for r in after if r[1] == 3) == list(range(100))
        assert queues(b2)[("LaneA", 0)] == [(r[3], r[12], tags_code_of("x")) for r in after if r[1] == 0]


async def test_a_failed_consume_queue_write_flags_the_store_as_the_python_path_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    broken = ConsumeQueueFault(monkeypatch, errno.EIO)
    codes = {}
    for name, lane in (("a", True), ("b", False)):
        b, conn, tr = await start_broker(tmp_path / name, lane)
        try:
            feed(conn, [send(i, "LaneA", i % 4, {"UNIQ_KEY": f"F{i:031d}"}, b"x") for i in range(1, 9)], 1)
            broken.on = True
            conn.data_received(b"".join(send(i, "LaneA", i % 4, {"UNIQ_KEY": f"F{i:031d}"}, b"y")
                                        for i in range(9, 13)))  # fmt: skip
            broken.on = False
            # all but the first send into the empty store (Python creates the first segment), one of the broken
            assert not lane or (b.send_lane is not None and b.send_lane.handled == 8)
            codes[name] = [c.code for c in sorted(tr.frames, key=lambda c: c.opaque)]
            assert b.store.running_flags.has(WRITE_LOGICS_QUEUE_ERROR)
            assert "dispatch" in (b.store.last_error or "")
        finally:
            await b.shutdown()
    # stored, then refused (recovery redoes the dispatch)
    assert codes["a"] == codes["b"] == [0] * 9 + [ResponseCode.SERVICE_NOT_AVAILABLE] * 3


async def test_a_failed_segment_write_acknowledges_none_of_its_sends_and_stops_writes(tmp_path: Path) -> None:
    """The lane writes the records of a read with one pwrite. When it fails (here the segment's descriptor is
    swapped for a read-only one), none of those sends is acknowledged, the store stops taking writes as after a
    failed Python append, and a restart recovers exactly the records written before."""
    b, conn, tr = await start_broker(tmp_path, True)
    try:
        feed(conn, [send(i, "LaneA", i % 4, {"UNIQ_KEY": f"W{i:031d}"}, b"x") for i in range(1, 9)], 1)
        assert b.send_lane is not None and b.send_lane.handled == 7  # the first one creates the first segment
        f = b.store.commit_log.files[-1]
        real_fd, read_only = f.fd, os.open(f.path, os.O_RDONLY)
        f.fd = read_only
        try:
            conn.data_received(b"".join(send(i, "LaneA", i % 4, {"UNIQ_KEY": f"W{i:031d}"}, b"y")
                                        for i in range(9, 13)))  # fmt: skip
        finally:
            f.fd = real_fd
            os.close(read_only)
        assert b.send_lane.handled == 7 and sorted(c.opaque for c in tr.frames) == list(range(1, 9))
        assert b.store.running_flags.has(NOT_WRITEABLE) and "append" in (b.store.last_error or "")
        conn.data_received(send(13, "LaneA", 1, {"UNIQ_KEY": f"W{13:031d}"}, b"z"))
        assert [c.code for c in tr.frames if c.opaque == 13] == [ResponseCode.SERVICE_NOT_AVAILABLE]
        before = records(b)
    finally:
        await b.shutdown()
    async with restarted(b) as b2:
        assert records(b2) == before and [r[10] for r in before] == [b"x"] * 8
        assert sum(len(v) for k, v in queues(b2).items() if k[0] == "LaneA") == 8


async def test_topic_changes_and_role_changes_take_effect_on_the_next_send(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True)
    try:
        feed(conn, [send(i, "LaneB", i % 4, {"UNIQ_KEY": f"C{i:031d}"}, b"x") for i in range(1, 9)], 1)
        assert b.send_lane is not None and b.send_lane.handled == 7
        b.meta.topics.update(TopicConfig("LaneB", 4, 4, perm=PERM_READ))
        conn.data_received(send(20, "LaneB", 1, {"UNIQ_KEY": "C20"}, b"x"))
        b.meta.topics.update(TopicConfig("LaneB", 2, 2))
        conn.data_received(send(21, "LaneB", 3, {"UNIQ_KEY": "C21"}, b"x"))
        conn.data_received(send(22, "LaneB", 1, {"UNIQ_KEY": "C22"}, b"x"))
        await b.change_role("SLAVE", 1)
        conn.data_received(send(23, "LaneB", 1, {"UNIQ_KEY": "C23"}, b"x"))
        await b.change_role("ASYNC_MASTER", 0)
        conn.data_received(send(24, "LaneB", 1, {"UNIQ_KEY": "C24"}, b"x"))
        got = {c.opaque: c.code for c in tr.frames}
        assert got[20] == ResponseCode.NO_PERMISSION  # the topic became read-only
        assert got[21] == ResponseCode.INVALID_PARAMETER and got[22] == 0  # queue 3 is gone, 1 is not
        assert got[23] == ResponseCode.SERVICE_NOT_AVAILABLE and got[24] == 0  # a slave refuses; master again
    finally:
        await b.shutdown()


async def test_random_queue_choice_stays_inside_the_write_queues(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True)
    try:
        for q in range(4):  # admit every queue
            conn.data_received(send(q + 1, "LaneA", q, {"UNIQ_KEY": f"Q{q}"}, b"x"))
        conn.data_received(b"".join(send(i, "LaneA", -1, {"UNIQ_KEY": f"Q{i}"}, b"x") for i in range(10, 210)))
        qids = [int(c.ext["queueId"]) for c in tr.frames if c.opaque >= 10]
        assert len(qids) == 200 and set(qids) == {0, 1, 2, 3}
    finally:
        await b.shutdown()


def mutate(rnd: random.Random, frame: bytes) -> bytes:
    """A valid send frame with a few header bytes changed (lengths kept, so the stream stays framed)."""
    hlen = int.from_bytes(frame[5:8], "big")  # the first byte is the serialize type
    raw = bytearray(frame)
    for _ in range(rnd.randint(1, 4)):
        pos = 8 + rnd.randrange(hlen)
        raw[pos] = rnd.choice(b'"\\{}[]:,0123456789-.eE ux\x01\x02\x00\xff\xc3\xa9') if rnd.random() < 0.7 \
            else rnd.randrange(256)
    return bytes(raw)


def queue_field_is_plain(raw: bytes) -> bool:
    """Frames whose queue id field is a valid explicit id (random queue choice differs between the paths)."""
    try:
        cmd = FrameDecoder().feed(raw)[0]
    except Exception:  # noqa: BLE001 - undecodable: both paths close the connection
        return True
    q = cmd.ext.get("e" if cmd.code != 10 else "queueId", "")
    return q.isdigit()


async def test_mutated_send_frames_get_the_python_answers_and_never_crash(tmp_path: Path) -> None:
    rnd = random.Random(5)
    base = [send(i, rnd.choice(TOPICS), i % 4, {"UNIQ_KEY": f"M{i:031d}", "TAGS": "t", "KEYS": "a b"},
                 bytes([i % 256]) * rnd.randint(0, 200), v1=i % 3 == 0, binary=i % 4 == 1)
            for i in range(1, 1201)]  # fmt: skip
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane) for name, lane in (("a", True), ("b", False))]
    try:
        feed(ca, base[:40], 1)  # admit topics and queues
        feed(cb, base[:40], 1)
        outcomes: dict[str, list[Any]] = {"a": [], "b": []}
        for i, frame in enumerate(base[40:]):
            raw = mutate(rnd, frame) if i % 2 else frame
            if not queue_field_is_plain(raw):
                continue
            for name, broker in (("a", a), ("b", b)):
                outcomes[name].append(one_connection(broker, raw, ext_of))
        assert outcomes["a"] == outcomes["b"]
        assert sum(1 for frames, closed in outcomes["a"] if closed) > 20  # the fuzz reached the error paths
        assert a.send_lane is not None and a.send_lane.handled > 500
        assert records(a) == records(b)
        assert queues(a) == queues(b)
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_sync_flush_timeout_answers_flush_disk_timeout_like_the_python_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    got = {}
    for name, lane in (("a", True), ("b", False)):
        b, conn, tr = await start_broker(tmp_path / name, lane, flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200)
        disk: DiskFault | None = None
        try:
            feed(conn, [send(i, "LaneA", i % 4, {"UNIQ_KEY": f"S{i:031d}"}, b"x") for i in range(1, 5)], 1)
            await all_answered(tr)
            disk = DiskFault(b.store, monkeypatch).stall()  # the disk hangs until the test is done
            conn.data_received(b"".join(send(i, "LaneA", i % 4, {"UNIQ_KEY": f"S{i:031d}"}, b"y") for i in range(5, 9)))
            deadline = asyncio.get_running_loop().time() + 10
            while len(tr.frames) < 8 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)  # sleep-ok: polling for the timed-out answers with a deadline
            got[name] = sorted((c.opaque, c.code, c.remark, c.ext.get("queueOffset")) for c in tr.frames)
            assert not lane or (b.send_lane is not None and b.send_lane.handled == 7)
        finally:
            if disk is not None:
                disk.release()
            await b.shutdown()
    assert got["a"] == got["b"]
    assert [c[1] for c in got["a"]] == [0] * 4 + [ResponseCode.FLUSH_DISK_TIMEOUT] * 4


async def test_live_config_changes_reach_the_answers(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True)
    try:
        feed(conn, [send(i, "LaneA", i % 4, {"UNIQ_KEY": f"L{i:031d}"}, b"x") for i in range(1, 9)], 1)
        b.update_config({"regionId": "EU-1", "traceOn": "false"})
        feed(conn, [send(i, "LaneA", i % 4, {"UNIQ_KEY": f"L{i:031d}"}, b"x") for i in range(9, 17)], 1)
        regions = {c.opaque: (c.ext["MSG_REGION"], c.ext["TRACE_ON"]) for c in tr.frames}
        assert {regions[i] for i in range(1, 9)} == {("DefaultRegion", "true")}
        assert {regions[i] for i in range(9, 17)} == {("EU-1", "false")}
        assert b.send_lane is not None and b.send_lane.handled >= 8
    finally:
        await b.shutdown()


CAPTURES = json.loads((Path(__file__).parents[1] / "testdata" / "client_first_frames.json").read_text())


@pytest.mark.parametrize("capture", [f for f in CAPTURES if f["target"] == "broker"], ids=lambda f: f["client"][:28])
async def test_real_client_sends_take_the_lane_when_they_can(tmp_path: Path, capture: dict[str, Any]) -> None:
    """The first send into an empty store goes through Python (it creates the first commit-log segment); the next
    identical one takes the lane, with a JSON or a binary header, with or without a UNIQ_KEY (ali-ons sends none:
    the lane assigns one)."""
    raw = bytes.fromhex(capture["hex"])
    cmd = FrameDecoder().feed(raw)[0]
    b, conn, tr = await start_broker(tmp_path, True)
    try:
        b.meta.topics.update(TopicConfig(cmd.ext.get("b") or cmd.ext["topic"], 4, 4))
        conn.data_received(raw)
        conn.data_received(raw)
        assert [c.code for c in tr.frames] == [0, 0]
        assert b.send_lane is not None and b.send_lane.handled == 1
        first, second = records(b)
        assert first[:2] == second[:2] and first[4:] [:-3] == second[4:][:-3]  # same topic, queue, flags, body
        assert int(tr.frames[1].ext["queueOffset"]) == int(tr.frames[0].ext["queueOffset"]) + 1
    finally:
        await b.shutdown()


ACL_YML = """accounts:
  - accessKey: laneUser1
    secretKey: laneSecret1
    defaultTopicPerm: DENY
    topicPerms: [LaneA=PUB, LaneB=PUB|SUB, Lane_C-%s=SUB]
""".replace("%s", "x" * 100)


def signed_send(rnd: random.Random, i: int) -> bytes:
    """A send signed by laneUser1 (sometimes badly, by a stranger or not at all), JSON with numbers as JSON
    numbers (as the C++ client sends them), JSON strings or a binary header."""
    import struct

    from brokerd.acl import sign_request

    topic = rnd.choice(TOPICS)
    props = {"UNIQ_KEY": f"A{i:031d}", "WAIT": "true", "TAGS": rnd.choice(["TagA", "t\u00e9g"])}
    ext = dict(zip("abcdefghijklm", ("pg", topic, "TBW102", "4", str(rnd.randrange(4)), "0", "1700000000123", "0",
                                     encode_properties(props).decode(), "0", "false", "16", "false"), strict=True))
    ext["OnsChannel"] = "ALIYUN"
    body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 200)))
    cmd = request(310, ext, body)
    cmd.opaque = i
    kind = rnd.random()
    sign_request(cmd, "stranger1" if kind < 0.05 else "laneUser1", "laneSecret1")
    if kind < 0.1:
        cmd.body = body + b"!"  # tampered after signing
    elif kind < 0.13:
        cmd.ext.pop("Signature")
    if rnd.random() < 0.3:
        return encode_binary(cmd)
    if rnd.random() < 0.5:
        return encode(cmd)
    header = {"code": 310, "flag": 0, "language": "CPP", "opaque": i, "version": 333,
              "extFields": {k: int(v) if k in "defhl" else v for k, v in cmd.ext.items()}}
    h = json.dumps(header).encode()
    return struct.pack(">iI", 4 + len(h) + len(cmd.body or b""), len(h)) + h + (cmd.body or b"")


async def test_acl_sends_through_the_lane_match_the_python_path(tmp_path: Path) -> None:
    """ACL on: the lane takes only sends signed by an account the Python check admitted for the topic; bad
    signatures, strangers, unsigned and not-permitted topics get the Python path's NO_PERMISSION answers."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    rnd = random.Random(5)
    frames = [signed_send(rnd, i) for i in range(1, 401)]
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane, acl_enable=True, acl_file_path=str(acl))
                                for name, lane in (("a", True), ("b", False))]  # fmt: skip
    try:
        feed(ca, frames, 3)
        feed(cb, frames, 4)
        await all_answered(ta, tb)
        ra, rb = answers(ta), answers(tb)
        assert ra == rb and len(ra) == 400
        codes = [c for c, _, _ in ra.values()]
        assert codes.count(ResponseCode.NO_PERMISSION) > 100 and codes.count(0) > 150
        assert records(a) == records(b) and queues(a) == queues(b)
        assert all(r[0] != TOPICS[2] for r in records(a)), "a SUB-only topic got a message"
        assert a.send_lane is not None and a.send_lane.handled > 100, "the lane must take the signed sends"
        misses = a.send_lane.acl_misses()
        assert misses["signature_mismatch"] > 0 and misses["not_admitted"] > 0, misses
    finally:
        await a.shutdown()
        await b.shutdown()


@pytest.mark.parametrize("binary", [0.0, 0.5])
async def test_overload_refusals_are_the_python_paths_and_store_nothing(tmp_path: Path, binary: float) -> None:
    """While the send queue is full every send is answered SYSTEM_BUSY at once, by the lane in C exactly as by the
    Python processor (one-way sends unanswered, other requests served); once it drains both store alike again."""
    frames = mixed_stream(17, 300, binary)
    # a minute's wait limit: only the full queue refuses here, never a read the loaded machine handled late
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane, broker_fast_failure_enable=True,
                                                   wait_time_mills_in_send_queue=60_000)
                                for name, lane in (("a", True), ("b", False))]  # fmt: skip
    try:
        feed(ca, frames[:20], 1)  # admit topics and queues
        feed(cb, frames[:20], 1)
        await all_answered(ta, tb)
        full = [x.send_admission.waiting(x.cfg.send_thread_pool_queue_capacity, asyncio.get_running_loop().time(), 0)
                for x in (a, b)]  # fmt: skip
        before = len(ta.frames), records(a)
        feed(ca, frames[20:200], 2)
        feed(cb, frames[20:200], 3)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb)
        busy = [c for c in ta.frames[before[0]:] if c.code == ResponseCode.SYSTEM_BUSY]
        assert len(busy) > 100 and {c.remark for c in busy} == {"[OVERLOAD]system busy, start flow control for a while"}
        assert records(a) == before[1]  # nothing stored
        assert a.send_admission.refused == b.send_admission.refused and a.send_admission.refused["overload"] > 100
        for x, entry in zip((a, b), full, strict=True):
            x.send_admission.answered(entry)
        feed(ca, frames[200:], 4)
        feed(cb, frames[200:], 5)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and records(a) == records(b) and queues(a) == queues(b)
        assert a.send_lane is not None and a.send_lane.handled > 50
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_mutated_signed_frames_never_pass_the_acl_check_on_either_path(tmp_path: Path) -> None:
    """ACL on: signed sends with random header bytes changed get the same answers from the lane and the Python
    path, and none is stored unless what it decodes to is what was signed."""
    from brokerd.acl import sign_request

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    rnd = random.Random(9)
    base = []
    for i in range(1, 801):
        cmd = request(310, dict(zip("abcdefghijklm", ("pg", rnd.choice(TOPICS[:2]), "TBW102", "4", str(i % 4), "0",
                                                      "1700000000123", "0",
                                                      encode_properties({"UNIQ_KEY": f"S{i:031d}", "TAGS": "t"}).decode(),
                                                      "0", "false", "16", "false"), strict=True)),
                      bytes([i % 256]) * rnd.randint(0, 100))  # fmt: skip
        cmd.opaque = i
        sign_request(cmd, "laneUser1", "laneSecret1")
        base.append(encode_binary(cmd) if i % 4 == 1 else encode(cmd))
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane, acl_enable=True, acl_file_path=str(acl))
                                for name, lane in (("a", True), ("b", False))]  # fmt: skip
    try:
        feed(ca, base[:40], 1)  # admit the account for the topics
        feed(cb, base[:40], 1)
        outcomes: dict[str, list[Any]] = {"a": [], "b": []}
        for i, frame in enumerate(base[40:]):
            raw = mutate(rnd, frame) if i % 2 else frame
            for name, broker in (("a", a), ("b", b)):
                outcomes[name].append(one_connection(broker, raw, lambda c: c.ext))
            answers_a = outcomes["a"][-1][0]
            if raw != frame and answers_a and answers_a[0][1] == 0:
                orig, new = FrameDecoder().feed(frame)[0], FrameDecoder().feed(raw)[0]
                assert (orig.ext, orig.body) == (new.ext, new.body), "a changed request passed the check"
        assert outcomes["a"] == outcomes["b"]
        codes = [frames[0][1] for frames, _ in outcomes["a"] if frames]
        assert codes.count(ResponseCode.NO_PERMISSION) > 30 and codes.count(0) > 350
        assert sum(1 for _, closed in outcomes["a"] if closed) > 100  # malformed: the connection closed
        assert a.send_lane is not None and a.send_lane.handled > 350
        assert records(a) == records(b) and queues(a) == queues(b)
    finally:
        await a.shutdown()
        await b.shutdown()
