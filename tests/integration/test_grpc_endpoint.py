"""The container's gRPC endpoint (enableGrpcProxy) spoken to with raw MessagingService calls, against a real
container process: routes with the endpoint as every broker's address, sends read back by PullMessage with the
proto's system properties, offsets, a 4.x (remoting) client and gRPC on one topic, /metrics, and bad input
(malformed protobuf, no client id, unknown topic, oversized body, bad receipt handles, unknown transactions) each
answered with the proto's status while the endpoint keeps serving."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from brokerd.proxy import pb
from brokerd.proxy.codes import Code
from tests.support import ClientRun, Cluster, arpc, free_port, rpc

pytestmark = pytest.mark.integration

TOPIC = "GrpcRaw"


class Raw:
    """A bare MessagingService client: metadata as the SDKs send it, messages built from brokerd.proxy.pb."""

    def __init__(self, addr: str, client_id: str = "raw-client@1") -> None:
        self.channel = grpc.aio.insecure_channel(addr)
        self.client_id = client_id

    def metadata(self) -> list[tuple[str, str]]:
        md = [("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2"), ("x-mq-protocol", "GRPC_V2"),
              ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))]
        return md + ([("x-mq-client-id", self.client_id)] if self.client_id else [])

    async def call(self, method: str, req: Any, timeout: float = 10) -> Any:
        fn = self.channel.unary_unary(f"/{pb.SERVICE}/{method}", request_serializer=lambda m: m.SerializeToString(),
                                      response_deserializer=pb.response_class(method).FromString)
        return await fn(req, metadata=self.metadata(), timeout=timeout)

    async def raw(self, method: str, data: bytes) -> Any:
        fn = self.channel.unary_unary(f"/{pb.SERVICE}/{method}", request_serializer=lambda b: b,
                                      response_deserializer=pb.response_class(method).FromString)
        return await fn(data, metadata=self.metadata(), timeout=10)

    async def stream(self, method: str, req: Any, timeout: float = 30) -> list[Any]:
        fn = self.channel.unary_stream(f"/{pb.SERVICE}/{method}", request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=pb.response_class(method).FromString)
        return [r async for r in fn(req, metadata=self.metadata(), timeout=timeout)]

    async def close(self) -> None:
        await self.channel.close()


def message(topic: str, i: int, body: bytes | None = None, **sp: Any) -> Any:
    return pb.Message(topic=pb.Resource(name=topic), body=body if body is not None else f"raw-{i}".encode(),
                      user_properties={"seq": str(i)}, system_properties=pb.SystemProperties(message_id=f"RAWID{time.time_ns()}{i}", tag="TagR",
                                                            keys=[f"key-{i}"], **sp))


class NoAutoCreate(Cluster):
    """Brokers that do not create topics on first send (no TBW102 route): ready once ``TOPIC`` is routable."""

    def _registered(self) -> bool:
        rpc(self.broker_addr(), 17, {"topic": TOPIC, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
        return bool(rpc(self.namesrv, 105, {"topic": TOPIC}).code == 0)


async def pull_all(raw: Raw, topic: str, broker: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` on ``broker`` (PullMessage from offset 0 of each of its queues)."""
    route = await raw.call("QueryRoute", pb.request_class("QueryRoute")(topic=pb.Resource(name=topic)))
    out: list[dict[str, Any]] = []
    for q in sorted({q.id for q in route.message_queues if q.broker.name == broker}):
        mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=q, broker=pb.Broker(name=broker))
        got = await raw.stream("PullMessage", pb.request_class("PullMessage")(
            group=pb.Resource(name="pullAll"), message_queue=mq, offset=0, batch_size=64))
        out += [{"body": r.message.body.decode(), "tag": r.message.system_properties.tag, "q": q,
                 "offset": r.message.system_properties.queue_offset}
                for r in got if r.WhichOneof("content") == "message"]
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    grpc_port = free_port()
    c = NoAutoCreate(tmp_path_factory.mktemp("grpc"), brokers=1,
                container_extra={"enableGrpcProxy": "true", "grpcListenPort": grpc_port, "grpcListenHost": "127.0.0.1"},
                autoCreateTopicEnable="false").start()
    c.grpc = f"127.0.0.1:{grpc_port}"  # type: ignore[attr-defined]
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


@pytest.fixture
async def raw(cluster: Cluster) -> AsyncIterator[Raw]:
    r = Raw(cluster.grpc)  # type: ignore[attr-defined]
    yield r
    await r.close()


async def wait_route(raw: Raw, topic: str) -> Any:
    deadline = time.monotonic() + 15
    while True:
        resp = await raw.call("QueryRoute", pb.request_class("QueryRoute")(topic=pb.Resource(name=topic)))
        if resp.status.code == Code.OK or time.monotonic() > deadline:
            return resp


async def test_query_route_names_the_endpoint_for_every_queue(cluster: Cluster, raw: Raw) -> None:
    port = int(cluster.grpc.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    endpoints = pb.Endpoints(scheme=1, addresses=[pb.Address(host="127.0.0.1", port=port)])
    resp = await raw.call("QueryRoute", pb.request_class("QueryRoute")(topic=pb.Resource(name=TOPIC),
                                                                        endpoints=endpoints))
    assert resp.status.code == Code.OK, resp.status.message
    assert sorted(q.id for q in resp.message_queues) == [0, 1]
    for q in resp.message_queues:
        assert q.broker.name == "broker-a" and q.broker.id == 0 and q.permission == 4  # READ_WRITE
        assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("127.0.0.1", port)]
        assert list(q.accept_message_types) == [1, 2, 3, 4]
    missing = await raw.call("QueryRoute", pb.request_class("QueryRoute")(topic=pb.Resource(name="NoSuchTopic")))
    assert missing.status.code == Code.TOPIC_NOT_FOUND and "NoSuchTopic" in missing.status.message


async def test_sends_are_pulled_back_with_their_system_properties_and_offsets_work(raw: Raw) -> None:
    send = pb.request_class("SendMessage")(messages=[message(TOPIC, 0, message_group="g-1")])
    resp = await raw.call("SendMessage", send)
    assert resp.status.code == Code.OK and len(resp.entries) == 1, resp
    entry = resp.entries[0]
    sent_id = send.messages[0].system_properties.message_id
    assert entry.message_id == sent_id and entry.status.code == Code.OK
    qid = None
    for q in (0, 1):
        mq = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=q, broker=pb.Broker(name="broker-a"))
        pulled = await raw.stream("PullMessage", pb.request_class("PullMessage")(
            group=pb.Resource(name="rawPullGroup"), message_queue=mq, offset=entry.offset, batch_size=8))
        got = [r.message for r in pulled if r.WhichOneof("content") == "message"]
        if got and got[0].system_properties.message_id == sent_id:
            qid = q
            sp = got[0].system_properties
            assert got[0].body == b"raw-0" and sp.tag == "TagR" and list(sp.keys) == ["key-0"]
            assert sp.message_group == "g-1" and sp.message_type == 2 and sp.queue_offset == entry.offset
            assert sp.body_digest.type == 2 and sp.born_host and sp.store_timestamp.seconds > 0
            assert pulled[0].status.code == Code.OK and pulled[-1].next_offset == entry.offset + 1
    assert qid is not None, "the sent message was not pulled from either queue"
    mq = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=qid, broker=pb.Broker(name="broker-a"))
    upd = await raw.call("UpdateOffset", pb.request_class("UpdateOffset")(
        group=pb.Resource(name="rawPullGroup"), message_queue=mq, offset=entry.offset + 1))
    assert upd.status.code == Code.OK, upd.status.message
    got = await raw.call("GetOffset", pb.request_class("GetOffset")(group=pb.Resource(name="rawPullGroup"),
                                                                    message_queue=mq))
    assert (got.status.code, got.offset) == (Code.OK, entry.offset + 1)
    end = await raw.call("QueryOffset", pb.request_class("QueryOffset")(message_queue=mq, query_offset_policy=1))
    begin = await raw.call("QueryOffset", pb.request_class("QueryOffset")(message_queue=mq, query_offset_policy=0))
    assert end.offset >= entry.offset + 1 and begin.offset == 0
    unknown = await raw.call("GetOffset", pb.request_class("GetOffset")(group=pb.Resource(name="neverCommitted"),
                                                                        message_queue=mq))
    # RocketMQ answers a group without a committed offset 0 while the queue still starts at 0, else QUERY_NOT_FOUND
    assert (unknown.status.code, unknown.offset) == (Code.OK, 0) or unknown.status.code == Code.OFFSET_NOT_FOUND


async def test_bad_input_gets_the_protos_status_and_the_endpoint_keeps_serving(cluster: Cluster, raw: Raw) -> None:
    bad = await raw.raw("SendMessage", b"\x0a\xff\xff\xff\xff\x0f garbage")
    assert bad.status.code == Code.BAD_REQUEST and "protobuf" in bad.status.message
    nobody = Raw(cluster.grpc, client_id="")  # type: ignore[attr-defined]
    try:
        anon = await nobody.call("QueryRoute", pb.request_class("QueryRoute")(topic=pb.Resource(name=TOPIC)))
        assert anon.status.code == Code.CLIENT_ID_REQUIRED
    finally:
        await nobody.close()
    big = await raw.call("SendMessage", pb.request_class("SendMessage")(
        messages=[message(TOPIC, 1, body=b"x" * (4 * 1024 * 1024 + 1))]))
    assert big.status.code == Code.MESSAGE_BODY_TOO_LARGE, big.status
    unknown = await raw.call("SendMessage", pb.request_class("SendMessage")(messages=[message("NoSuchTopic", 1)]))
    assert unknown.status.code == Code.TOPIC_NOT_FOUND
    empty = await raw.call("SendMessage", pb.request_class("SendMessage")())
    assert empty.status.code == Code.MESSAGE_CORRUPTED
    ack = pb.request_class("AckMessage")(group=pb.Resource(name="g"), topic=pb.Resource(name=TOPIC), entries=[
        {"message_id": "m1", "receipt_handle": "not a handle"},
        {"message_id": "m2", "receipt_handle": "0 1000 1000 0 0 broker-a 0 0 0"}])
    acked = await raw.call("AckMessage", ack)
    assert [e.status.code for e in acked.entries] == [Code.INVALID_RECEIPT_HANDLE] * 2
    assert "malformed" in acked.entries[0].status.message and "expired" in acked.entries[1].status.message
    change = await raw.call("ChangeInvisibleDuration", pb.request_class("ChangeInvisibleDuration")(
        group=pb.Resource(name="g"), topic=pb.Resource(name=TOPIC), receipt_handle="x", message_id="m",
        invisible_duration=pb.duration(13 * 3600 * 1000)))
    assert change.status.code == Code.ILLEGAL_INVISIBLE_TIME
    end = await raw.call("EndTransaction", pb.request_class("EndTransaction")(
        topic=pb.Resource(name=TOPIC), message_id="m", transaction_id="never-sent", resolution=1))
    assert end.status.code == Code.INVALID_TRANSACTION_ID
    ok = await raw.call("SendMessage", pb.request_class("SendMessage")(messages=[message(TOPIC, 2)]))
    assert ok.status.code == Code.OK


async def test_a_remoting_client_and_grpc_share_one_topic(cluster: Cluster, raw: Raw, tmp_path: Any) -> None:
    topic = "GrpcShared"
    assert (await arpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1"})).code == 0
    await wait_route(raw, topic)
    sent = [await raw.call("SendMessage", pb.request_class("SendMessage")(messages=[message(topic, i)]))
            for i in range(3)]
    assert all(s.status.code == Code.OK for s in sent)
    run = ClientRun("push", cluster.client_env(TOPIC=topic, GROUP="g4x", COUNT=3, TIMEOUT=40), tmp_path / "c4")
    _, rows = await asyncio.to_thread(run.wait, 60)
    bodies = sorted(r["recv"]["body"] for r in rows if "recv" in r)
    assert bodies == ["raw-0", "raw-1", "raw-2"], rows[-3:]
    prun = ClientRun("produce", cluster.client_env(TOPIC=topic, COUNT=2, START_AT=10), tmp_path / "p4")
    _, prows = await asyncio.to_thread(prun.wait, 60)
    assert sum(1 for r in prows if "sent" in r) == 2
    mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=0, broker=pb.Broker(name="broker-a"))
    pulled = await raw.stream("PullMessage", pb.request_class("PullMessage")(
        group=pb.Resource(name="gpull"), message_queue=mq, offset=3, batch_size=8))
    keys = [list(r.message.system_properties.keys) for r in pulled if r.WhichOneof("content") == "message"]
    assert keys == [["key-10"], ["key-11"]]


def metrics_port(cluster: Cluster) -> int:
    for line in (cluster.daemon.output() if cluster.daemon else "").splitlines():
        if "metrics port" in line:
            return int(line.split("metrics port")[1].split(",")[0])
    raise AssertionError("the container did not print its metrics port")


def grpc_requests(cluster: Cluster) -> dict[tuple[str, str], int]:
    """The dashboard's gRPC request counters: (rpc, status code name) -> count."""
    dash = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(cluster)}/api/grpc", timeout=5).read())
    return {(r["rpc"], r["code"]): r["count"] for r in dash["requests"]}


async def test_a_received_message_forwarded_to_the_dead_letter_queue(cluster: Cluster, raw: Raw) -> None:
    topic, group = "GrpcToDlq", "gDlq"
    assert (await arpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1"})).code == 0
    await wait_route(raw, topic)
    sent = await raw.call("SendMessage", pb.request_class("SendMessage")(messages=[message(topic, 7)]))
    assert sent.status.code == Code.OK
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        got = [r.message for r in await raw.stream("ReceiveMessage", pb.request_class("ReceiveMessage")(
            group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression={"type": 1, "expression": "*"}, batch_size=1, invisible_duration=pb.duration(30_000),
            long_polling_timeout=pb.duration(5_000))) if r.WhichOneof("content") == "message"]
    assert got, "the message was not received"
    sp = got[0].system_properties
    fwd = await raw.call("ForwardMessageToDeadLetterQueue", pb.request_class("ForwardMessageToDeadLetterQueue")(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=sp.receipt_handle,
        message_id=sp.message_id, delivery_attempt=1, max_delivery_attempts=16))
    assert fwd.status.code == Code.OK, fwd.status
    await wait_route(raw, f"%DLQ%{group}")
    mq = pb.MessageQueue(topic=pb.Resource(name=f"%DLQ%{group}"), id=0, broker=pb.Broker(name="broker-a"))
    dlq = await raw.stream("PullMessage", pb.request_class("PullMessage")(
        group=pb.Resource(name="dlqReader"), message_queue=mq, offset=0, batch_size=8))
    assert [r.message.body for r in dlq if r.WhichOneof("content") == "message"] == [b"raw-7"]


async def receive_one(raw: Raw, topic: str, group: str, deadline_s: float = 20) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + deadline_s
    while not got and time.monotonic() < deadline:
        got = [r.message for r in await raw.stream("ReceiveMessage", pb.request_class("ReceiveMessage")(
            group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression={"type": 1, "expression": "*"}, batch_size=1, invisible_duration=pb.duration(30_000),
            long_polling_timeout=pb.duration(5_000))) if r.WhichOneof("content") == "message"]
    return got


async def test_a_timer_delivery_shows_only_the_senders_user_properties(cluster: Cluster, raw: Raw) -> None:
    """The timer stores a due message with its own bookkeeping (the delivery bracket's __BATCH, TIMER_* keys):
    a receiver sees the sender's user properties and the proto's system properties, nothing internal."""
    topic, group = "GrpcTimerProps", "gTimerProps"
    assert (await arpc(cluster.broker_addr(), 17, {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1"})).code == 0
    await wait_route(raw, topic)
    due = int(time.time() * 1000) + 1500
    sent = await raw.call("SendMessage", pb.request_class("SendMessage")(
        messages=[message(topic, 9, delivery_timestamp=pb.timestamp(due))]))
    assert sent.status.code == Code.OK, sent.status
    got = await receive_one(raw, topic, group)
    assert got, "the timer message was not delivered"
    assert dict(got[0].user_properties) == {"seq": "9"}
    sp = got[0].system_properties
    assert sp.message_type == 3 and pb.timestamp_ms(sp.delivery_timestamp) == due and sp.tag == "TagR"


async def test_metrics_count_grpc_clients_and_requests(cluster: Cluster, raw: Raw) -> None:
    await raw.call("QueryRoute", pb.request_class("QueryRoute")(topic=pb.Resource(name=TOPIC)))
    await raw.call("SendMessage", pb.request_class("SendMessage")(messages=[message(TOPIC, 3)]))
    port = metrics_port(cluster)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'rocketmq_grpc_requests_total{rpc="QueryRoute",code="OK"}' in text
    assert 'rocketmq_grpc_requests_total{rpc="SendMessage",code="MESSAGE_BODY_TOO_LARGE"}' in text or \
        'rocketmq_grpc_requests_total{rpc="SendMessage",code="OK"}' in text
    assert 'rocketmq_grpc_clients{type="unspecified"}' in text
    dash = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/grpc", timeout=5).read())
    assert dash["enabled"] and raw.client_id in [c["clientId"] for c in dash["clients"]]
    assert {"rpc": "QueryRoute", "code": "OK"} in [{"rpc": r["rpc"], "code": r["code"]} for r in dash["requests"]]
