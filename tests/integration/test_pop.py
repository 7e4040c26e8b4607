"""POP consumption against a real container process: pop / ack / batch ack / change invisible time, long polling
woken by a send, NOTIFICATION and POLLING_INFO, retry then DLQ (the copies carry no internal property), FIFO groups
under several consumers, a 4.x pull group next to a POP group, bad input, a container killed in the middle of POP
consumption, and POP clients without heartbeats in consumerConnection / consumerProgress."""

from __future__ import annotations

import asyncio
import collections
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from brokerd.message import POP_CK, MessageExt, decode_records
from brokerd.remoting import RemotingClient, RemotingCommand, request
from brokerd.remoting.codec import decode_payload, encode
from tests.integration.helpers.pop_workload import Seen, consume
from tests.pop_client import ACK, CHANGE, POP, PopClient, send_request
from tests.support import Cluster, arpc

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("pop"), brokers=1, statsSamplingInterval=1000).start()
    yield c
    assert c.stop() == 0


async def make_topic(addr: str, topic: str, queues: int = 1) -> None:
    r = await arpc(addr, 17, {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"})
    assert r.code == 0, r.remark


async def make_group(addr: str, group: str, **cfg: object) -> None:
    assert (await arpc(addr, 200, {}, orjson.dumps({"groupName": group, **cfg}))).code == 0


async def committed_offset(c: PopClient, group: str, topic: str, qid: int, want: int, timeout: float = 5.0) -> int:
    """The group's consumer offset of the queue once it is ``want`` (a POP group's moved commit point is stored
    a moment later), or what it is at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        r = await c.call(request(14, {"consumerGroup": group, "topic": topic, "queueId": str(qid)}))
        got = int(r.ext.get("offset", "-1")) if r.code == 0 else -1
        if got == want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.01)  # sleep-ok: polling a condition with a deadline


async def send_all(c: PopClient, topic: str, n: int, queues: int = 1, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(n)]
    for i, b in enumerate(bodies):
        assert (await c.send(topic, b, qid=i % queues)).code == 0
    return bodies


async def test_pop_ack_batch_ack_and_change_invisible_time(cluster: Cluster) -> None:
    addr, topic = cluster.broker_addr(), "T_pop_basic"
    await make_topic(addr, topic, 2)
    c = PopClient(addr, "G_pop_basic")
    try:
        await send_all(c, topic, 6, 2)
        got = await c.pop(topic, 6, invisible=20_000)
        assert got.code == 0 and sorted(m.body for m in got.msgs) == [f"m{i}".encode() for i in range(6)]
        assert got.header["reviveQid"] == "0" and int(got.header["popTime"]) > 0
        first, rest = got.msgs[0], got.msgs[1:]
        assert (await c.ack(first, topic)).code == 0
        assert (await c.ack(first, topic)).code == 0  # repeated: still acknowledged
        moved = rest[0]
        assert (await c.change(moved, topic, 1000)).code == 0
        assert (await c.batch_ack(rest[1:], topic)).code == 0
        again = await c.pop(topic, 6, poll_ms=5000, invisible=20_000)  # `moved` comes back after 1 s
        assert [m.body for m in again.msgs] == [moved.body] and again.msgs[0].reconsume_times == 1
        assert (await c.ack(again.msgs[0], topic)).code == 0
        empty = await c.pop(topic, 6, poll_ms=300)
        assert empty.code == 210 and not empty.msgs  # POLLING_TIMEOUT
    finally:
        await c.close()


async def test_long_poll_is_woken_by_a_send_and_notification_and_polling_info(cluster: Cluster) -> None:
    addr, topic = cluster.broker_addr(), "T_pop_lp"
    await make_topic(addr, topic, 4)
    c, producer = PopClient(addr, "G_pop_lp"), PopClient(addr, "P")
    try:
        assert (await c.pop(topic, 1, poll_ms=0)).code == 210
        waiting = asyncio.ensure_future(c.pop(topic, 4, poll_ms=20_000))
        info = None
        for _ in range(200):  # the request is parked on all queues
            info = await c.polling_info(topic, -1)
            if info.ext.get("pollingNum") == "1":
                break
            await asyncio.sleep(0.01)  # sleep-ok: polling a condition with a bound
        assert info is not None and info.ext["pollingNum"] == "1"
        t0 = time.monotonic()
        assert (await producer.send(topic, b"wake", qid=2)).code == 0
        got = await asyncio.wait_for(waiting, 10)
        assert got.code == 0 and [m.body for m in got.msgs] == [b"wake"]
        assert time.monotonic() - t0 < 2.0  # woken by the arrival, not by the 20 s deadline
        assert (await c.ack(got.msgs[0], topic)).code == 0
        n = await c.notification(topic, -1, 0)
        assert n.code == 0 and n.ext["hasMsg"] == "false"
        parked = asyncio.ensure_future(c.notification(topic, -1, 20_000))
        await asyncio.sleep(0.2)  # sleep-ok: let the notification park; it is woken by the send below
        assert (await producer.send(topic, b"n", qid=1)).code == 0
        n = await asyncio.wait_for(parked, 10)
        assert n.ext["hasMsg"] == "true"
    finally:
        await c.close()
        await producer.close()


async def test_retry_then_dlq_after_max_attempts(cluster: Cluster) -> None:
    addr, topic, group = cluster.broker_addr(), "T_pop_dlq", "G_pop_dlq"
    await make_topic(addr, topic)
    await make_group(addr, group, retryMaxTimes=2)
    c = PopClient(addr, group)
    try:
        await send_all(c, topic, 1)
        deliveries: list[tuple[bytes, int, str]] = []
        deadline = time.monotonic() + 30
        while len(deliveries) < 3 and time.monotonic() < deadline:
            got = await c.pop(topic, 1, invisible=500, poll_ms=3000)
            deliveries += [(m.body, m.reconsume_times, m.topic) for m in got.msgs]
        assert deliveries == [(b"m0", 0, topic), (b"m0", 1, topic), (b"m0", 2, topic)]
        dlq = f"%DLQ%{group}"
        body = b""
        for _ in range(100):
            r = await c.call(request(11, {"consumerGroup": "g_read_dlq", "topic": dlq, "queueId": "0",
                                          "queueOffset": "0", "maxMsgNums": "8", "sysFlag": "4", "commitOffset": "0",
                                          "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}))
            if r.code == 0:
                body = r.body or b""
                break
            await asyncio.sleep(0.05)  # sleep-ok: waiting for the revive with a bound
        dead = decode_records(body)
        assert [(m.body, m.reconsume_times) for m in dead] == [(b"m0", 3)]
        popped = await PopClient(addr, "g_pop_dlq", client=c.client).pop(dlq, 8, invisible=60_000)
        viewed = await c.call(request(33, {"offset": str(dead[0].commit_log_offset)}))
        assert viewed.code == 0, viewed.remark
        copies = [dead[0], *popped.msgs, *decode_records(viewed.body or b"")]
        assert len(copies) == 3 and all(m.body == b"m0" and "__BATCH" not in m.properties for m in copies)
        assert (await c.pop(topic, 1, invisible=500, poll_ms=1500)).code == 210  # never delivered again
    finally:
        await c.close()


async def test_fifo_keeps_order_per_queue_under_several_consumers(cluster: Cluster) -> None:
    addr, topic, group = cluster.broker_addr(), "T_pop_fifo", "G_pop_fifo"
    await make_topic(addr, topic, 4)
    await make_group(addr, group, consumeMessageOrderly=True)
    producer = PopClient(addr, "P")
    per_group = 12
    for i in range(per_group):  # 8 message groups, each always on the same queue (a FIFO producer's selector)
        for g in range(8):
            assert (await producer.send(topic, f"g{g}-{i}".encode(), qid=g % 4)).code == 0
    await producer.close()
    seen: dict[str, list[int]] = collections.defaultdict(list)
    acked: set[bytes] = set()
    redelivered_acked: list[bytes] = []
    rng = random.Random(7)

    async def consumer(k: int) -> None:
        c = PopClient(addr, group)
        try:
            idle = 0
            while len(acked) < 8 * per_group and idle < 40:
                got = await c.pop(topic, 3, invisible=800, poll_ms=500, order=True)
                if not got.msgs:
                    idle += 1
                    continue
                idle = 0
                for m in got.msgs:
                    if m.body in acked:
                        redelivered_acked.append(m.body)
                    name, i = m.body.decode().split("-")
                    seen[name].append(int(i))
                    if rng.random() < 0.15:  # this consumer "fails": no ack, the group waits, then it comes again
                        break
                    assert (await c.ack(m, topic)).code == 0
                    acked.add(m.body)
        finally:
            await c.close()

    await asyncio.wait_for(asyncio.gather(*(consumer(k) for k in range(4))), 120)
    assert not redelivered_acked
    assert len(acked) == 8 * per_group
    for name, order in seen.items():  # per message group: in order, a message only repeated right after itself
        firsts = [i for k, i in enumerate(order) if k == 0 or order[k - 1] != i]
        assert firsts == list(range(per_group)), (name, order)


async def test_a_pull_group_and_a_pop_group_read_one_topic_independently(cluster: Cluster) -> None:
    addr, topic = cluster.broker_addr(), "T_pop_mixed"
    await make_topic(addr, topic)
    pop_c = PopClient(addr, "G_mixed_pop")
    try:
        await send_all(pop_c, topic, 10)
        got = await pop_c.pop(topic, 10, invisible=30_000)
        assert len(got.msgs) == 10
        await pop_c.batch_ack(got.msgs[:5], topic)
        r = await pop_c.call(request(11, {"consumerGroup": "G_mixed_pull", "topic": topic, "queueId": "0",
                                          "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "5", "commitOffset": "0",
                                          "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}))
        assert r.code == 0 and len(decode_records(r.body or b"")) == 10  # the pull group sees everything
        offset = await committed_offset(pop_c, "G_mixed_pop", topic, 0, want=5)
        assert offset == 5  # the POP group's offset: past the acknowledged messages only
    finally:
        await pop_c.close()


async def test_bad_input_gets_clear_codes_and_the_connection_keeps_serving(cluster: Cluster) -> None:
    addr, topic, group = cluster.broker_addr(), "T_pop_bad", "G_pop_bad"
    await make_topic(addr, topic)
    cli = RemotingClient()
    c = PopClient(addr, group, client=cli)
    try:
        await send_all(c, topic, 1)
        got = await c.pop(topic, 1, invisible=30_000)
        m = got.msgs[0]
        ck = m.properties[POP_CK]
        base = {"consumerGroup": group, "topic": topic, "queueId": "0", "offset": str(m.queue_offset)}
        assert (await c.call(request(ACK, {**base, "extraInfo": "garbage"}))).code == 1  # malformed handle
        assert (await c.call(request(ACK, {**base, "extraInfo": "1 2 x 0 0 broker-a 0 0"}))).code == 1
        stale = ck.split(" ")
        stale[1] = str(int(stale[1]) - 7)  # another pop time: no such checkpoint
        r = await c.call(request(ACK, {**base, "extraInfo": " ".join(stale)}))
        assert r.code == 208 and "checkpoint" in (r.remark or "")
        assert (await c.call(request(ACK, {**base, "topic": "T_no_such_topic", "extraInfo": ck}))).code == 17
        assert (await c.call(request(ACK, {**base, "queueId": "9", "extraInfo": ck}))).code == 13
        assert (await c.call(request(ACK, {**base, "offset": "99", "extraInfo": ck}))).code == 208
        pop_ext = {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "1", "pollTime": "0",
                   "bornTime": str(int(time.time() * 1000)), "initMode": "0"}
        assert (await c.call(request(POP, {**pop_ext, "invisibleTime": "0"}))).code == 29
        assert (await c.call(request(POP, {**pop_ext, "invisibleTime": str(13 * 3600_000)}))).code == 29
        assert (await c.call(request(POP, {**pop_ext, "invisibleTime": "1000", "maxMsgNums": "33"}))).code == 29
        assert (await c.call(request(POP, {**pop_ext, "invisibleTime": "1000", "topic": "T_nope"}))).code == 17
        assert (await c.call(request(POP, {**pop_ext, "invisibleTime": "1000", "queueId": "5"}))).code == 29
        assert (await c.call(request(POP, {k: v for k, v in pop_ext.items() if k != "topic"}))).code == 29
        change = {**base, "extraInfo": ck, "invisibleTime": "-5"}
        assert (await c.call(request(CHANGE, change))).code == 29
        assert (await c.call(request(200151, {}, b"{not json"))).code == 1
        assert (await c.call(request(200151, {}, orjson.dumps({"acks": [{"c": group}]})))).code == 1
        assert (await c.call(request(200151, {}, orjson.dumps({"acks": []})))).code == 208
        # nothing changed: the handle still acknowledges, on the same connection
        assert (await c.ack(m, topic)).code == 0
        assert (await c.call(send_request(topic, b"after"))).code == 0
    finally:
        await cli.close()


async def test_a_oneway_pop_is_never_answered(cluster: Cluster) -> None:
    """A POP sent oneway pops (its messages come back after the invisible time) but writes no answer: the next
    frame the connection gets is the answer to the request after it."""
    addr, topic, group = cluster.broker_addr(), "T_pop_oneway", "G_pop_oneway"
    await make_topic(addr, topic)
    c = PopClient(addr, group)
    try:
        await send_all(c, topic, 1)
    finally:
        await c.close()
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        pop = request(POP, {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "1",
                            "invisibleTime": "1000", "pollTime": "0", "bornTime": str(int(time.time() * 1000)),
                            "initMode": "0"}, oneway=True)  # fmt: skip
        pop.opaque = 7001
        after = request(14, {"consumerGroup": group, "topic": topic, "queueId": "0"})
        after.opaque = 7002
        writer.write(encode(pop) + encode(after))
        got = [await next_frame(reader)]
        after.opaque = 7003  # sent once 7002 is answered: a pop answer would have been written before it
        writer.write(encode(after))
        got.append(await next_frame(reader))
        assert [f.opaque for f in got] == [7002, 7003], [(f.opaque, f.code) for f in got]
    finally:
        writer.close()


async def next_frame(reader: asyncio.StreamReader) -> RemotingCommand:
    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
    return decode_payload(await asyncio.wait_for(reader.readexactly(size), 10))


def test_unknown_group_is_refused_without_auto_create(tmp_path: Path) -> None:
    c = Cluster(tmp_path, brokers=1, autoCreateSubscriptionGroup="false").start()

    async def body() -> None:
        addr = c.broker_addr()
        await make_topic(addr, "T_pop_nogroup")
        p = PopClient(addr, "G_never_created")
        got = await p.pop("T_pop_nogroup", 1, invisible=1000)
        assert got.code == 26 and "does not exist" in (got.remark or "")
        await p.close()

    try:
        asyncio.run(body())
    finally:
        assert c.stop() == 0


def test_kill_and_restart_in_the_middle_of_pop_consumption(tmp_path: Path) -> None:
    """SIGKILL the container while consumers pop and ack; restart it: every message is delivered, none whose ack
    was answered SUCCESS comes again (the state is rebuilt from the revive log)."""
    c = Cluster(tmp_path, brokers=1).start()
    topic, group, n = "T_pop_restart", "G_pop_restart", 300
    bodies = [f"r-{i}".encode() for i in range(n)]
    seen = Seen()

    async def run() -> None:
        addr = c.broker_addr()
        await make_topic(addr, topic, 4)
        p = PopClient(addr, "P")
        for i, b in enumerate(bodies):
            assert (await p.send(topic, b, qid=i % 4)).code == 0
        await p.close()
        stop = asyncio.Event()

        async def where() -> str | None:
            return addr

        async def finished(a: str) -> bool:
            for q in range(4):
                r = await arpc(a, 14, {"consumerGroup": group, "topic": topic, "queueId": str(q)})
                if r.code != 0 or int(r.ext["offset"]) != n // 4:
                    return False
            return True

        workers = [asyncio.ensure_future(consume(where, group, topic, set(bodies), seen, stop, seed=k, batch=k == 1,
                                                 finished=finished)) for k in range(3)]
        deadline = time.monotonic() + 30
        while len(seen.acked_ok) < n // 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # sleep-ok: waiting for progress with a bound
        assert c.daemon is not None
        await asyncio.to_thread(c.daemon.kill)
        await asyncio.to_thread(c.start)
        try:
            await asyncio.wait_for(asyncio.gather(*workers), 90)
        finally:
            stop.set()

    try:
        asyncio.run(run())
        assert not seen.missing(bodies)
        assert not seen.acked_then_delivered(), seen.acked_then_delivered()[:5]
        assert seen.errors > 0  # the kill was seen by the consumers
    finally:
        assert c.stop() == 0


async def test_metrics_and_dashboard_show_pop_groups(cluster: Cluster) -> None:
    from tests.integration.test_dashboard import api, get, metrics_port, parse_metrics

    addr, topic, group = cluster.broker_addr(), "T_pop_metrics", "G_pop_metrics"
    await make_topic(addr, topic)
    c = PopClient(addr, group)
    try:
        await send_all(c, topic, 5)
        got = await c.pop(topic, 5, invisible=60_000)
        assert (await c.ack(got.msgs[0], topic)).code == 0
        base = f"http://127.0.0.1:{await asyncio.to_thread(metrics_port, cluster)}"
        metrics = parse_metrics((await asyncio.to_thread(get, base + "/metrics"))[2].decode())
        overview = await asyncio.to_thread(api, base, "/api/overview")
    finally:
        await c.close()
    [broker] = overview["brokers"]
    ident = broker["identity"]
    row = next(g for g in broker["pop"]["groups"] if g["group"] == group)
    assert row["inflight"] == 4 and row["reviveBacklog"] == 0
    assert broker["pop"]["active"] and broker["pop"]["popped"] >= 5
    assert metrics[("rocketmq_pop_group_inflight", (("broker", ident), ("group", group)))] == 4
    assert metrics[("rocketmq_pop_acks_total", (("broker", ident),))] >= 1


async def test_set_consume_mode_and_query_assignment(cluster: Cluster) -> None:
    from tests.integration.helpers.mqadmin import MQAdmin

    addr, topic, group = cluster.broker_addr(), "T_pop_mode", "G_pop_mode"
    await make_topic(addr, topic, 4)
    admin = MQAdmin(cluster.namesrv)
    out = await asyncio.to_thread(admin.ok, "setConsumeMode", "-c", "DefaultCluster", "-t", topic, "-g", group,
                                  "-m", "POP", "-q", "0")
    assert out == f"set consume mode to {addr} success.\ntopic[{topic}] group[{group}] consume mode[POP] popShareQueueNum[0]"
    await asyncio.to_thread(admin.fails, "setConsumeMode", "-b", addr, "-t", topic, "-g", group, "-m", "PUSH",
                            needle="PULL or POP")
    modes = orjson.loads((await arpc(addr, 402)).body)
    assert modes == {"messageRequestModeMap": {topic: {group: {"topic": topic, "consumerGroup": group, "mode": "POP",
                                                               "popShareQueueNum": 0}}}}
    # a registered client gets every queue of the broker, as queue -1, in POP mode
    hb = {"clientID": "cid-1", "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                                     "messageModel": "CLUSTERING", "subscriptionDataSet": [
                                                         {"topic": topic, "subString": "*"}]}], "producerDataSet": []}
    cli = RemotingClient()
    try:
        assert (await cli.invoke(addr, request(34, {}, orjson.dumps(hb)), 5)).code == 0
        body = {"topic": topic, "consumerGroup": group, "clientId": "cid-1", "strategyName": "AVG",
                "messageModel": "CLUSTERING"}
        r = await cli.invoke(addr, request(400, {}, orjson.dumps(body)), 5)
        assignments = orjson.loads(r.body or b'{}')["messageQueueAssignments"]
        assert assignments == [{"messageQueue": {"topic": topic, "brokerName": "broker-a", "queueId": -1},
                                "mode": "POP"}]
        pull = await cli.invoke(addr, request(400, {}, orjson.dumps({**body, "topic": "%RETRY%" + group})), 5)
        assert {a["mode"] for a in orjson.loads(pull.body or b'{}')["messageQueueAssignments"]} == {"PULL"}  # retry: pulled
        none = await cli.invoke(addr, request(400, {}, orjson.dumps({**body, "topic": "T_no_route"})), 5)
        assert "messageQueueAssignments" not in orjson.loads(none.body or b'{}')  # no route: no answer (the client skips)
        bad = await cli.invoke(addr, request(401, {}, orjson.dumps({"topic": "%RETRY%x", "consumerGroup": group})), 5)
        assert bad.code == 16
        bad = await cli.invoke(addr, request(401, {}, orjson.dumps({"topic": "T_none", "consumerGroup": group})), 5)
        assert bad.code == 17
    finally:
        await cli.close()


async def test_pop_consumers_without_heartbeats_show_in_consumer_connection_and_progress(cluster: Cluster) -> None:
    """RocketMQ's consumer compensation: a POP client that never heartbeats is the group's consumer for
    consumerConnection (CONSUME_POP, its subscription and its retry topic's) and consumerProgress (offsets and the
    TPS of its gets, counted like pulls), until it disconnects."""
    from brokerd.namesrv import lenient_json
    from tests.integration.helpers.mqadmin import MQAdmin

    addr, topic, group = cluster.broker_addr(), "T_pop_seen", "G_pop_seen"
    await make_topic(addr, topic, 2)
    admin = MQAdmin(cluster.namesrv)
    c = PopClient(addr, group)
    try:
        await send_all(c, topic, 20, 2)
        got: list[MessageExt] = []
        while len(got) < 20:
            got += (await c.pop(topic, 32, exp="TagA || TagB", invisible=60_000, poll_ms=1000)).msgs
        assert (await c.batch_ack(got, topic)).code == 0
        out = await asyncio.to_thread(admin.ok, "consumerConnection", "-g", group, "-b", addr)
        assert "ConsumeType: CONSUME_POP" in out and "MessageModel: CLUSTERING" in out, out
        assert re.search(rf"^{topic}\s+TagA \|\| TagB$", out, re.M) and f"%RETRY%{group}_{topic}" in out, out
        assert re.search(r"^127\.0\.0\.1:\d+\s+127\.0\.0\.1:\d+\s+JAVA", out, re.M), out
        deadline = time.monotonic() + 15
        tps = 0.0
        while tps <= 0 and time.monotonic() < deadline:  # the gets show in the next statistics sample (1 s here)
            r = await arpc(addr, 208, {"consumerGroup": group, "topic": topic})
            tps = float(lenient_json.loads(r.body)["consumeTps"]) if r.code == 0 else 0.0
            await asyncio.sleep(0.2)  # sleep-ok: polling a condition with a deadline
        assert tps > 0
        progress = await asyncio.to_thread(admin.ok, "consumerProgress", "-g", group, "-t", topic)
        assert re.search(r"Consume TPS: (?!0\.00)", progress) and "Diff Total: 0" in progress, progress
    finally:
        await c.close()
    await asyncio.to_thread(admin.fails, "consumerConnection", "-g", group, "-b", addr, needle="not online")
