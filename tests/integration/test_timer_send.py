"""Timer messages through the broker's own request path (an in-process broker fed like a socket, real files, with
and without the C send lane): what the send answers (the recall handle), what is stored where, RocketMQ's refusals
on a connection that serves on, the lane's ``timer`` fallback count, delay levels and batches as RocketMQ treats
them, and a committed transactional timer."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from brokerd import message as m
from brokerd.message import decode_record, encode_batch_body, encode_properties
from brokerd.native import native
from brokerd.remoting import encode, request
from brokerd.timer.core import PROGRESS_TOPIC, TIMER_TOPIC, delete_key
from brokerd.timer.handle import decode_handle
from tests.integration.test_send_lane import feed, send, start_broker
from tests.support import until

pytestmark = pytest.mark.integration


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def half_send(opaque: int, props: dict[str, str]) -> bytes:
    """A transactional half message (the prepared flag) to LaneA queue 1."""
    cmd = request(310, {"a": "pg", "b": "LaneA", "c": "TBW102", "d": "4", "e": "1", "f": "4", "g": str(now_ms()),
                        "h": "0", "i": encode_properties(props).decode(), "j": "0", "k": "false"}, b"tx")  # fmt: skip
    cmd.opaque = opaque
    return encode(cmd)


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "python"])
async def test_timer_sends_are_parked_answered_with_a_handle_and_bad_ones_refused(tmp_path: Path, lane: bool) -> None:
    if lane and native is None:
        pytest.skip("the C lane is not built")
    b, conn, tr = await start_broker(tmp_path, lane, timer_precision_ms=100, timer_max_delay_sec=600)
    try:
        due = now_ms() + 60_000
        frames = [send(1, "LaneA", 0, {m.UNIQ_KEY: "U1", m.TIMER_DELIVER_MS: str(due)}, b"a"),
                  send(2, "LaneA", 1, {m.UNIQ_KEY: "U2", m.TIMER_DELAY_SEC: "601"}, b"b"),  # beyond the max
                  send(3, "LaneA", 1, {m.UNIQ_KEY: "U3", m.TIMER_DELAY_MS: "x"}, b"c"),  # malformed
                  send(4, "LaneA", 2, {m.UNIQ_KEY: "U4", "DELAY": "2", m.TIMER_DELAY_SEC: "5"}, b"d"),  # a level wins
                  send(5, TIMER_TOPIC, 0, {m.UNIQ_KEY: "U5"}, b"e"),  # the timer topic itself
                  send(6, "LaneA", 3, {m.UNIQ_KEY: "U6"}, b"f"),  # a plain one on the same connection
                  send(7, "LaneA", 3, "", encode_batch_body([(0, b"g", {m.UNIQ_KEY: "U7", m.TIMER_DELAY_SEC: "5"})]),
                       code=320, batch="true")]  # a batch: stored as is (RocketMQ parks single messages)  # fmt: skip
        feed(conn, frames, 1)
        await until(lambda: len(tr.frames) == 7, "7 answers")
        ans = {f.opaque: f for f in tr.frames}
        assert ans[1].code == 0 and ans[1].ext["queueId"] == "0"
        h = decode_handle(ans[1].ext["recallHandle"])
        assert (h.topic, h.broker_name, h.timestamp_ms, h.message_id) == ("LaneA", "lane-test", due + 1, "U1")
        for o in (2, 3):
            remark = ans[o].remark or ""
            assert ans[o].code == 13 and "timer message illegal" in remark and "600000ms" in remark
        assert ans[4].code == 0 and "recallHandle" not in ans[4].ext
        assert ans[5].code == 16  # forbidden
        assert ans[6].code == 0 and ans[7].code == 0 and "recallHandle" not in ans[7].ext
        store = b.store
        parked = decode_record(store.get_message(TIMER_TOPIC, 0, 0, 32).buffers[0])[0]
        assert store.max_offset_in_queue(TIMER_TOPIC, 0) == 1
        assert (parked.properties[m.REAL_TOPIC], parked.properties[m.REAL_QID]) == ("LaneA", "0")
        assert parked.properties[m.TIMER_OUT_MS] == str(due)
        delayed = decode_record(store.get_message("SCHEDULE_TOPIC_XXXX", 1, 0, 32).buffers[0])[0]
        assert m.TIMER_DELAY_SEC not in delayed.properties  # RocketMQ drops the timer properties
        assert [store.max_offset_in_queue("LaneA", q) for q in range(4)] == [0, 0, 0, 2]  # the plain one, the batch
        if lane:
            assert b.send_lane is not None and b.send_lane.fallbacks["timer"] >= 3
        assert b.timers.status()["pending"] == 1 and b.timers.stats.refused == 2
    finally:
        await b.shutdown()


async def test_a_delete_key_send_recalls_and_a_committed_half_waits(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, False, timer_precision_ms=100)
    try:
        due = now_ms() + 1500
        feed(conn, [send(1, "LaneA", 0, {m.UNIQ_KEY: "V1", m.TIMER_DELIVER_MS: str(due)}, b"a"),
                    send(2, "LaneA", 0, {m.UNIQ_KEY: "V2", m.TIMER_DELIVER_MS: str(due)}, b"b"),
                    send(3, "LaneA", 0, {m.UNIQ_KEY: "DEL", m.TIMER_DELIVER_MS: str(due + 1),
                                         m.TIMER_DEL_UNIQKEY: delete_key("LaneA", "V1")}, b""),
                    half_send(4, {m.UNIQ_KEY: "TX", m.TRAN_MSG: "true", m.PGROUP: "pg", m.TIMER_DELAY_MS: "700"})],
             1)  # fmt: skip
        await until(lambda: len(tr.frames) == 4, "4 answers")
        assert [f.code for f in tr.frames] == [0, 0, 0, 0]
        assert b.store.max_offset_in_queue(PROGRESS_TOPIC, 0) == 1  # the delete send became a RECALL marker
        half = decode_record(b.store.get_message("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 1).buffers[0])[0]
        assert m.TIMER_DELAY_MS in half.properties and m.TIMER_OUT_MS not in half.properties  # waits for the commit
        committed_at = now_ms()
        end = request(37, {"producerGroup": "pg", "tranStateTableOffset": "0", "commitLogOffset":
                           str(half.commit_log_offset), "commitOrRollback": "8", "msgId": "TX"})  # fmt: skip
        end.opaque = 5
        conn.data_received(encode(end))
        await until(lambda: len(tr.frames) == 5, "the END_TRANSACTION answer")
        assert tr.frames[-1].code == 0
        await until(lambda: b.store.max_offset_in_queue("LaneA", 1) == 1 and b.store.max_offset_in_queue("LaneA", 0)
                    == 1, "V2 and the committed timer delivered", timeout=10)  # fmt: skip
        assert decode_record(b.store.get_message("LaneA", 0, 0, 32).buffers[0])[0].properties[m.UNIQ_KEY] == "V2"
        tx = decode_record(b.store.get_message("LaneA", 1, 0, 1).buffers[0])[0]
        assert tx.store_timestamp >= committed_at + 700 and tx.properties[m.UNIQ_KEY] == "TX"
    finally:
        await b.shutdown()
