"""The consumer RPCs against in-process fake brokers speaking remoting (no sockets, no grpc): a POP answer becomes
the proto's messages with receipt handles; TAG filtering acks what does not match; a message past its max
attempts goes to the DLQ; the brokers' codes become the proto's (unknown group, polling full, stale handle); a
batch of acks is one BATCH_ACK_MESSAGE per broker with RocketMQ's bitset; a change of invisible time answers
the new handle."""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson

from brokerd import message as m
from brokerd.proxy import pb
from brokerd.proxy.codes import Code
from brokerd.proxy.config import GrpcProxyConfig
from brokerd.proxy.consumer import ConsumerActivity
from brokerd.proxy.core import Caller, ProxyCore
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Dispatcher
from tests.support import until

ROUTE = (b'{"queueDatas":[{"brokerName":"broker-a","readQueueNums":2,"writeQueueNums":2,"perm":6}],'
         b'"brokerDatas":[{"cluster":"C","brokerName":"broker-a","brokerAddrs":{0:"10.0.0.1:10911"}}]}')


def record(i: int, tag: str, reconsume: int = 0) -> bytes:
    inner = m.MessageInner(topic="T", queue_id=1, body=f"b{i}".encode(), flag=0,
                           properties={"UNIQ_KEY": f"U{i}", "TAGS": tag}, sys_flag=0, born_timestamp=1,
                           born_host=("1.2.3.4", 5), store_host=("10.0.0.1", 10911), reconsume_times=reconsume)
    return m.encode_record(inner, queue_offset=10 + i, phys_offset=1000 * i, store_timestamp=2)


class FakeBroker:
    def __init__(self) -> None:
        self.pop_answer: RemotingCommand | None = None
        self.seen: list[RemotingCommand] = []
        self.namesrv = Dispatcher("ns")
        self.namesrv.register(105, lambda c, cmd: cmd.response(body=ROUTE))
        self.broker = Dispatcher("broker-a")
        self.broker.register(351, lambda c, cmd: cmd.response(17, "no topic config"))
        for code in (200050, 200051, 200151, 200053, 36):
            self.broker.register(code, self.answer)

    def answer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.seen.append(cmd)
        if cmd.code == 200050:
            assert self.pop_answer is not None
            resp = self.pop_answer
            resp.opaque = cmd.opaque
            return resp
        if cmd.code == 200053:
            return cmd.response(ext={"popTime": "5000", "invisibleTime": "7000", "reviveQid": "3"})
        if cmd.code == 200051 and cmd.ext.get("extraInfo", "").startswith("99 "):
            return cmd.response(208, "no such checkpoint")
        return cmd.response()

    def local_dispatcher(self, addr: str) -> Dispatcher | None:
        return {"ns:9876": self.namesrv, "10.0.0.1:10911": self.broker}.get(addr)


def setup() -> tuple[FakeBroker, ConsumerActivity, Any]:
    fake = FakeBroker()
    core = ProxyCore(GrpcProxyConfig(), fake, lambda: ["ns:9876"])
    session = core.session(Caller("client-1", "JAVA", "5.0.8", ("127.0.0.1", 1), None))
    return fake, ConsumerActivity(core), session


def receive_request(expr: str = "*") -> Any:
    return pb.request_class("ReceiveMessage")(
        group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="T")),
        filter_expression={"type": 1, "expression": expr}, batch_size=16, invisible_duration=pb.duration(30_000),
        long_polling_timeout=pb.duration(5_000))


async def receive(activity: ConsumerActivity, session: Any, req: Any) -> list[Any]:
    return [r async for r in activity.receive_message(session, req, 30_000)]


async def test_a_pop_answer_becomes_messages_with_handles_filtered_and_dead_lettered() -> None:
    fake, activity, s = setup()
    now = int(time.time() * 1000)
    fake.pop_answer = RemotingCommand(code=0, flag=1, body=record(0, "a") + record(1, "b") + record(2, "a", 20),
                                      ext={"popTime": str(now), "invisibleTime": "30000", "reviveQid": "2",
                                           "startOffsetInfo": "0 1 10", "msgOffsetInfo": "0 1 10,11,12"})
    out = await receive(activity, s, receive_request("a"))
    assert out[0].status.code == Code.OK and out[-1].WhichOneof("content") == "delivery_timestamp"
    msgs = [r.message for r in out if r.WhichOneof("content") == "message"]
    assert [x.system_properties.message_id for x in msgs] == ["U0"]
    assert msgs[0].system_properties.receipt_handle == f"10 {now} 30000 2 0 broker-a 1 10 0"
    pop = fake.seen[0]
    assert (pop.ext["consumerGroup"], pop.ext["topic"], pop.ext["queueId"], pop.ext["exp"]) == ("G", "T", "-1", "a")
    # the background ack (tag b does not match) and the DLQ send (reconsumed 20 times), then its ack
    await until(lambda: [c.code for c in fake.seen].count(200051) == 2, "the background ack and DLQ send", 5)
    codes = [c.code for c in fake.seen[1:]]
    assert codes.count(200051) == 2 and codes.count(36) == 1  # U1 acked (no match), U2 sent back then acked
    dlq = next(c for c in fake.seen if c.code == 36)
    assert (dlq.ext["delayLevel"], dlq.ext["offset"], dlq.ext["originMsgId"]) == ("-1", "2000", "U2")


async def test_broker_codes_become_the_protos() -> None:
    fake, activity, s = setup()
    fake.pop_answer = RemotingCommand(code=26, flag=1, remark="subscription group [G] does not exist")
    out = await receive(activity, s, receive_request())
    assert out[0].status.code == Code.CONSUMER_GROUP_NOT_FOUND and "does not exist" in out[0].status.message
    fake.pop_answer = RemotingCommand(code=209, flag=1)
    assert (await receive(activity, s, receive_request()))[0].status.code == Code.TOO_MANY_REQUESTS
    fake.pop_answer = RemotingCommand(code=210, flag=1)
    assert (await receive(activity, s, receive_request()))[0].status.code == Code.MESSAGE_NOT_FOUND
    bad = pb.request_class("ReceiveMessage")(group=pb.Resource(name="G"),
                                             message_queue=pb.MessageQueue(topic=pb.Resource(name="T")),
                                             invisible_duration=pb.duration(1000))
    assert (await receive(activity, s, bad))[0].status.code == Code.ILLEGAL_INVISIBLE_TIME


async def test_acks_go_in_one_batch_per_broker_and_stale_handles_are_refused() -> None:
    fake, activity, s = setup()
    now = int(time.time() * 1000)
    handles = [f"10 {now} 30000 2 0 broker-a 1 {o} {o * 100}" for o in (10, 12, 13)]
    req = pb.request_class("AckMessage")(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
        {"message_id": f"U{i}", "receipt_handle": h} for i, h in enumerate(handles)])
    resp = await activity.ack_message(s, req)
    assert resp.status.code == Code.OK and [e.status.code for e in resp.entries] == [Code.OK] * 3
    batch = orjson.loads(next(c for c in fake.seen if c.code == 200151).body or b"{}")["acks"]
    assert len(batch) == 1 and (batch[0]["so"], batch[0]["q"], batch[0]["pt"]) == (10, 1, now)
    assert base64.b64decode(batch[0]["b"]) == bytes([0b1101])  # offsets 10, 12, 13 from 10
    single = pb.request_class("AckMessage")(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
        {"message_id": "U9", "receipt_handle": f"99 {now} 30000 2 0 broker-a 1 99 9900"}])
    stale = await activity.ack_message(s, single)
    assert stale.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE


async def test_a_changed_invisible_time_answers_the_new_handle() -> None:
    fake, activity, s = setup()
    now = int(time.time() * 1000)
    req = pb.request_class("ChangeInvisibleDuration")(
        group=pb.Resource(name="G"), topic=pb.Resource(name="T"), message_id="U1",
        receipt_handle=f"10 {now} 30000 2 1 broker-a 1 12 1200", invisible_duration=pb.duration(0))
    resp = await activity.change_invisible_duration(s, req)
    assert resp.status.code == Code.OK and resp.receipt_handle == "12 5000 7000 3 1 broker-a 1 12 1200"
    change = next(c for c in fake.seen if c.code == 200053)
    assert (change.ext["topic"], change.ext["invisibleTime"]) == ("%RETRY%G_T", "1")  # the proto's 0: visible now


async def test_messages_a_client_did_not_take_are_made_visible_again_soon() -> None:
    """ReceiveMessageResponseStreamWriter's NACK: the stream stops after the first message (the client went
    away); the others get CHANGE_MESSAGE_INVISIBLETIME of NACK_INVISIBLE_MS, the taken one does not."""
    fake, activity, s = setup()
    now = int(time.time() * 1000)
    fake.pop_answer = RemotingCommand(code=0, flag=1, body=record(0, "a") + record(1, "a") + record(2, "a"),
                                      ext={"popTime": str(now), "invisibleTime": "30000", "reviveQid": "2",
                                           "startOffsetInfo": "0 1 10", "msgOffsetInfo": "0 1 10,11,12"})
    stream = activity.receive_message(s, receive_request(), 30_000)
    assert (await stream.__anext__()).status.code == Code.OK
    taken = (await stream.__anext__()).message.system_properties
    await stream.aclose()
    await until(lambda: [c.code for c in fake.seen].count(200053) == 2, "the two nacks", 5)
    changes = [c for c in fake.seen if c.code == 200053]
    assert {c.ext["offset"] for c in changes} == {"11", "12"} and taken.queue_offset == 10
    assert {c.ext["invisibleTime"] for c in changes} == {"1000"}
