"""Transactional messages in one broker (real files, a connection fed like a socket): half messages stay invisible
until END_TRANSACTION commits them, rollbacks never appear, and an unfinished one makes the broker ask the
producer group (CHECK_TRANSACTION_STATE) until it answers; progress survives a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import orjson

from brokerd import message as m
from brokerd.broker import Broker
from brokerd.metadata.names import RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC
from brokerd.remoting import RemotingClient, RemotingCommand, encode, request
from brokerd.remoting.connection import Connection
from brokerd.store.message_store import GetMessageStatus
from tests.integration.test_send_lane import Transport, start_broker
from tests.support import until

TOPIC = "LaneA"
GROUP = "PG_txn"


def half(opaque: int, key: str, qid: int = 1) -> bytes:
    props = {"UNIQ_KEY": key, "TRAN_MSG": "true", "PGROUP": GROUP, "TAGS": "t", "KEYS": key}
    cmd = request(310, {"a": GROUP, "b": TOPIC, "c": "TBW102", "d": "4", "e": str(qid), "f": str(m.TRANSACTION_PREPARED_TYPE),
                        "g": str(time.time_ns() // 1_000_000), "h": "0", "i": m.encode_properties(props).decode(), "j": "0", "k": "false"},
                  f"body-{key}".encode())  # fmt: skip
    cmd.opaque = opaque
    return encode(cmd)


def end(resp: RemotingCommand, outcome: int, from_check: bool = False, opaque: int = 0) -> bytes:
    _, _, phys = m.decode_offset_msg_id(resp.ext["msgId"])
    cmd = request(37, {"producerGroup": GROUP, "tranStateTableOffset": resp.ext["queueOffset"],
                       "commitLogOffset": str(phys), "commitOrRollback": str(outcome),
                       "fromTransactionCheck": "true" if from_check else "false", "msgId": resp.ext["msgId"],
                       "transactionId": resp.ext.get("transactionId", "")}, oneway=True)  # fmt: skip
    cmd.opaque = opaque
    return encode(cmd)


def visible(b: Broker) -> list[str]:
    out = []
    for q in range(4):
        r = b.store.get_message(TOPIC, q, 0, 64)
        if r.status == GetMessageStatus.FOUND:
            out += [m.decode_record(buf)[0].properties["UNIQ_KEY"] for buf in r.buffers]
    return sorted(out)


def register_producer(conn: Connection) -> None:
    body = orjson.dumps({"clientID": "txn-client", "producerDataSet": [{"groupName": GROUP}], "consumerDataSet": []})
    hb = request(34, {}, body)
    hb.opaque = 999
    conn.data_received(encode(hb))


def producer_checks(conn: Connection) -> list[RemotingCommand]:
    """Register ``conn`` as the producer group's channel; the list collects what the broker sends it one-way."""
    register_producer(conn)
    sent: list[RemotingCommand] = []
    conn.oneway = lambda cmd: sent.append(cmd)  # type: ignore[method-assign]
    return sent


def new_connection(b: Broker) -> Connection:
    conn = Connection(b.dispatcher)
    conn.connection_made(Transport())  # type: ignore[arg-type]
    return conn


async def test_commit_rollback_and_unknown_resolved_by_the_check(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True, transaction_time_out=200, transaction_check_interval=100)
    try:
        checks = producer_checks(conn)
        conn.data_received(half(1, "K_COMMIT") + half(2, "K_ROLLBACK") + half(3, "K_UNKNOWN"))
        resp = {c.opaque: c for c in tr.frames}
        assert all(resp[i].code == 0 for i in (1, 2, 3))
        assert visible(b) == []  # half messages are invisible to the real topic
        conn.data_received(end(resp[1], m.TRANSACTION_COMMIT_TYPE) + end(resp[2], m.TRANSACTION_ROLLBACK_TYPE)
                           + end(resp[3], 0))  # fmt: skip
        await until(lambda: visible(b) == ["K_COMMIT"], "the commit to be visible")
        # the unknown one: after transactionTimeOut the broker asks the producer group on its connection
        await until(lambda: checks, "a CHECK_TRANSACTION_STATE")
        check = checks[0]
        assert check.code == 39 and check.ext["transactionId"] == "K_UNKNOWN" and check.ext["msgId"] == "K_UNKNOWN"
        ext, _ = m.decode_record(check.body or b"")
        assert ext.topic == TOPIC and ext.properties["UNIQ_KEY"] == "K_UNKNOWN" and ext.body == b"body-K_UNKNOWN"
        # the producer answers commit; the copy the check refers to is the one ended
        answer = RemotingCommand(0, ext={"msgId": check.ext["offsetMsgId"],
                                         "queueOffset": check.ext["tranStateTableOffset"],
                                         "transactionId": "K_UNKNOWN"})  # fmt: skip
        conn.data_received(end(answer, m.TRANSACTION_COMMIT_TYPE, from_check=True))
        await until(lambda: visible(b) == ["K_COMMIT", "K_UNKNOWN"], "the checked commit to be visible")
        committed = b.store.get_message(TOPIC, 1, 0, 64)
        first = m.decode_record(committed.buffers[0])[0]
        assert first.sys_flag & m.TRANSACTION_TYPE_MASK == m.TRANSACTION_COMMIT_TYPE
        assert first.properties.get("TRAN_MSG") == "true" and "REAL_TOPIC" not in first.properties
        # a duplicated END_TRANSACTION does not store the message twice
        conn.data_received(end(resp[1], m.TRANSACTION_COMMIT_TYPE))
        await asyncio.sleep(0.3)  # sleep-ok: give a wrongly accepted duplicate time to land
        assert visible(b) == ["K_COMMIT", "K_UNKNOWN"]
        # nothing is checked again: every half message is ended
        n = len(checks)
        await asyncio.sleep(0.5)  # sleep-ok: a few check periods pass without new checks
        assert len(checks) == n
    finally:
        await b.shutdown()
    b2 = Broker(b.cfg, RemotingClient(), namesrv_addrs=[])
    await b2.start()
    try:  # after a restart the check service resumes from its stored progress: no check for ended ones
        again = producer_checks(new_connection(b2))
        await b2.transactions.check_once()
        assert again == [] and visible(b2) == ["K_COMMIT", "K_UNKNOWN"]
    finally:
        await b2.shutdown()


async def test_a_half_message_never_answered_is_given_up_after_the_check_max(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True, transaction_time_out=1, transaction_check_interval=3_600_000,
                                     transaction_check_max=3)  # fmt: skip
    try:
        asked = producer_checks(conn)
        conn.data_received(half(1, "K_SILENT"))
        await asyncio.sleep(0.01)  # sleep-ok: older than transactionTimeOut (1 ms)
        for _ in range(5):
            await b.transactions.check_once()
        assert len(asked) == 3  # checked transactionCheckMax times, then given up
        r = b.store.get_message(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 0, 0, 8)
        assert r.status == GetMessageStatus.FOUND and len(r.buffers) == 1
        assert visible(b) == []
        assert b.store.max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) == 4  # the original + 3 put-backs
    finally:
        await b.shutdown()


async def test_transaction_messages_can_be_refused_by_config(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True, reject_transaction_message=True)
    try:
        conn.data_received(half(1, "K"))
        assert tr.frames[0].code == 16 and "transaction" in (tr.frames[0].remark or "")
    finally:
        await b.shutdown()


async def test_restart_remembers_ended_transactions_behind_an_unfinished_one(tmp_path: Path) -> None:
    """A (unfinished) then B (committed): the scan cannot pass A yet, so B's op message must survive a restart,
    or B would be asked about (and possibly committed) again."""
    b, conn, tr = await start_broker(tmp_path, True, transaction_time_out=3_600_000,
                                     transaction_check_interval=3_600_000)  # fmt: skip
    try:
        conn.data_received(half(1, "K_A") + half(2, "K_B"))
        resp = {c.opaque: c for c in tr.frames}
        conn.data_received(end(resp[2], m.TRANSACTION_COMMIT_TYPE))
        await until(lambda: visible(b) == ["K_B"], "B committed")
        await b.transactions.check_once()  # A is young: progress stays at A, B's op message is kept
    finally:
        await b.shutdown()
    cfg = dataclasses.replace(b.cfg, transaction_time_out=1)
    b2 = Broker(cfg, RemotingClient(), namesrv_addrs=[])
    await b2.start()
    try:
        asked = producer_checks(new_connection(b2))
        await b2.transactions.check_once()
        assert [c.ext["transactionId"] for c in asked] == ["K_A"]
        assert visible(b2) == ["K_B"]
    finally:
        await b2.shutdown()


async def test_concurrent_duplicate_end_transactions_commit_once(tmp_path: Path) -> None:
    b, conn, tr = await start_broker(tmp_path, True, flush_disk_type="SYNC_FLUSH")
    try:
        conn.data_received(half(1, "K_DUP"))
        await until(lambda: len(tr.frames) == 1, "the half message stored")
        twice = end(tr.frames[0], m.TRANSACTION_COMMIT_TYPE)
        conn.data_received(twice + twice)  # the second arrives while the first waits for its flush
        await until(lambda: visible(b) == ["K_DUP"], "the commit")
        await asyncio.sleep(0.3)  # sleep-ok: give a wrongly accepted duplicate time to land
        assert visible(b) == ["K_DUP"]
    finally:
        await b.shutdown()
