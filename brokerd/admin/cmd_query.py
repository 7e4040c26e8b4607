"""Finding messages: queryMsgById, queryMsgByKey, queryMsgByUniqueKey, queryMsgByOffset, with the consumer tracks
RocketMQ prints under a found message (messageTrackDetail)."""

from __future__ import annotations

import os
import sys

from brokerd.admin import api, messaging
from brokerd.admin.client import AdminClient, AdminError, ServerError
from brokerd.admin.cmd_group import examine_connection, examine_consume_stats, running_info_of
from brokerd.admin.command import Command, Ctx
from brokerd.admin.formats_msg import direct_result_str, is_push, message_detail, message_tracks
from brokerd.admin.javafmt import java_int, parse_bool
from brokerd.admin.messaging import Message
from brokerd.admin.model import MessageQueue
from brokerd.admin.options import Opt, UsageError

BODY_DIR = "/tmp/rocketmq/msgbodys"


def body_file(m: Message, index: int = 0) -> str:
    os.makedirs(BODY_DIR, exist_ok=True)
    path = f"{BODY_DIR}/{m.msg_id}" + (f"_{index}" if index > 0 else "")
    with open(path, "wb") as f:
        f.write(m.ext.body)
    return path


async def _track(c: AdminClient, m: Message, group: str) -> tuple[str, str, str | None]:
    try:
        cc = await examine_connection(c, group)
    except ServerError as e:  # the broker's answer: CONSUMER_NOT_ONLINE is a track of its own
        return group, "NOT_ONLINE" if e.code == api.CONSUMER_NOT_ONLINE else "UNKNOWN", f"CODE:{e.code} DESC:{e.remark}"
    except AdminError as e:
        return group, "UNKNOWN", str(e)
    if cc.consume_type == "CONSUME_ACTIVELY":
        return group, "PULL", None
    if cc.consume_type != "CONSUME_PASSIVELY":
        return group, "UNKNOWN", None
    try:
        stats = await examine_consume_stats(c, group)
    except AdminError as e:
        return group, "NOT_ONLINE", str(e)
    ci = await c.cluster_info()
    store = f"{m.ext.store_host[0]}:{m.ext.store_host[1]}"
    consumed = any(mq.topic == m.ext.topic and mq.queue_id == m.ext.queue_id and o.consumer_offset > m.ext.queue_offset
                   and (b := ci.brokers.get(mq.broker_name)) is not None and b.master() == store
                   for mq, o in stats.offsets.items())
    if not consumed:
        return group, "NOT_CONSUME_YET", None
    sd = cc.subscriptions.get(m.ext.topic)
    tags = set(sd.get("tagsSet") or []) if sd else set()
    if sd is not None and tags and "*" not in tags and m.tags not in tags:
        return group, "CONSUMED_BUT_FILTERED", None
    return group, "CONSUMED", None


async def tracks(c: AdminClient, m: Message) -> list[tuple[str, str, str | None]]:
    """DefaultMQAdminExtImpl.messageTrackDetail: per group consuming the topic, whether it consumed the message."""
    route = await c.route(m.ext.topic)
    addr = next((a for b in route.broker_datas if (a := b.select_addr())), None)
    groups = await api.consumed_by(c, addr, m.ext.topic) if addr else []
    return [await _track(c, m, g) for g in groups]


async def tracks_text(c: AdminClient, m: Message, per_line: bool = True) -> str:
    """The tracks under a message; a failure to learn them is reported, not fatal (RocketMQ prints the trace)."""
    try:
        return message_tracks(await tracks(c, m), per_line)
    except AdminError as e:
        print(f"mqadmin: the consumer tracks of {m.msg_id} are unknown: {e}", file=sys.stderr)
        return ""


async def print_found(ctx: Ctx, m: Message, charset: str | None) -> None:
    ctx.write(message_detail(m, body_file(m), charset))
    ctx.write(await tracks_text(ctx.client, m))


# -- queryMsgById --------------------------------------------------------------------------------------------------

async def _direct(ctx: Ctx, m: Message, group: str, client_id: str) -> None:
    c = ctx.client
    info = await running_info_of(c, group, client_id)
    if not is_push(info):
        ctx.write(f"this {client_id} client is not push consumer ,not support direct push \n")
        return
    store = f"{m.ext.store_host[0]}:{m.ext.store_host[1]}"
    r = await api.consume_message_directly(c, store, group, client_id, m.ext.topic, m.offset_msg_id)
    ctx.write(direct_result_str(r))


async def query_msg_by_id(ctx: Ctx) -> None:
    topic = ctx.req("t")
    ids = [i.strip() for i in ctx.req("i").split(",") if i.strip()]
    charset = ctx.get("f")
    if charset is not None:
        try:
            "".encode(charset)
        except LookupError:
            raise UsageError(f"option -f: unknown charset {charset}") from None
    c = ctx.client
    ci = await c.cluster_info()
    await c.route(topic)
    for msg_id in ids:
        m = await messaging.find_message(c, ci, topic, msg_id)
        if ctx.has("g") and ctx.has("d"):
            if m is None:
                raise AdminError(f"message {msg_id} not found in topic {topic}")
            await _direct(ctx, m, ctx.req("g"), ctx.req("d"))
        elif ctx.has("s"):
            if parse_bool(ctx.get("s")):
                if m is None:
                    ctx.write(f"no message. msgId={msg_id}")
                    continue
                ctx.write(f"prepare resend msg. originalMsgId={msg_id}")
                r = await messaging.send(c, "ReSendMsgById", topic, m.ext.body, dict(m.ext.properties),
                                         await c.route(topic))
                ctx.write(str(r))
        elif m is None:
            ctx.write("\nMessage not found!")
            raise AdminError(f"message {msg_id} not found in topic {topic}")
        else:
            await print_found(ctx, m, charset)


# -- queryMsgByKey / queryMsgByUniqueKey / queryMsgByOffset --------------------------------------------------------

async def query_msg_by_key(ctx: Ctx) -> None:
    topic, key = ctx.req("t"), ctx.req("k")
    begin = java_int(ctx.req("b"), "-b") if ctx.has("b") else 0
    end = java_int(ctx.req("e"), "-e") if ctx.has("e") else 2**63 - 1
    max_num = ctx.int_opt("m", 64)
    c = ctx.client
    route = await c.route(topic)
    msgs = (await messaging.query(c, route, topic, key, max_num, begin, end, unique=False))[:max_num]
    if not msgs:
        raise AdminError(f"query message by key finished, but no message. topic={topic} key={key}")
    ctx.write(f"{'#Message ID':<50} {'#QID':>4} {'#Offset':>40}\n")
    ctx.write("".join(f"{m.msg_id:<50} {m.ext.queue_id:>4} {m.ext.queue_offset:>40}\n" for m in msgs))


async def query_msg_by_unique_key(ctx: Ctx) -> None:
    msg_id, topic = ctx.req("i"), ctx.req("t")
    c = ctx.client
    route = await c.route(topic)
    if ctx.has("g") and ctx.has("d"):
        m = await messaging.find_message(c, await c.cluster_info(), topic, msg_id)
        if m is None:
            raise AdminError(f"message {msg_id} not found in topic {topic}")
        await _direct(ctx, m, ctx.req("g"), ctx.req("d"))
        return
    msgs = await messaging.query(c, route, topic, msg_id, 32, 0, 2**63 - 1, unique=True)
    if not msgs:
        raise AdminError(f"query message by key finished, but no message. topic={topic} key={msg_id}")
    msgs.sort(key=lambda m: m.ext.store_timestamp)
    for i, m in enumerate(msgs if ctx.has("a") else msgs[:1]):
        ctx.write(message_detail(m, body_file(m, i), None, offset_id_label=False))
        ctx.write(await tracks_text(c, m, per_line=False))


async def query_msg_by_offset(ctx: Ctx) -> None:
    topic, name = ctx.req("t"), ctx.req("b")
    queue_id, offset = java_int(ctx.req("i"), "-i"), java_int(ctx.req("o"), "-o")
    charset = ctx.get("f")
    c = ctx.client
    route = await c.route(topic)
    if route.broker(name) is None:
        raise AdminError(f"broker {name} is not in the route of topic {topic}")
    mq = MessageQueue(topic, name, queue_id)
    r = await messaging.pull(c, route, mq, "*", offset, 1)
    if r.status != "FOUND" or not r.messages:
        raise AdminError(f"no message at offset {offset} of {mq}: {r.status}")
    await print_found(ctx, r.messages[0], charset)


COMMANDS = (
    Command("queryMsgById", "Query Message by Id.", (
        Opt("t", "topic", True, "topic name", required=True), Opt("i", "msgId", True, "Message Id", required=True),
        Opt("g", "consumerGroup", True, "consumer group name"), Opt("d", "clientId", True, "The consumer's client id"),
        Opt("s", "sendMessage", True, "resend message"), Opt("u", "unitName", True, "unit name"),
        Opt("f", "bodyFormat", True, "print message body by the specified format"),
        Opt("c", "cluster", True, "Cluster name or lmq parent topic, lmq is used to find the route.")),
        query_msg_by_id),
    Command("queryMsgByKey", "Query Message by Key.", (
        Opt("t", "topic", True, "Topic name", required=True), Opt("k", "msgKey", True, "Message Key", required=True),
        Opt("b", "beginTimestamp", True, "Begin timestamp(ms). default:0, eg:1676730526212"),
        Opt("e", "endTimestamp", True, "End timestamp(ms). default:Long.MAX_VALUE, eg:1676730526212"),
        Opt("m", "maxNum", True, "The maximum number of messages returned by the query, default:64"),
        Opt("c", "cluster", True, "Cluster name or lmq parent topic, lmq is used to find the route.")),
        query_msg_by_key),
    Command("queryMsgByUniqueKey", "Query Message by Unique key.", (
        Opt("i", "msgId", True, "Message Id", required=True), Opt("g", "consumerGroup", True, "consumer group name"),
        Opt("d", "clientId", True, "The consumer's client id"),
        Opt("t", "topic", True, "The topic of msg", required=True),
        Opt("a", "showAll", False, "Print all message, the limit is 32"),
        Opt("c", "cluster", True, "Cluster name or lmq parent topic, lmq is used to find the route.")),
        query_msg_by_unique_key),
    Command("queryMsgByOffset", "Query Message by offset.", (
        Opt("t", "topic", True, "topic name", required=True), Opt("b", "brokerName", True, "Broker Name", required=True),
        Opt("i", "queueId", True, "Queue Id", required=True), Opt("o", "offset", True, "Queue Offset", required=True),
        Opt("f", "bodyFormat", True, "print message body by the specified format")), query_msg_by_offset),
)
