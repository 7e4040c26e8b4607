"""The C send lane against the Python send path for each send shape beyond the plain one: a new topic's sends,
delay levels, batches, half messages (same request stream into a broker with and without the lane: same records,
queues, index and answers)."""

from __future__ import annotations

import dataclasses
import random
import zlib
from pathlib import Path

import pytest

from brokerd.broker import Broker
from brokerd.message import decode_record, encode_batch_body
from brokerd.native import native
from brokerd.remoting import encode, request
from brokerd.remoting.codec import FrameDecoder
from tests.integration.test_send_lane import (
    TOPICS,
    all_answered,
    answers,
    feed,
    queues,
    records,
    same_generated_ids,
    send,
    start_broker,
)
from tests.support import DiskFault

pytestmark = pytest.mark.skipif(native is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")
__all__ = ["same_generated_ids"]  # the autouse fixture: the Python path's generated UNIQ_KEYs as GENERATED


@pytest.mark.parametrize("v1", [False, True])
async def test_a_new_topics_sends_take_the_lane_from_the_first(tmp_path: Path, v1: bool) -> None:
    """A topic auto-created by its first send (TBW102): the lane asks the Python processor once (it creates the
    topic) and stores that send and every later one itself, each queue's first too (its consume queue created
    as the store's dispatch creates one); both answer and store as the Python path alone."""
    warm = send(100, "LaneA", 0, {"UNIQ_KEY": "W"}, b"w")  # an empty store's first send creates its first segment
    frames = [send(i, "FreshTopic", i % 4, {"TAGS": "t"} if i % 2 else {"UNIQ_KEY": f"N{i:031d}"}, b"n" * i, v1=v1)
              for i in range(1, 41)]  # fmt: skip
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane) for name, lane in (("a", True), ("b", False))]
    try:
        for conn in (ca, cb):
            conn.data_received(warm)
        feed(ca, frames, 1)
        feed(cb, frames, 1)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert records(a) == records(b) and queues(a) == queues(b)
        assert a.meta.topics.get("FreshTopic") == b.meta.topics.get("FreshTopic") is not None
        assert a.send_lane is not None and a.send_lane.handled == 40
        assert a.send_lane.fallbacks["new_topic"] == 0 and a.send_lane.fallbacks["queue_not_ready"] == 0
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_delay_level_sends_take_the_lane(tmp_path: Path) -> None:
    """Delayed sends are stored in SCHEDULE_TOPIC_XXXX (queue level - 1, REAL_TOPIC / REAL_QID, DELAY clamped,
    delivery time as tags) by the lane exactly as by the Python path, each level's first send too (the level's
    consume queue created as the store's dispatch creates one); odd DELAY values go through Python."""
    delays = ["1", "3", "007", "99", "0", "x", " 2", "3", "1", "18", "4", "3", "1", "2", "00"]
    frames = [send(i, "LaneA" if i % 3 else "LaneB", i % 4,
                   {"DELAY": delays[i % len(delays)], **({"UNIQ_KEY": f"D{i:031d}"} if i % 2 else {}),
                    **({"REAL_QID": "9"} if i % 11 == 0 else {})}, b"d" * i, v1=i % 5 == 0)
              for i in range(1, 121)]  # fmt: skip
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane) for name, lane in (("a", True), ("b", False))]
    try:
        plain = [send(i, "LaneA", q, {"UNIQ_KEY": f"P{i}"}, b"p") for i, q in enumerate(range(4), start=1000)]
        for x in (ca, cb):
            feed(x, plain, 1)
            feed(x, frames, 2)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert records(a) == records(b) and queues(a) == queues(b)
        delayed = [r for r in records(a) if r[0] == "SCHEDULE_TOPIC_XXXX"]
        assert {r[1] for r in delayed} == {0, 1, 2, 3, 6, 17} and {r[11]["DELAY"] for r in delayed} >= {"7", "18"}
        odd = sum(1 for i in range(1, 121) if delays[i % len(delays)] in ("x", " 2"))
        assert a.send_lane is not None and a.send_lane.fallbacks["delay"] == odd
        # all but the odd ones and the first plain send (into the empty store: it creates the first segment)
        assert a.send_lane.handled == len(plain) + len(frames) - odd - 1
    finally:
        await a.shutdown()
        await b.shutdown()


def batch_frame(opaque: int, topic: str, qid: int, msgs: list[tuple[int, bytes, dict[str, str]]], how: str) -> bytes:
    """A batch as SEND_BATCH_MESSAGE (320) or as a 310 / 10 send with batch=true."""
    body = encode_batch_body(msgs)
    if how == "320":
        ext = dict(zip("abcdefghijklm", ("pg", topic, "TBW102", "4", str(qid), "0", "1700000000123", "0", "", "0",
                                         "false", "16", "true"), strict=True))  # fmt: skip
        return encode(dataclasses.replace(request(320, ext, body), opaque=opaque))
    frame = send(opaque, topic, qid, {}, b"", v1=how == "10", batch="true")
    cmd = FrameDecoder().feed(frame)[0]
    return encode(dataclasses.replace(cmd, body=body))


async def test_batches_take_the_lane_and_store_like_the_python_path(tmp_path: Path) -> None:
    """Batches (320, or batch=true on 310 / 10): one record per message with consecutive queue offsets, one store
    time, one answer (message ids and UNIQ_KEYs joined); malformed ones get the Python path's answer."""
    rnd = random.Random(23)
    frames = [send(i, t, q, {"UNIQ_KEY": f"P{i}"}, b"p") for i, (t, q) in
              enumerate(((t, q) for t in TOPICS[:2] for q in range(4)), start=1)]  # admit the queues
    for i in range(20, 220):
        msgs = [(rnd.randrange(3), bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 200))),
                 {**({"UNIQ_KEY": f"B{i:04d}{j:02d}"} if rnd.random() < 0.5 else {}),
                  **({"TAGS": rnd.choice(["a", "t\u00e9g"])} if rnd.random() < 0.7 else {}),
                  **({"KEYS": f"bk{i} bk{i}-{j}"} if rnd.random() < 0.5 else {}),
                  **({"CLUSTER": "c"} if rnd.random() < 0.1 else {})}) for j in range(rnd.randint(1, 16))]
        frame = batch_frame(i, rnd.choice(TOPICS[:2]), rnd.randrange(4), msgs, rnd.choice(["320", "310", "10"]))
        kind = rnd.random()
        if kind < 0.04:  # truncated body: the length prefix kept, the last entry cut short
            cmd = FrameDecoder().feed(frame)[0]
            frame = encode(dataclasses.replace(cmd, body=(cmd.body or b"")[:-3]))
        elif kind < 0.06:
            frame = batch_frame(i, "LaneA", 1, [], "320")  # empty batch
        elif kind < 0.08:
            cmd = FrameDecoder().feed(frame)[0]
            raw = bytearray(cmd.body or b"")
            raw[-1] = 0xFF  # properties that are not UTF-8
            frame = encode(dataclasses.replace(cmd, body=bytes(raw)))
        frames.append(frame)
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane, flush_disk_type=flush)
                                for name, lane, flush in (("a", True, "SYNC_FLUSH"), ("b", False, "SYNC_FLUSH"))]  # fmt: skip
    try:
        feed(ca, frames, 1)
        feed(cb, frames, 2)
        await all_answered(ta, tb)
        ra, rb = answers(ta), answers(tb)
        assert ra.keys() == rb.keys() and len(ra) == len(frames)
        for opaque, want in rb.items():
            assert ra[opaque] == want, opaque
        assert records(a) == records(b) and queues(a) == queues(b)
        assert sum(1 for c in ta.frames if c.code != 0) >= 5  # the malformed ones
        for key in ("bk40", "bk99-0", "B005000"):
            for t in TOPICS[:2]:
                qa, qb = (sorted(decode_record(buf)[0].commit_log_offset
                                 for buf in x.store.query_message(t, key, 64, 0, 2**62).buffers) for x in (a, b))
                assert qa == qb
        assert a.send_lane is not None and a.send_lane.handled > 1000
        assert a.stats.msgs_in == b.stats.msgs_in and a.stats.bytes_in == b.stats.bytes_in
    finally:
        await a.shutdown()
        await b.shutdown()


def with_sys_flag(frame: bytes, sys_flag: int) -> bytes:
    cmd = FrameDecoder().feed(frame)[0]
    key = "f" if cmd.code != 10 else "sysFlag"
    return encode(dataclasses.replace(cmd, ext={**cmd.ext, key: str(sys_flag)}))


@pytest.mark.parametrize("half_topic", ["present", "deleted"])
async def test_transactional_half_messages_take_the_lane(tmp_path: Path, half_topic: str) -> None:
    """Prepared sends (sysFlag 4 with TRAN_MSG=true) are stored as half messages (RMQ_SYS_TRANS_HALF_TOPIC queue
    0, REAL_TOPIC / REAL_QID, no transaction bits, no delay) by the lane exactly as by the Python path; other
    transaction flags, or a prepared flag without TRAN_MSG, stay in Python. When the half topic was deleted, the
    first half message goes through Python (it creates the topic again), the next ones take the lane."""
    rnd = random.Random(31)
    frames = [send(i, "LaneA", q, {"UNIQ_KEY": f"P{i}"}, b"p") for i, q in enumerate(range(4), start=1000)]
    for i in range(1, 151):
        props = {"TRAN_MSG": "true", "PGROUP": "pg", **({"UNIQ_KEY": f"H{i:031d}"} if i % 2 else {}),
                 **({"TAGS": "tx"} if i % 3 else {}), **({"DELAY": "2"} if i % 7 == 0 else {}),
                 **({"REAL_QID": "9"} if i % 13 == 0 else {}), **({"KEYS": f"hk{i}"} if i % 5 == 0 else {})}
        kind = rnd.random()
        flag = 8 if kind < 0.05 else 5 if kind < 0.15 else 4  # commit type (Python), compressed + prepared
        if 0.15 <= kind < 0.2:
            del props["TRAN_MSG"]  # prepared without TRAN_MSG: not a half message (Python)
        frames.append(with_sys_flag(send(i, rnd.choice(("LaneA", "LaneB")), rnd.randrange(4), props, b"h" * i,
                                         v1=i % 4 == 0), flag))  # fmt: skip
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane) for name, lane in (("a", True), ("b", False))]
    if half_topic == "deleted":
        for x in (a, b):
            x.meta.topics.delete("RMQ_SYS_TRANS_HALF_TOPIC")
    try:
        feed(ca, frames, 1)
        feed(cb, frames, 2)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb)
        assert records(a) == records(b) and queues(a) == queues(b)
        assert a.meta.topics.get("RMQ_SYS_TRANS_HALF_TOPIC") == b.meta.topics.get("RMQ_SYS_TRANS_HALF_TOPIC")
        half = [r for r in records(a) if r[0] == "RMQ_SYS_TRANS_HALF_TOPIC"]
        assert len(half) > 100 and {r[1] for r in half} == {0} and all(r[5] & 0xC == 0 for r in half)
        for key in ("hk10", "hk35"):
            qa, qb = (sorted(decode_record(buf)[0].commit_log_offset for buf in
                             x.store.query_message("RMQ_SYS_TRANS_HALF_TOPIC", key, 8, 0, 2**62).buffers)
                      for x in (a, b))  # fmt: skip
            assert qa == qb and len(qa) == 1
        # every half message (but the first when the half topic was deleted); the first plain send creates the
        # empty store's first segment
        assert a.send_lane is not None and a.send_lane.handled == 3 + len(half) - (half_topic == "deleted")
        assert a.send_lane.fallbacks["transaction"] >= 10
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_compressed_bodies_take_the_lane_stored_as_sent(tmp_path: Path) -> None:
    """Bodies the client compressed (sysFlag bit 0x1, as the Java client sends bodies over 4 KiB; with a 5.x
    client's compression type bits too) are stored as sent, flag and bytes, never decompressed: by the lane exactly
    as by the Python path."""
    rnd = random.Random(37)
    words = [bytes(rnd.choice(b"abcdefghij") for _ in range(rnd.randint(2, 9))) for _ in range(300)]
    frames, sent = [], {}
    for i in range(1, 121):
        body = zlib.compress(b" ".join(rnd.choice(words) for _ in range(rnd.randint(800, 4000))))
        flag = rnd.choice([0x1, 0x1, 0x1 | 0x300, 0x1 | 0x2])  # compressed; + ZLIB type bits; + multi tags
        topic = rnd.choice(TOPICS[:2])
        sent[f"Z{i:031d}"] = (flag, body)
        frames.append(with_sys_flag(send(i, topic, i % 4, {"UNIQ_KEY": f"Z{i:031d}", "TAGS": "z"}, body,
                                         v1=i % 3 == 0), flag))  # fmt: skip
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane) for name, lane in (("a", True), ("b", False))]
    try:
        feed(ca, frames, 1)
        feed(cb, frames, 2)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert records(a) == records(b) and queues(a) == queues(b)
        assert {r[11]["UNIQ_KEY"]: (r[5], r[10]) for r in records(a)} == sent
        assert a.send_lane is not None and a.send_lane.handled == len(frames) - 1  # the first creates the segment
    finally:
        await a.shutdown()
        await b.shutdown()


def index_files(b: Broker) -> list[tuple[object, ...]]:
    """Each key index file: count, first and last record, slot table, entries (hash and chain, record) and whether
    the last entry's store time is the file's end time (the times differ between two brokers)."""
    assert b.store.index is not None
    out: list[tuple[object, ...]] = []
    for f in b.store.index.files:
        ent = f.ent_view
        out.append((f.count, f.begin_phy, f.end_phy, bytes(f.slot_view),
                    [(ent[i * 3], ent[i * 3 + 1]) for i in range(1, f.count)],
                    f.count == 1 or ent[(f.count - 1) * 3 + 2] == f.end_ts > 0))  # fmt: skip
    return out


async def test_index_and_queue_entries_are_written_entry_for_entry_as_the_python_path_writes_them(
        tmp_path: Path) -> None:  # fmt: skip
    """The lane writes key index and consume-queue entries into the current files itself (brokerd/csrc/lane_index.c,
    lane_cq.c); an entry that does not fit goes to IndexService.put_keys / ConsumeQueue.put, which roll to a new
    file. With files small enough to roll many times within one read, both brokers' index files hold the same
    slots, entries and counts, and their consume queues the same entries."""
    keys = ["", "k{i}", "k{i} k{j}", "  k{j}  spaced  ", "X{i:031d}", "k{i} X{i:031d} k{j}", "\u00e9t\u00e9 k{j}"]
    frames = [send(i, TOPICS[i % 2], i % 4, {"UNIQ_KEY": f"X{i:031d}", "KEYS": keys[i % len(keys)].format(i=i, j=i % 5)}
                   | ({"TAGS": "t"} if i % 3 else {}), b"x" * (i % 50)) for i in range(1, 600)]  # fmt: skip
    brokers = [await start_broker(tmp_path / name, lane, max_index_num=160, max_hash_slot_num=37,
                                  mapped_file_size_consume_queue=20 * 30) for name, lane in (("a", True), ("b", False))]
    (a, ca, ta), (b, cb, tb) = brokers
    try:
        feed(ca, frames, 5)
        feed(cb, frames, 6)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert a.send_lane is not None and a.send_lane.handled > 590
        assert a.store.index is not None and len(a.store.index.files) > 5
        assert index_files(a) == index_files(b)
        assert all(f[5] for f in index_files(a))
        assert queues(a) == queues(b)
        sent = [cq for (t, _q), cq in a.store.queue_store.queues.items() if t in TOPICS]
        assert len(sent) == 4 and all(len(cq.files) > 3 for cq in sent)
        for key in ("k7", "k3", "spaced", "X" + "0" * 28 + "123", "\u00e9t\u00e9"):
            found = [sorted(decode_record(buf)[0].commit_log_offset
                            for buf in x.store.query_message(TOPICS[1], key, 64, 0, 2**62).buffers) for x in (a, b)]
            assert found[0] == found[1]
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_a_send_header_is_read_by_its_codes_field_names_only(tmp_path: Path) -> None:
    """SEND_MESSAGE (10) is read by the full field names, SEND_MESSAGE_V2 by the letters: a field named the other
    way is just another field (the lane indexes the names its code uses), as in the Python processor."""
    full = {"producerGroup": "pg", "topic": TOPICS[0], "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "1", "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "properties": "UNIQ_KEY\u0001F\u0002",
            "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}  # fmt: skip
    short = dict(zip("abcdefghijkm", full.values(), strict=True))
    frames = [encode(dataclasses.replace(request(10, {**full, "b": TOPICS[1], "e": "3"}, b"x"), opaque=1)),
              encode(dataclasses.replace(request(310, {**short, "topic": TOPICS[1], "queueId": "3"}, b"y"), opaque=2)),
              encode(dataclasses.replace(request(10, {"b": TOPICS[1], **full, "topic": TOPICS[1]}, b"z"), opaque=3))]
    (a, ca, ta), (b, cb, tb) = [await start_broker(tmp_path / name, lane) for name, lane in (("a", True), ("b", False))]
    try:
        for conn in (ca, cb):
            for f in frames:
                conn.data_received(f)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert records(a) == records(b) and queues(a) == queues(b)
        assert [(r[0], r[1]) for r in records(a)] == [(TOPICS[0], 1), (TOPICS[0], 1), (TOPICS[1], 1)]
        assert a.send_lane is not None and a.send_lane.handled >= 2
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_the_answers_one_flush_releases_go_out_in_one_write_per_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """SYNC_FLUSH: sends read one at a time while a flush is in flight are answered when the flush that covers them
    completes, all in one write per connection (Connection.write_soon), not one write per read."""
    b, conn, tr = await start_broker(tmp_path, True, flush_disk_type="SYNC_FLUSH")
    writes: list[int] = []
    real = tr.writelines

    def writelines(data: list[bytes]) -> None:
        writes.append(len(data))
        real(data)

    tr.writelines = writelines  # type: ignore[method-assign]
    try:
        conn.data_received(send(1, TOPICS[0], 0, {"UNIQ_KEY": "W1"}, b"w"))  # the first segment (Python)
        await all_answered(tr)
        writes.clear()
        disk = DiskFault(b.store, monkeypatch).stall()
        for i in range(2, 22):  # 20 reads, one send each, while the disk holds the flush
            conn.data_received(send(i, TOPICS[0], i % 4, {"UNIQ_KEY": f"W{i}"}, b"w"))
        assert writes == [] and len(tr.frames) == 1
        disk.release()
        await all_answered(tr)
        assert len(tr.frames) == 21 and {c.code for c in tr.frames} == {0}
        assert b.send_lane is not None and b.send_lane.handled == 20
        assert len(writes) <= 2 and sum(writes) == 20  # the flush in flight, then the one after it
    finally:
        await b.shutdown()
