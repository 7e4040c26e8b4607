"""What mqadmin's message commands do as a client: send like DefaultMQProducer (SEND_MESSAGE_V2 to a writable queue
of the topic's route, retried on another broker), pull like DefaultMQPullConsumer (PULL_MESSAGE, tags filtered on
the client), and look messages up like MQAdminImpl (VIEW_MESSAGE_BY_ID, QUERY_MESSAGE by key and unique key)."""

from __future__ import annotations

import itertools
import random
import time
import zlib
from dataclasses import dataclass

from brokerd.admin.client import AdminClient, AdminError, ServerError
from brokerd.admin.model import ClusterInfo, MessageQueue, TopicRoute
from brokerd.message.constants import COMPRESSED_FLAG, KEY_SEPARATOR, KEYS, TAGS, WAIT
from brokerd.message.ids import decode_offset_msg_id, new_uniq_id
from brokerd.message.model import MessageExt
from brokerd.message.properties import encode_properties
from brokerd.message.record import CorruptRecordError, decode_records

SEND_MESSAGE_V2 = 310
PULL_MESSAGE = 11
QUERY_MESSAGE = 12
VIEW_MESSAGE_BY_ID = 33
UNIQ_KEY = "UNIQ_KEY"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
SEND_STATUS = {0: "SEND_OK", 10: "FLUSH_DISK_TIMEOUT", 12: "FLUSH_SLAVE_TIMEOUT", 11: "SLAVE_NOT_AVAILABLE"}
PULL_STATUS = {0: "FOUND", 19: "NO_NEW_MSG", 20: "NO_MATCHED_MSG", 21: "OFFSET_ILLEGAL"}
_queue_index = itertools.count(random.randrange(1 << 16))


@dataclass
class SendResult:
    status: str
    msg_id: str
    offset_msg_id: str
    mq: MessageQueue
    queue_offset: int

    def __str__(self) -> str:
        return (f"SendResult [sendStatus={self.status}, msgId={self.msg_id}, offsetMsgId={self.offset_msg_id}, "
                f"messageQueue={self.mq}, queueOffset={self.queue_offset}, recallHandle=null]")


@dataclass
class Message:
    """A found message as the Java client holds it (MessageClientExt)."""

    ext: MessageExt
    broker_name: str

    @property
    def msg_id(self) -> str:
        """MessageClientExt.getMsgId: the unique key when the producer set one, else the offset message id."""
        return self.ext.properties.get(UNIQ_KEY) or self.ext.msg_id

    @property
    def offset_msg_id(self) -> str:
        return self.ext.msg_id

    @property
    def tags(self) -> str | None:
        return self.ext.properties.get(TAGS)

    @property
    def keys(self) -> str | None:
        return self.ext.properties.get(KEYS)


@dataclass
class PullResult:
    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[Message]


# -- producing -----------------------------------------------------------------------------------------------------

def message_properties(tags: str | None, keys: str | None) -> dict[str, str]:
    props = {WAIT: "true", UNIQ_KEY: new_uniq_id()}
    if tags:
        props[TAGS] = tags
    if keys:
        props[KEYS] = keys
    return props


async def send(c: AdminClient, group: str, topic: str, body: bytes, props: dict[str, str], route: TopicRoute,
               queue: MessageQueue | None = None, retries: int = 2) -> SendResult:
    """A synchronous send; without `queue` the queues are taken round robin, a failed broker skipped once."""
    queues = [queue] if queue is not None else route.publish_queues(topic)
    if not queues:
        raise AdminError(f"no writable queue for topic {topic}: every broker's write permission is off")
    last: AdminError | None = None
    failed: str | None = None
    for _ in range(1 + (retries if queue is None else 0)):
        candidates = [q for q in queues if q.broker_name != failed] or queues
        mq = candidates[next(_queue_index) % len(candidates)]
        bd = route.broker(mq.broker_name)
        addr = bd.master() if bd else None
        if addr is None:
            raise AdminError(f"broker {mq.broker_name} has no master to send to")
        try:
            return await _send_once(c, addr, group, mq, body, props)
        except AdminError as e:
            last, failed = e, mq.broker_name
    assert last is not None
    raise last


async def _send_once(c: AdminClient, addr: str, group: str, mq: MessageQueue, body: bytes,
                     props: dict[str, str]) -> SendResult:
    sys_flag = 0
    if len(body) > 4096:  # DefaultMQProducer.compressMsgBodyOverHowmuch
        body, sys_flag = zlib.compress(body, 5), COMPRESSED_FLAG
    ext = {"a": group, "b": mq.topic, "c": "TBW102", "d": "4", "e": str(mq.queue_id), "f": str(sys_flag),
           "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties(props).decode(), "j": "0",
           "k": "false", "m": "false", "n": mq.broker_name}
    resp = await c.invoke(addr, SEND_MESSAGE_V2, ext, body)
    if resp.code not in SEND_STATUS:
        raise ServerError(resp.code, resp.remark, addr, f"send to {mq}")
    return SendResult(SEND_STATUS[resp.code], props.get(UNIQ_KEY, ""), resp.ext.get("msgId", ""),
                      MessageQueue(mq.topic, mq.broker_name, int(resp.ext.get("queueId", mq.queue_id))),
                      int(resp.ext.get("queueOffset") or 0))


# -- pulling -------------------------------------------------------------------------------------------------------

def tag_set(expression: str) -> set[str]:
    """SubscriptionData's tagsSet of a TAG expression (`*` or empty: every message)."""
    if not expression or expression.strip() == "*":
        return set()
    return {t.strip() for t in expression.split("||") if t.strip()}


def decode_found(body: bytes | None, broker_name: str) -> list[Message]:
    try:
        exts = decode_records(body or b"")
    except CorruptRecordError as e:
        raise AdminError(f"broker {broker_name} sent messages that cannot be decoded: {e}") from None
    out = []
    for m in exts:
        if m.sys_flag & COMPRESSED_FLAG:
            try:
                m.body = zlib.decompress(m.body)
            except zlib.error:
                pass
        out.append(Message(m, broker_name))
    return out


def read_addr(route: TopicRoute, broker_name: str) -> str:
    """findBrokerAddressInSubscribe(brokerName, MASTER_ID, false): the master, else a replica."""
    bd = route.broker(broker_name)
    addr = bd.select_addr() if bd else None
    if addr is None:
        raise AdminError(f"broker {broker_name} is not in the route of the topic")
    return addr


async def pull(c: AdminClient, route: TopicRoute, mq: MessageQueue, expression: str, offset: int,
               max_nums: int, group: str = TOOLS_CONSUMER_GROUP) -> PullResult:
    addr = read_addr(route, mq.broker_name)
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "queueOffset": str(offset),
           "maxMsgNums": str(max_nums), "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
           "subscription": expression or "*", "subVersion": "0", "expressionType": "TAG"}
    resp = await c.invoke(addr, PULL_MESSAGE, ext, timeout=10.0)
    if resp.code not in PULL_STATUS:
        raise ServerError(resp.code, resp.remark, addr, f"pull {mq}")
    msgs = decode_found(resp.body, mq.broker_name) if resp.code == 0 else []
    tags = tag_set(expression)
    if tags:
        msgs = [m for m in msgs if m.tags in tags]
    status = PULL_STATUS[resp.code]
    if status == "FOUND" and not msgs:
        status = "NO_MATCHED_MSG"
    lo, hi = int(resp.ext.get("minOffset") or 0), int(resp.ext.get("maxOffset") or 0)
    for m in msgs:  # PullAPIWrapper.processPullResult
        m.ext.properties["MIN_OFFSET"] = str(lo)
        m.ext.properties["MAX_OFFSET"] = str(hi)
    return PullResult(status, int(resp.ext.get("nextBeginOffset") or offset), lo, hi, msgs)


# -- looking messages up -------------------------------------------------------------------------------------------

async def view_by_offset_id(c: AdminClient, topic: str, offset_msg_id: str) -> Message | None:
    """VIEW_MESSAGE_BY_ID at the store host the id names; None when the id names no broker we know."""
    try:
        ip, port, phys = decode_offset_msg_id(offset_msg_id)
    except ValueError:
        return None
    addr = f"{ip}:{port}"
    ci = await c.cluster_info()
    name = ci.name_of_addr(addr)
    if name is None:
        return None
    resp = await c.invoke(addr, VIEW_MESSAGE_BY_ID, {"topic": topic, "offset": str(phys)})
    if resp.code != 0:
        return None
    msgs = decode_found(resp.body, name)
    return msgs[0] if msgs else None


async def query(c: AdminClient, route: TopicRoute, topic: str, key: str, max_num: int, begin: int, end: int,
                unique: bool) -> list[Message]:
    """MQAdminImpl.queryMessage: QUERY_MESSAGE on every broker of the route, filtered by key on the client."""
    found: list[Message] = []
    ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin),
           "endTimestamp": str(end)}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    for bd in route.broker_datas:
        addr = bd.select_addr()
        if addr is None:
            continue
        resp = await c.invoke(addr, QUERY_MESSAGE, ext, timeout=15.0)
        if resp.code == 0:
            found += decode_found(resp.body, bd.broker_name)
        elif resp.code != 22:  # QUERY_NOT_FOUND
            raise ServerError(resp.code, resp.remark, addr, f"query {topic} by key {key}")
    if unique:
        out, seen = [], set()
        for m in found:
            if m.msg_id == key and m.offset_msg_id not in seen:
                seen.add(m.offset_msg_id)
                out.append(m)
        return out
    return [m for m in found if key in (m.keys or "").split(KEY_SEPARATOR)]


async def find_message(c: AdminClient, ci: ClusterInfo, topic: str, msg_id: str) -> Message | None:
    """DefaultMQAdminExtImpl.queryMessage: an offset id is viewed at its broker, anything else looked up as a
    unique key in the topic."""
    m = await view_by_offset_id(c, topic, msg_id)
    if m is not None:
        return m
    route = await c.route(topic)
    msgs = await query(c, route, topic, msg_id, 32, 0, 2**63 - 1, unique=True)
    return min(msgs, key=lambda m: m.ext.store_timestamp) if msgs else None
