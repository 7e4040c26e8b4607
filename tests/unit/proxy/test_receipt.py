"""Receipt handles as RocketMQ's broker, client and proxy spell them: decoded, expired, their real topic; the
handles a POP answer gives each message (processPopResponse); recall handles."""

from __future__ import annotations

import pytest

from brokerd import message as m
from brokerd.proxy.receipt import (
    HandleError,
    PopAnswer,
    assign_handles,
    build_recall_handle,
    decode_handle,
    decode_recall_handle,
    topic_type,
)


def msg(topic: str, qid: int, offset: int, phys: int, **props: str) -> m.MessageExt:
    return m.MessageExt(store_size=0, magic=m.MAGIC_V1, body_crc=0, queue_id=qid, flag=0, queue_offset=offset,
                        commit_log_offset=phys, sys_flag=0, born_timestamp=1, born_host=("127.0.0.1", 1),
                        store_timestamp=2, store_host=("127.0.0.1", 10911), reconsume_times=0,  # port-ok: the host written into records, nothing binds it
                        prepared_transaction_offset=0, body=b"x", topic=topic, properties=dict(props))


def test_a_handle_decodes_with_and_without_its_commit_log_offset() -> None:
    h = decode_handle("5 1700000000000 30000 3 0 broker-a 2 7 4096")
    assert (h.start_offset, h.retrieve_time, h.invisible_time, h.revive_queue_id) == (5, 1700000000000, 30000, 3)
    assert (h.topic_type, h.broker_name, h.queue_id, h.offset, h.commit_log_offset) == ("0", "broker-a", 2, 7, 4096)
    assert h.next_visible_time == 1700000030000
    assert not h.expired(1700000029999) and h.expired(1700000030000)
    assert decode_handle("5 1 2 3 0 b 2 7").commit_log_offset == -1


@pytest.mark.parametrize("bad", ["", "1 2 3", "a 1 2 3 0 b 0 1", "1 2 3 4 9 b 0 1", "1 2 3 4 0  0 1"])
def test_a_malformed_handle_is_refused_with_the_reason(bad: str) -> None:
    with pytest.raises(HandleError):
        decode_handle(bad)


def test_the_real_topic_of_a_retry_handle_is_the_groups_retry_topic() -> None:
    assert decode_handle("1 2 3 4 1 b 0 1").real_topic("T", "G") == "%RETRY%G_T"
    assert decode_handle("1 2 3 4 2 b 0 1").real_topic("T", "G") == "%RETRY%G+T"
    assert decode_handle("1 2 3 4 0 b 0 1").real_topic("T", "G") == "T"
    assert (topic_type("T"), topic_type("%RETRY%G_T"), topic_type("%RETRY%G+T")) == ("0", "1", "2")


def test_popped_messages_get_their_queues_checkpoint_and_their_own_offset() -> None:
    msgs = [msg("T", 1, 10, 1000), msg("T", 1, 12, 1200), msg("%RETRY%G+T", 0, 3, 300)]
    answer = PopAnswer(pop_time=1700000000000, invisible_time=60000, revive_qid=2,
                       start_offset_info="0 1 10;2 0 3", msg_offset_info="0 1 10,12;2 0 3")
    assign_handles(msgs, answer, "broker-a", order=False)
    assert msgs[0].properties["POP_CK"] == "10 1700000000000 60000 2 0 broker-a 1 10 1000"
    assert msgs[1].properties["POP_CK"] == "10 1700000000000 60000 2 0 broker-a 1 12 1200"
    assert msgs[2].properties["POP_CK"] == "3 1700000000000 60000 2 2 broker-a 0 3 300"
    assert msgs[0].properties["1ST_POP_TIME"] == "1700000000000"


def test_without_offset_info_each_message_is_its_own_checkpoint_and_fifo_counts_attempts() -> None:
    msgs = [msg("T", 0, 4, 400)]
    assign_handles(msgs, PopAnswer(5, 6, 999), "b", order=True)
    assert msgs[0].properties["POP_CK"] == "4 5 6 999 0 b 0 4 400"
    assert decode_handle(msgs[0].properties["POP_CK"]).is_order
    fifo = [msg("T", 0, 4, 400)]
    assign_handles(fifo, PopAnswer(5, 6, 999, "0 0 4", "0 0 4", "0 qo0%4 2"), "b", order=True)
    assert fifo[0].reconsume_times == 2


def test_a_handle_the_broker_set_is_kept_and_gets_the_commit_log_offset() -> None:
    msgs = [msg("T", 0, 4, 400, POP_CK="4 5 6 7 0 b 0 4")]
    assign_handles(msgs, PopAnswer(5, 6, 7, "0 0 4", "0 0 4"), "b", order=False)
    assert msgs[0].properties["POP_CK"] == "4 5 6 7 0 b 0 4 400"


def test_recall_handles_round_trip_and_garbage_is_refused() -> None:
    h = build_recall_handle("T", "broker-a", 1700000000123, "MSGID")
    got = decode_recall_handle(h)
    assert (got.topic, got.broker_name, got.timestamp, got.message_id) == ("T", "broker-a", "1700000000123", "MSGID")
    for bad in ("", "!!!", build_recall_handle("T", "b", 1, "x").replace("dj", "dk", 1)):
        with pytest.raises(HandleError):
            decode_recall_handle(bad)
