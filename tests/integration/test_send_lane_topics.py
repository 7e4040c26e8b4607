"""The C send lane against the Python send path for sends whose topic the lane does not know yet (it asks the
Python processor's decision once, then stores the send itself) and for sends to retry topics (kept in the retry
topic, or left to Python for the DLQ): same request stream into a broker with and without the lane, same records,
queues, key index, answers and metadata."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from brokerd.broker import Broker
from brokerd.message import decode_record
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import PERM_READ, TopicConfig
from brokerd.native import native
from brokerd.processors.send import V1_FIELDS, V2_FIELDS
from brokerd.remoting import encode
from brokerd.remoting.codec import FrameDecoder
from brokerd.remoting.connection import Connection
from tests.integration.test_send_lane import (
    Transport,
    all_answered,
    answers,
    feed,
    queues,
    records,
    same_generated_ids,
    send,
    start_broker,
)

pytestmark = pytest.mark.skipif(native is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")
__all__ = ["same_generated_ids"]  # the autouse fixture: the Python path's generated UNIQ_KEYs as GENERATED

WARM = send(99999, "LaneA", 0, {"UNIQ_KEY": "WARM"}, b"w")  # an empty store's first send creates its first segment


def with_fields(frame: bytes, version: int | None = None, **fields: str | None) -> bytes:
    """``frame`` with header fields set (by their SEND_MESSAGE_V2 names; None removes one) and its version."""
    cmd = FrameDecoder().feed(frame)[0]
    names = dict(zip(V2_FIELDS, V1_FIELDS if cmd.code == 10 else V2_FIELDS, strict=True))
    ext = dict(cmd.ext)
    for short, value in fields.items():
        if value is None:
            ext.pop(names[short], None)
        else:
            ext[names[short]] = value
    return encode(dataclasses.replace(cmd, ext=ext, version=cmd.version if version is None else version))


async def brokers(tmp_path: Path, **cfg: Any) -> tuple[tuple[Broker, Connection, Transport], ...]:
    """A broker with the lane and one without, both past their first send."""
    pair = tuple([await start_broker(tmp_path / name, lane, **cfg) for name, lane in (("a", True), ("b", False))])
    for _, conn, _ in pair:
        conn.data_received(WARM)
    return pair


def same_metadata(a: Broker, b: Broker) -> None:
    assert dict(a.meta.topics.all()) == dict(b.meta.topics.all())
    assert dict(a.meta.subscriptions.all()) == dict(b.meta.subscriptions.all())


def same_index(a: Broker, b: Broker, topics: tuple[str, ...], keys: list[str]) -> int:
    """The key index finds the same records on both brokers; how many it found."""
    found = 0
    for key in keys:
        for t in topics:
            qa, qb = (sorted(decode_record(buf)[0].commit_log_offset
                             for buf in x.store.query_message(t, key, 8, 0, 2**62).buffers) for x in (a, b))
            assert qa == qb
            found += len(qa)
    return found


def retry_send(rnd: random.Random, i: int, group: str) -> bytes:
    """A send to ``group``'s retry topic as a Java consumer makes one when its send-back failed: RETRY_TOPIC,
    reconsumeTimes, maxReconsumeTimes (or none; ignored before version 121), usually delay level 3 + times. Its
    MAX property says which max applies: the header's, or "group" (the group's retryMaxTimes)."""
    times = rnd.randrange(0, 20)
    version, max_field = rnd.choice([479, 479, 100]), rnd.choice([None, "", "16", "3", str(rnd.randrange(20)), "x1"])
    props = {"RETRY_TOPIC": "LaneA", "ORIGIN_MESSAGE_ID": f"O{i}", "TAGS": "t",
             "MAX": max_field if max_field and version >= 121 else "group",
             **({"DELAY": str(3 + times)} if rnd.random() < 0.8 else {}),
             **({"UNIQ_KEY": f"R{i:031d}"} if rnd.random() < 0.7 else {}),
             **({"KEYS": f"rk{i}"} if rnd.random() < 0.3 else {})}  # fmt: skip
    kind = rnd.random()
    qid = 1 if kind < 0.03 else 0 if kind < 0.5 else -1  # queue 1: no such queue
    frame = send(i, "%RETRY%" + group, qid, props, bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 100))),
                 v1=rnd.random() < 0.2, batch="true" if rnd.random() < 0.03 else "false")  # fmt: skip
    return with_fields(frame, version=version, j=str(times), l=max_field)


def retry_outcomes(stored: list[tuple[Any, ...]]) -> list[tuple[int, str, str, int, int]]:
    """(phase, group, where: retry / dlq, reconsume times, the max that applied) of each stored retry send."""
    out = []
    for r in stored:
        props = r[11]
        if "ORIGIN_MESSAGE_ID" in props:
            topic = props.get("REAL_TOPIC", r[0])
            group, where = topic.split("%")[2], "dlq" if topic.startswith("%DLQ%") else "retry"
            limit = {"g_set": 3 if int(props["ORIGIN_MESSAGE_ID"][1:]) < 2000 else 1}.get(group, 16)
            out.append((int(props["ORIGIN_MESSAGE_ID"][1:]) // 1000, group, where, r[9],
                        limit if props["MAX"] == "group" else int(props["MAX"])))
    return out


async def test_retry_topic_sends_take_the_lane_unless_they_go_to_the_dlq(tmp_path: Path) -> None:
    """Retry-topic sends stay in the retry topic (delayed through the schedule topic) by the lane exactly as by the
    Python path while reconsumeTimes is not over the max (the header's from version 121 on, else the group's);
    the others, and every send of a group holding orderly locks, go to the DLQ through Python. A changed group
    (its retryMaxTimes) and locks taken or released take effect on the next send."""
    rnd = random.Random(41)
    (a, ca, ta), (b, cb, tb) = await brokers(tmp_path)
    for x in (a, b):
        x.meta.subscriptions.update(SubscriptionGroupConfig("g_set", retry_max_times=3))
    groups = ("g_auto", "g_set", "g_lock")

    def phase(start: int, n: int) -> None:
        frames = [retry_send(rnd, i, rnd.choice(groups)) for i in range(start, start + n)]
        feed(ca, frames, start)
        feed(cb, frames, start + 1)

    try:
        phase(1, 120)
        for x in (a, b):  # the orderly consumer of g_lock locks a queue: its sends all go to the DLQ
            x.locks.try_lock("g_lock", "cid-1", [("LaneA", "lane-test", 0)])
        phase(1000, 120)
        for x in (a, b):  # g_set allows 1 retry from now on
            x.meta.subscriptions.update(SubscriptionGroupConfig("g_set", retry_max_times=1))
        phase(2000, 120)
        for x in (a, b):
            x.locks.unlock("g_lock", "cid-1", [("LaneA", "lane-test", 0)])
        phase(3000, 120)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb)
        assert records(a) == records(b) and queues(a) == queues(b)
        same_metadata(a, b)
        remarks = {remark or "" for _, remark, _ in answers(ta).values()}
        assert {"header field 'l' is not a number: 'x1'", "batch request does not support retry group %RETRY%g_set",
                "request queueId[1] is illegal, topic %RETRY%g_lock has 1 write queues"} <= remarks  # fmt: skip
        stored = records(b)
        outcomes = retry_outcomes(stored)
        locked = [o for o in outcomes if o[1] == "g_lock" and o[0] in (1, 2)]
        assert locked and {o[2] for o in locked} == {"dlq"}  # locked: every send to the DLQ
        assert all((where == "dlq") == (times > limit) for phase, g, where, times, limit in outcomes
                   if not (g == "g_lock" and phase in (1, 2)))  # fmt: skip
        retry = [o for o in outcomes if o[2] == "retry"]
        assert len(outcomes) - len(retry) > 50 and len(retry) > 150 and {o[1] for o in retry} == set(groups)
        assert {o[1] for o in outcomes if o[0] == 2 and o[1] == "g_set" and o[2] == "dlq" and o[3] in (2, 3)}
        assert any(r[0] == "SCHEDULE_TOPIC_XXXX" for r in stored) and any(r[0] == "%RETRY%g_auto" for r in stored)
        assert a.send_lane is not None and a.send_lane.handled == len(retry)  # all of them, none of the DLQ's
        assert a.send_lane.fallbacks["retry_topic"] >= len(outcomes) - len(retry) and a.send_lane.fallbacks["batch"]
        topics = ("SCHEDULE_TOPIC_XXXX", *("%RETRY%" + g for g in groups), *("%DLQ%" + g for g in groups))
        assert same_index(a, b, topics, [f"rk{i}" for i in (*range(1, 150), *range(2000, 2150))]) > 50
    finally:
        await a.shutdown()
        await b.shutdown()


SINGLE = ("Single1", "Single2", "%DLQ%gone")  # always created with one queue: a random queue id is that one


def fresh_send(rnd: random.Random, i: int) -> bytes:
    """A send to a topic that may not exist yet: fresh ones (auto-created from TBW102 with the client's queue
    count, or from a default topic that does not exist), bad names, topics sends may not go to, a read-only one."""
    topic = rnd.choice(["Fresh1", "Fresh2", "Fresh3", "Fresh_x-" + "y" * 100, "Zero", *SINGLE, "bad topic",
                        "x" * 130, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102", "ReadOnly",
                        "%RETRY%g_fresh", "NoDefault"])  # fmt: skip
    qnums = 1 if topic in SINGLE or topic.startswith("%RETRY%") else 0 if topic == "Zero" else len(topic) % 3 + 2
    qid = -1 if topic in SINGLE and rnd.random() < 0.5 else rnd.randrange(qnums or 1) if rnd.random() < 0.9 else 9
    props = {**({"UNIQ_KEY": f"F{i:031d}"} if rnd.random() < 0.6 else {}),
             **({"TAGS": rnd.choice(["a", "t\u00e9g"])} if rnd.random() < 0.6 else {}),
             **({"KEYS": f"fk{i} fk{i}-b"} if rnd.random() < 0.4 else {}),
             **({"DELAY": str(rnd.randrange(1, 20))} if rnd.random() < 0.15 else {})}  # fmt: skip
    frame = send(i, topic, qid, props, bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 200))),
                 v1=rnd.random() < 0.3)
    default = "NoSuchDefault" if topic == "NoDefault" else rnd.choice([None, "", "TBW102"])
    bad = rnd.random() < 0.03  # maxReconsumeTimes that is not a number: refused by both paths, whatever the topic
    return with_fields(frame, c=default, d=str(qnums), l="x1" if bad else "16")


@pytest.mark.parametrize("auto_create", [True, False])
async def test_sends_to_topics_the_lane_does_not_know_are_decided_once_by_python(
        tmp_path: Path, auto_create: bool) -> None:  # fmt: skip
    """A topic the lane does not know: the Python processor decides (validation, auto-creation from the default
    topic, perms, the topics sends may not go to) once, for that send, and the lane stores it and the next ones
    itself; a refused one is answered by the Python path."""
    rnd = random.Random(43 + auto_create)
    frames = [fresh_send(rnd, i) for i in range(1, 601)]
    (a, ca, ta), (b, cb, tb) = await brokers(tmp_path, auto_create_topic_enable=auto_create)
    for x in (a, b):
        x.meta.topics.update(TopicConfig("ReadOnly", 4, 4, perm=PERM_READ))
        if not auto_create:
            x.meta.topics.update(TopicConfig("Single1", 1, 1))
            x.meta.topics.update(TopicConfig("Fresh1", 4, 4))
    try:
        feed(ca, frames, 1)
        feed(cb, frames, 2)
        await all_answered(ta, tb)
        ra = answers(ta)
        assert ra == answers(tb) and len(ra) == len(frames) + 1
        assert records(a) == records(b) and queues(a) == queues(b)
        same_metadata(a, b)
        stored, refused = len(records(b)) - 1, sum(1 for c, _, _ in ra.values() if c != 0)
        assert stored > (200 if auto_create else 40) and refused > 100
        assert a.send_lane is not None and a.send_lane.handled == stored  # every stored send but the first
        why = a.send_lane.fallbacks
        assert why["header_fields"] > 0
        assert sum(why[k] for k in ("new_topic", "topic_not_admitted", "queue_not_ready", "retry_topic",
                                    "header_fields")) == refused  # fmt: skip
        topics = ("Fresh1", "Fresh2", "Single1", "%DLQ%gone", "SCHEDULE_TOPIC_XXXX")
        assert same_index(a, b, topics, [f"fk{i}" for i in range(1, 600)] + ["fk7-b", "fk90-b"]) > 20
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_a_failing_decision_leaves_the_send_to_python_and_the_lane_running(tmp_path: Path) -> None:
    """An exception in the Python decision the lane asks for is logged and the send goes through the Python path
    (same answer and record); the lane keeps taking the other topics' sends."""
    frames = [send(i, f"Boom{i % 3}" if i % 2 else f"Calm{i % 3}", i % 4, {"UNIQ_KEY": f"B{i:031d}"}, b"b")
              for i in range(1, 61)]  # fmt: skip
    (a, ca, ta), (b, cb, tb) = await brokers(tmp_path)
    lane = a.send_lane
    assert lane is not None
    real = lane.decide

    def decide(topic: str, *args: Any) -> Any:
        if topic.startswith("Boom") and not a.meta.topics.get(topic):
            raise RuntimeError("injected")
        return real(topic, *args)

    lane.decide = decide
    try:
        with capture_logs() as logs:
            feed(ca, frames, 1)
        feed(cb, frames, 2)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert records(a) == records(b) and queues(a) == queues(b)
        same_metadata(a, b)
        assert [x["topic"] for x in logs if x["event"] == "send_lane_resolve_failed"] == ["Boom1", "Boom0", "Boom2"]
        assert not lane.broken and lane.handled == len(frames) - 3  # the Boom topics' first sends: Python
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_topics_forgotten_during_a_run_keep_the_send_in_progress_valid(tmp_path: Path) -> None:
    """A metadata hook may make the lane forget every topic while the C lane is inside its decision callback (the
    topic table, the one-entry cache, the schedule / half topics cleared mid-read): the sends in progress and after
    it store and answer as the Python path's."""
    rnd = random.Random(47)
    frames = []
    for i in range(1, 801):
        topic = rnd.choice(["LaneA", "LaneB", f"New{i % 40}", f"New{i % 40}"])
        props = {"UNIQ_KEY": f"E{i:031d}", **({"DELAY": "2"} if rnd.random() < 0.2 else {}),
                 **({"TAGS": "x"} if rnd.random() < 0.5 else {})}  # fmt: skip
        frames.append(send(i, topic, rnd.randrange(4), props, bytes([i % 256]) * rnd.randint(0, 64)))
    (a, ca, ta), (b, cb, tb) = await brokers(tmp_path)
    lane = a.send_lane
    assert lane is not None
    real = lane.decide

    def decide(*args: Any) -> Any:
        lane.forget()  # as a metadata hook inside the decision would
        return real(*args)

    lane.decide = decide
    try:
        ca.data_received(b"".join(frames))  # one read: one run of the C lane
        feed(cb, frames, 2)
        await all_answered(ta, tb)
        assert answers(ta) == answers(tb) and {c.code for c in ta.frames} == {0}
        assert records(a) == records(b) and queues(a) == queues(b)
        assert not lane.broken and lane.handled > 600
    finally:
        await a.shutdown()
        await b.shutdown()
