"""A POP consumer over remoting, spelled as RocketMQ's Java client spells it (MQClientAPIImpl.popMessageAsync /
processPopResponse / ackMessageAsync / changeInvisibleTimeAsync): each popped message gets its ``POP_CK`` string
from the answer's header, acks and changes send it back. Shared by the POP tests and ``scripts/bench/pop.py``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from brokerd.message import POP_CK, MessageExt, decode_records, encode_properties
from brokerd.pop.extra_info import (
    POP_ORDER_REVIVE_QUEUE,
    build_extra_info,
    encode_bitset,
    parse_extra_info,
    parse_info,
    real_topic,
    topic_mark,
)
from brokerd.remoting import RemotingClient, RemotingCommand, request

POP, ACK, CHANGE, NOTIFICATION, POLLING_INFO, BATCH_ACK = 200050, 200051, 200053, 200054, 200055, 200151


def send_request(topic: str, body: bytes, qid: int = 0, tags: str = "TagA", keys: str | None = None,
                 props: dict[str, str] | None = None) -> RemotingCommand:  # fmt: skip
    p = {"TAGS": tags, "KEYS": keys or "k", "WAIT": "true", **(props or {})}
    ext = {"a": "pop_producer", "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties(p).decode(), "j": "0", "k": "false",
           "m": "false", "n": "broker-a"}
    return request(310, ext, body)


@dataclass
class Popped:
    code: int
    remark: str | None
    header: dict[str, str]
    msgs: list[MessageExt] = field(default_factory=list)


def handles(resp: RemotingCommand, broker_name: str, order: bool) -> list[MessageExt]:
    """processPopResponse: the messages with their POP_CK (and, FIFO, their delivery count)."""
    h = resp.ext
    msgs = decode_records(resp.body or b"")
    starts = {k: int(v[0]) for k, v in parse_info(h.get("startOffsetInfo"), "start").items()}
    offsets = {k: [int(x) for x in v] for k, v in parse_info(h.get("msgOffsetInfo"), "msg").items()}
    counts = {k: int(v[0]) for k, v in parse_info(h.get("orderCountInfo"), "order").items()}
    pop_time, invisible, rq = int(h["popTime"]), int(h["invisibleTime"]), int(h["reviveQid"])
    sorted_offsets: dict[str, list[int]] = {}
    for m in msgs:
        ck = m.properties.get(POP_CK)
        mark = ck.split(" ")[4] if ck else topic_mark(m.topic)
        sorted_offsets.setdefault(f"{mark}@{m.queue_id}", []).append(m.queue_offset)
    for m in msgs:
        if m.properties.get(POP_CK) is None:
            key = f"{topic_mark(m.topic)}@{m.queue_id}"
            idx = sorted_offsets[key].index(m.queue_offset)
            m.properties[POP_CK] = build_extra_info(starts[key], pop_time, invisible, rq, m.topic, broker_name,
                                                    m.queue_id, offsets[key][idx])
            if order:
                n = counts.get(f"{topic_mark(m.topic)}@qo{m.queue_id}%{m.queue_offset}", counts.get(key))
                if n:
                    m.reconsume_times = n
    return msgs


class PopClient:
    def __init__(self, addr: str, group: str, broker_name: str = "broker-a", client: RemotingClient | None = None):
        self.addr = addr
        self.group = group
        self.broker_name = broker_name
        self.client = client or RemotingClient()

    async def close(self) -> None:
        await self.client.close()

    async def call(self, cmd: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        return await self.client.invoke(self.addr, cmd, timeout)

    async def send(self, topic: str, body: bytes, qid: int = 0, tags: str = "TagA",
                   props: dict[str, str] | None = None) -> RemotingCommand:  # fmt: skip
        return await self.call(send_request(topic, body, qid, tags, props=props))

    async def pop(self, topic: str, n: int = 32, *, qid: int = -1, invisible: int = 60_000, poll_ms: int = 0,
                  order: bool = False, exp: str | None = None, exp_type: str = "TAG", init_mode: int = 0,
                  born: int | None = None) -> Popped:  # fmt: skip
        ext = {"consumerGroup": self.group, "topic": topic, "queueId": str(qid), "maxMsgNums": str(n),
               "invisibleTime": str(invisible), "pollTime": str(poll_ms),
               "bornTime": str(born if born is not None else int(time.time() * 1000)), "initMode": str(init_mode),
               "order": "true" if order else "false"}
        if exp is not None:
            ext.update({"exp": exp, "expType": exp_type})
        resp = await self.call(request(POP, ext), timeout=poll_ms / 1000.0 + 10)
        msgs = handles(resp, self.broker_name, order) if resp.code == 0 else []
        return Popped(resp.code, resp.remark, dict(resp.ext), msgs)

    def ack_request(self, m: MessageExt, topic: str) -> RemotingCommand:
        ck = m.properties[POP_CK]
        ei = parse_extra_info(ck)
        return request(ACK, {"consumerGroup": self.group, "topic": real_topic(topic, self.group, ei.mark),
                             "queueId": str(ei.queue_id), "offset": str(ei.msg_offset), "extraInfo": ck})

    async def ack(self, m: MessageExt, topic: str) -> RemotingCommand:
        return await self.call(self.ack_request(m, topic))

    async def batch_ack(self, msgs: list[MessageExt], topic: str) -> RemotingCommand:
        """MQClientAPIImpl.batchAckMessageAsync: one BatchAck per (mark, queue, checkpoint, pop time)."""
        acks: dict[tuple[str, int, int, int], dict[str, Any]] = {}
        bits: dict[tuple[str, int, int, int], list[int]] = {}
        for m in msgs:
            ei = parse_extra_info(m.properties[POP_CK])
            k = (ei.mark, ei.queue_id, ei.ck_offset, ei.pop_time)
            acks.setdefault(k, {"c": self.group, "t": topic, "r": ei.mark, "so": ei.ck_offset, "q": ei.queue_id,
                                "rq": ei.revive_qid, "pt": ei.pop_time, "it": ei.invisible_time})
            bits.setdefault(k, []).append(ei.msg_offset - ei.ck_offset)
        body = {"brokerName": self.broker_name, "acks": [{**a, "b": encode_bitset(bits[k])} for k, a in acks.items()]}
        return await self.call(request(BATCH_ACK, {}, orjson.dumps(body)))

    async def change(self, m: MessageExt, topic: str, invisible: int) -> RemotingCommand:
        """CHANGE_MESSAGE_INVISIBLETIME; on success the message's POP_CK becomes the new handle."""
        ck = m.properties[POP_CK]
        ei = parse_extra_info(ck)
        real = real_topic(topic, self.group, ei.mark)
        resp = await self.call(request(CHANGE, {"consumerGroup": self.group, "topic": real, "queueId": str(ei.queue_id),
                                                "offset": str(ei.msg_offset), "extraInfo": ck,
                                                "invisibleTime": str(invisible)}))
        if resp.code == 0:
            h = resp.ext
            m.properties[POP_CK] = build_extra_info(ei.msg_offset, int(h["popTime"]), int(h["invisibleTime"]),
                                                    int(h["reviveQid"]), real, self.broker_name, ei.queue_id,
                                                    ei.msg_offset)
        return resp

    async def notification(self, topic: str, qid: int = -1, poll_ms: int = 0, order: bool = False) -> RemotingCommand:
        return await self.call(request(NOTIFICATION, {
            "consumerGroup": self.group, "topic": topic, "queueId": str(qid), "pollTime": str(poll_ms),
            "bornTime": str(int(time.time() * 1000)), "order": "true" if order else "false"}), poll_ms / 1000 + 10)

    async def polling_info(self, topic: str, qid: int = -1) -> RemotingCommand:
        return await self.call(request(POLLING_INFO, {"consumerGroup": self.group, "topic": topic, "queueId": str(qid)}))


def is_order(m: MessageExt) -> bool:
    return parse_extra_info(m.properties[POP_CK]).revive_qid == POP_ORDER_REVIVE_QUEUE
