"""The POP service over a real store and metadata: pop, ack, change invisible time, revive into the retry topic,
the DLQ after retryMaxTimes, FIFO order, and the state a restart rebuilds from the revive log."""

from __future__ import annotations

from pathlib import Path

from brokerd.message import POP_CK, RETRY_TOPIC, decode_records
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.pop.extra_info import parse_extra_info
from brokerd.pop.popping import PopOutcome, PopRequest
from brokerd.remoting.codes import ResponseCode
from tests.unit.pop.conftest import HarnessFactory, PopHarness

G, T = "GroupA", "TopicA"
RETRY = f"%RETRY%{G}_{T}"


def committed(h: PopHarness, group: str, topic: str, qid: int) -> int:
    """The group's consumer offset once the moved commit points are stored (they are at the loop's next turn)."""
    h.svc.core.commit_offsets()
    return h.broker.meta.offsets.query_offset(group, topic, qid)


def pop(h: PopHarness, n: int = 32, invisible: int = 10_000, qid: int = -1, order: bool = False) -> PopOutcome:
    return h.svc.pop(PopRequest(G, T, qid, n, invisible, order))


def msgs(out: PopOutcome) -> list[tuple[str, int, int, bytes, dict[str, str]]]:
    found = decode_records(b"".join(out.buffers))
    return [(m.topic, m.queue_id, m.queue_offset, m.body, m.properties) for m in found]


async def test_pop_ack_and_the_consumer_offset_moves_only_past_acknowledged_messages(harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.send(T, 5)
    h.svc.activate()
    out = pop(h, 3)
    assert [m[3] for m in msgs(out)] == [b"m0", b"m1", b"m2"]
    assert out.info.header(False) == {"startOffsetInfo": "0 0 0", "msgOffsetInfo": "0 0 0,1,2"}
    assert committed(h, G, T, 0) == 0
    q = (G, T, 0)
    assert h.svc.ack(q, 0, out.pop_time, False, [1]).code == ResponseCode.SUCCESS
    assert committed(h, G, T, 0) == 0  # offset 0 still in flight
    assert h.svc.ack(q, 0, out.pop_time, False, [0]).code == ResponseCode.SUCCESS
    assert committed(h, G, T, 0) == 2
    assert h.svc.ack(q, 0, out.pop_time, False, [0]).code == ResponseCode.SUCCESS  # a repeated ack: still OK
    assert [m[3] for m in msgs(pop(h))] == [b"m3", b"m4"]


async def test_stale_handles_are_refused_and_change_nothing_a_late_ack_before_the_revive_applies(
        harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.send(T, 3)
    h.svc.activate()
    out = pop(h, 3, invisible=1000)
    q = (G, T, 0)
    assert h.svc.ack(q, 0, out.pop_time + 1, False, [0]).code == ResponseCode.NO_MESSAGE  # no such checkpoint
    h.now += 1000
    assert h.svc.ack(q, 0, out.pop_time, False, [2]).code == ResponseCode.SUCCESS  # late, but not revived yet
    assert h.svc.reviver.run(h.now)
    res = h.svc.ack(q, 0, out.pop_time, False, [0])  # revived: the handle is stale
    assert res.code == ResponseCode.NO_MESSAGE and "revived" in (res.remark or "")
    again = msgs(pop(h, 3))
    assert [(m[0], m[3]) for m in again] == [(T, b"m0"), (T, b"m1")]  # back from the retry topic, under the topic
    assert all(parse_extra_info(m[4][POP_CK]).mark == "1" for m in again)
    assert committed(h, G, T, 0) == 3  # acknowledged or moved to the retry topic: resolved


async def test_change_invisible_time_answers_a_new_handle_and_kills_the_old(harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.send(T, 1)
    h.svc.activate()
    out = pop(h, 1, invisible=1000)
    q = (G, T, 0)
    h.now += 10
    r = h.svc.renew(q, 0, out.pop_time, False, 0, 60_000)
    assert r.code == ResponseCode.SUCCESS and r.pop_time == h.now and r.invisible == 60_000
    h.now += 5000  # past the old invisible time: nothing comes back
    assert h.svc.reviver.run(h.now) and h.store.max_offset_in_queue(RETRY, 0) == 0
    assert h.svc.ack(q, 0, out.pop_time, False, [0]).code == ResponseCode.NO_MESSAGE  # the old handle
    assert h.svc.ack(q, 0, r.pop_time, False, [0]).code == ResponseCode.SUCCESS  # the new one
    h.now += 120_000
    assert h.svc.reviver.run(h.now) and h.store.max_offset_in_queue(RETRY, 0) == 0


async def test_unacknowledged_messages_go_to_the_dlq_after_retry_max_times(harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.broker.meta.subscriptions.update(SubscriptionGroupConfig(G, retry_max_times=2))
    h.send(T, 1)
    h.svc.activate()
    seen: list[tuple[bytes, int]] = []
    for _ in range(4):
        out = pop(h, 1, invisible=1000)
        found = decode_records(b"".join(out.buffers))
        seen.extend((m.body, m.reconsume_times) for m in found)
        h.now += 1000
        assert h.svc.reviver.run(h.now)
    assert seen == [(b"m0", 0), (b"m0", 1), (b"m0", 2)]  # 3 deliveries, then the DLQ
    dlq = decode_records(b"".join(h.store.get_message(f"%DLQ%{G}", 0, 0, 10).buffers))
    assert [(m.body, m.reconsume_times, m.properties[RETRY_TOPIC]) for m in dlq] == [(b"m0", 3, T)]
    assert h.svc.core.counters.dead_lettered == 1 and not h.svc.state.cks


async def test_fifo_holds_the_queue_until_acked_and_never_redelivers_an_acked_message(harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.send(T, 4)
    h.svc.activate()
    out = pop(h, 2, invisible=1000, order=True)
    assert [m[3] for m in msgs(out)] == [b"m0", b"m1"] and out.revive_qid == 999
    assert pop(h, 2, order=True).found == 0  # blocked while m0/m1 are in flight
    q = (G, T, 0)
    assert h.svc.ack(q, 0, out.pop_time, True, [1]).code == ResponseCode.SUCCESS  # m1 acked, m0 not
    h.now += 1000
    h.svc.reviver.run(h.now)
    again = pop(h, 2, order=True)
    assert [m[3] for m in msgs(again)] == [b"m0", b"m2"]  # m1 is never handed out again
    assert "0 qo0%0 1" in again.info.header(True)["orderCountInfo"]
    assert h.svc.ack(q, 0, again.pop_time, True, [0, 2]).code == ResponseCode.SUCCESS
    assert committed(h, G, T, 0) == 3
    assert [m[3] for m in msgs(pop(h, 2, order=True))] == [b"m3"]


async def test_a_restart_rebuilds_the_same_state_from_the_revive_log(harness: HarnessFactory, tmp_path: Path) -> None:
    h = await harness(tmp_path / "b", pop_revive_snapshot_records=5, pop_revive_snapshot_ops_per_checkpoint=0)
    h.topic(T, 2)
    h.send(T, 10, 0)
    h.send(T, 10, 1, prefix="n")
    h.svc.activate()
    handles: list[tuple[int, int, int, int]] = []
    for i in range(6):
        h.now += i
        out = pop(h, 3, invisible=5000)
        starts = {int(q): int(s) for _, q, s in (x.split() for x in out.info.start)}
        handles.extend((m[1], m[2], out.pop_time, starts[m[1]]) for m in msgs(out))
    assert h.svc.core.counters.snapshots == 1  # after the 5th checkpoint
    for qid, off, pt, start in handles[::2]:
        assert h.svc.ack((G, T, qid), start, pt, False, [off]).code == ResponseCode.SUCCESS
    h.end_turn()  # the acks of the turn: one record, 6 operations (one per checkpoint): a snapshot follows
    assert h.svc.core.counters.snapshots == 2
    h.now += 1
    out = pop(h, 3, invisible=5000)
    starts = {int(q): int(s) for _, q, s in (x.split() for x in out.info.start)}
    for _, qid, off, _, _ in msgs(out)[:2]:
        assert h.svc.ack((G, T, qid), starts[qid], out.pop_time, False, [off]).code == ResponseCode.SUCCESS
    h.end_turn()  # records after the last snapshot: a checkpoint and acks
    live = h.svc.state.snapshot()
    h.svc.deactivate()
    h.svc.activate()  # rebuilt from the last snapshot and the records after it
    assert h.svc.state.snapshot() == live



async def test_a_state_with_many_checkpoints_in_flight_is_snapshotted_less_often(harness: HarnessFactory,
                                                                                 tmp_path: Path) -> None:
    """popReviveSnapshotOpsPerCheckpoint: a snapshot waits for that many operations per checkpoint in flight (its
    cost grows with them), and the state a restart rebuilds is the same either way."""
    h = await harness(tmp_path / "b", pop_revive_snapshot_records=2, pop_revive_snapshot_ops_per_checkpoint=2)
    h.topic(T)
    h.send(T, 6)
    h.svc.activate()
    outs = []
    for _ in range(6):
        h.now += 1
        outs.append(pop(h, 1))  # six checkpoints, six operations: 2 per checkpoint would be 12
    assert h.svc.core.counters.snapshots == 0
    for out in outs[:4]:
        (_, qid, off, _, _), = msgs(out)
        assert h.svc.ack((G, T, qid), off, out.pop_time, False, [off]).code == ResponseCode.SUCCESS
        h.end_turn()
    assert h.svc.core.counters.snapshots == 1  # at the 8th operation: 2 for each of the 4 checkpoints left
    live = h.svc.state.snapshot()
    h.svc.deactivate()
    h.svc.activate()
    assert h.svc.state.snapshot() == live


async def test_a_fifo_message_past_its_last_attempt_goes_to_the_dlq_and_the_queue_moves_on(
        harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.broker.meta.subscriptions.update(SubscriptionGroupConfig(G, retry_max_times=1, consume_message_orderly=True))
    h.send(T, 2)
    h.svc.activate()
    seen = []
    for _ in range(2):  # m0 delivered twice (reconsume 0, then 1), never acked
        out = pop(h, 1, invisible=1000, order=True)
        seen += [(m.body, m.reconsume_times) for m in decode_records(b"".join(out.buffers))]
        h.now += 1000
        h.svc.reviver.run(h.now)
    assert seen == [(b"m0", 0), (b"m0", 0)]  # the count travels in orderCountInfo, not in the stored record
    dlq = decode_records(b"".join(h.store.get_message(f"%DLQ%{G}", 0, 0, 10).buffers))
    assert [m.body for m in dlq] == [b"m0"]
    out = pop(h, 1, order=True)
    assert [m[3] for m in msgs(out)] == [b"m1"] and committed(h, G, T, 0) == 1


async def test_an_admin_reset_moves_where_the_next_pop_reads_and_survives_a_rebuild(harness: HarnessFactory) -> None:
    """RocketMQ's resetPopOffset: the queue's next pop reads from the reset offset; checkpoints in flight stay (their
    acks work, unacknowledged ones come back after their invisible time)."""
    h = await harness()
    h.topic(T)
    h.send(T, 6)
    h.svc.activate()
    first = pop(h, 4, qid=0)
    q = (G, T, 0)
    assert h.svc.ack(q, 0, first.pop_time, False, [0, 1]).code == ResponseCode.SUCCESS
    assert not h.svc.reset((G, T, 5), 0)  # a queue never popped: its consumer offset is where it starts anyway
    assert h.svc.reset(q, 1)
    assert committed(h, G, T, 0) == 1
    h.now += 1
    again = pop(h, 6, qid=0)
    assert [m[3] for m in msgs(again)] == [b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert h.svc.ack(q, 0, first.pop_time, False, [2]).code == ResponseCode.SUCCESS  # the old handle still acks
    h.end_turn()
    live = h.svc.state.snapshot()
    h.svc.deactivate()
    h.svc.activate()
    assert h.svc.state.snapshot() == live


async def test_a_reset_of_a_fifo_queue_drops_its_order_state_and_the_old_handles(harness: HarnessFactory) -> None:
    h = await harness()
    h.topic(T)
    h.send(T, 3)
    h.svc.activate()
    out = pop(h, 2, qid=0, order=True)
    assert pop(h, 2, qid=0, order=True).found == 0  # blocked
    assert h.svc.reset((G, T, 0), 0)
    h.now += 1
    again = pop(h, 3, qid=0, order=True)
    assert [m[3] for m in msgs(again)] == [b"m0", b"m1", b"m2"]
    assert h.svc.ack((G, T, 0), 0, out.pop_time, True, [0]).code == ResponseCode.NO_MESSAGE
