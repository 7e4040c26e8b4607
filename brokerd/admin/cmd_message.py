"""Producing and reading messages: sendMessage, consumeMessage, printMsg, printMsgByQueue, queryCq, checkMsgSendRT,
sendMsgStatus (RocketMQ's tools/command/message, queue, broker)."""

from __future__ import annotations

import sys
import time

from brokerd.admin import api, messaging
from brokerd.admin.client import AdminClient, AdminError
from brokerd.admin.command import Command, Ctx
from brokerd.admin.formats import jf
from brokerd.admin.formats_msg import consume_queue, print_msg_line, send_result_table
from brokerd.admin.javafmt import TimestampError, java_int, parse_bool, parse_timestamp
from brokerd.admin.messaging import PullResult, SendResult
from brokerd.admin.model import MessageQueue, TopicRoute
from brokerd.admin.options import Opt, UsageError


def timestamp_opt(ctx: Ctx, key: str) -> int:
    """A [currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS] option (PrintMessageSubCommand.timestampFormat)."""
    try:
        return parse_timestamp(ctx.req(key), allow_now=False)
    except TimestampError as e:
        raise UsageError(f"option -{key}: {e}") from None


def charset_opt(ctx: Ctx, key: str = "c") -> str:
    name = ctx.get(key) or "UTF-8"
    try:
        "".encode(name)
    except LookupError:
        raise UsageError(f"option -{key}: unknown charset {name}") from None
    return name


def master_addr(route: TopicRoute, mq: MessageQueue) -> str:
    b = route.broker(mq.broker_name)
    addr = b.master() if b else None
    if addr is None:
        raise AdminError(f"The broker[{mq.broker_name}] not exist")
    return addr


async def queue_range(c: AdminClient, route: TopicRoute, mq: MessageQueue, begin: int | None,
                      end: int | None) -> tuple[int, int]:
    addr = master_addr(route, mq)
    lo = await api.min_offset(c, addr, mq) if begin is None else await api.search_offset(c, addr, mq, begin)
    hi = await api.max_offset(c, addr, mq) if end is None else await api.search_offset(c, addr, mq, end)
    return lo, hi


# -- sendMessage ---------------------------------------------------------------------------------------------------

async def send_message(ctx: Ctx) -> None:
    topic, body = ctx.req("t"), ctx.req("p")
    if ctx.has("i") and not ctx.has("b"):
        raise UsageError("Broker name must be set if the queue is chosen!")
    queue_id = java_int(ctx.req("i"), "-i") if ctx.has("i") else -1
    if parse_bool(ctx.get("m")):
        print("mqadmin sendMessage: message trace (-m true) is not recorded by this tool", file=sys.stderr)
    c = ctx.client
    route = await c.route(topic)
    queue = None
    if ctx.has("b") and queue_id > -1:
        name = ctx.req("b")
        qd = route.queue_data(name)
        if qd is None:
            raise AdminError(f"broker {name} is not in the route of topic {topic}")
        if queue_id >= qd.write_queue_nums:
            raise AdminError(f"queue {queue_id} does not exist on broker {name} (writeQueueNums={qd.write_queue_nums})")
        queue = MessageQueue(topic, name, queue_id)
    props = messaging.message_properties(ctx.get("c"), ctx.get("k"))
    result = await messaging.send(c, str(int(time.time() * 1000)), topic, body.encode(), props, route, queue)
    ctx.write(send_result_table(result))


# -- consumeMessage ------------------------------------------------------------------------------------------------

def print_pull(ctx: Ctx, mq: MessageQueue, r: PullResult, offset: int) -> bool:
    """One pull's output in consumeMessage; False when the queue is finished."""
    if r.status == "FOUND":
        ctx.write("Consume ok\n")
        ctx.write("".join(print_msg_line(m, "UTF-8", True) for m in r.messages))
    elif r.status == "NO_MATCHED_MSG":
        ctx.write(f"{mq} no matched msg. status={r.status}, offset={offset}\n")
    else:
        ctx.write(f"{mq} print msg finished. status={r.status}, offset={offset}\n")
        return False
    return True


async def pull_range(ctx: Ctx, route: TopicRoute, mq: MessageQueue, lo: int, hi: int, group: str) -> None:
    offset = lo
    while offset <= hi:
        r = await messaging.pull(ctx.client, route, mq, "*", offset, max(1, min(32, hi - offset + 1)), group)
        offset = r.next_begin_offset
        if not print_pull(ctx, mq, r, offset):
            return


async def consume_message(ctx: Ctx) -> None:
    topic = ctx.req("t")
    count = ctx.int_opt("c", 128)
    if count <= 0:
        raise UsageError("Please input a positive messageNumber!")
    if ctx.has("i") and not ctx.has("b"):
        raise UsageError("Please set the brokerName before queueId!")
    if ctx.has("o") and not ctx.has("i"):
        raise UsageError("Please set queueId before offset!")
    now = int(time.time() * 1000)
    begin = timestamp_opt(ctx, "s") if ctx.has("s") else 0
    end = timestamp_opt(ctx, "e") if ctx.has("e") else 0
    if begin > now:
        raise UsageError("Please set the beginTimestamp before now!")
    if end > now:
        raise UsageError("Please set the endTimestamp before now!")
    if ctx.has("e") and begin > end:
        raise UsageError("Please make sure that the beginTimestamp is less than or equal to the endTimestamp")
    group = ctx.get("g") or messaging.TOOLS_CONSUMER_GROUP
    c = ctx.client
    route = await c.route(topic)
    if ctx.has("i"):
        mq = MessageQueue(topic, ctx.req("b"), java_int(ctx.req("i"), "-i"))
        if route.broker(mq.broker_name) is None:
            raise AdminError(f"broker {mq.broker_name} is not in the route of topic {topic}")
        offset = java_int(ctx.req("o"), "-o") if ctx.has("o") else 0
        lo, hi = await queue_range(c, route, mq, begin or None, end or None)
        if offset > hi:
            ctx.write(f"{mq} no matched msg, offset={offset}\n")
            return
        lo = max(lo, offset)
        if hi - lo > count:
            ctx.write(f"The oldler {count} message will be provided\n")
            hi = lo + count - 1
        await pull_range(ctx, route, mq, lo, hi, group)
        return
    left = count
    for mq in route.subscribe_queues(topic):
        if left == 0:
            return
        lo, hi = await queue_range(c, route, mq, begin or None, end or None)
        if hi - lo > left:
            ctx.write(f"The older {left} message of the {mq.queue_id} queue will be provided\n")
            hi, left = lo + left - 1, 0
        else:
            left = left - (hi - lo) - 1
        await pull_range(ctx, route, mq, lo, hi, group)


# -- printMsg / printMsgByQueue ------------------------------------------------------------------------------------

async def print_msg(ctx: Ctx) -> None:
    topic, charset = ctx.req("t"), charset_opt(ctx)
    sub = ctx.get("s") or "*"
    print_body = not ctx.has("d") or parse_bool(ctx.get("d"))
    begin = timestamp_opt(ctx, "b") if ctx.has("b") else None
    end = timestamp_opt(ctx, "e") if ctx.has("e") else None
    c = ctx.client
    route = await c.route(ctx.get("l") or topic)
    for mq in route.subscribe_queues(topic):
        lo, hi = await queue_range(c, route, mq, begin, end)
        ctx.write(f"minOffset={lo}, maxOffset={hi}, {mq}\n")
        offset = lo
        while offset < hi:
            r = await messaging.pull(c, route, mq, sub, offset, 32)
            offset = r.next_begin_offset
            if r.status == "FOUND":
                ctx.write("".join(print_msg_line(m, charset, print_body) for m in r.messages))
            elif r.status == "NO_MATCHED_MSG":
                ctx.write(f"{mq} no matched msg. status={r.status}, offset={offset}\n")
            else:
                ctx.write(f"{mq} print msg finished. status={r.status}, offset={offset}\n")
                break
        ctx.write("--------------------------------------------------------\n")


async def print_msg_by_queue(ctx: Ctx) -> None:
    topic, name, charset = ctx.req("t"), ctx.req("a"), charset_opt(ctx)
    queue_id = java_int(ctx.req("i"), "-i")
    show, show_body, by_tag = parse_bool(ctx.get("p")), parse_bool(ctx.get("d")), parse_bool(ctx.get("f"))
    sub = ctx.get("s") or "*"
    begin = timestamp_opt(ctx, "b") if ctx.has("b") else None
    end = timestamp_opt(ctx, "e") if ctx.has("e") else None
    c = ctx.client
    route = await c.route(topic)
    if route.broker(name) is None:
        raise AdminError(f"broker {name} is not in the route of topic {topic}")
    mq = MessageQueue(topic, name, queue_id)
    lo, hi = await queue_range(c, route, mq, begin, end)
    counts: dict[str, int] = {}
    offset = lo
    while offset < hi:
        r = await messaging.pull(c, route, mq, sub, offset, 32)
        offset = r.next_begin_offset
        if r.status != "FOUND":
            break
        for m in r.messages:
            if by_tag and m.tags and m.tags.strip():
                counts[m.tags] = counts.get(m.tags, 0) + 1
        if show:
            ctx.write("".join(print_msg_line(m, charset, show_body) for m in r.messages))
    if by_tag:
        for tag, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            ctx.write(jf("Tag: %-30s Count: %s%n", tag, n))


# -- queryCq / checkMsgSendRT / sendMsgStatus ----------------------------------------------------------------------

async def query_cq(ctx: Ctx) -> None:
    topic = ctx.req("t")
    queue_id, index = java_int(ctx.req("q"), "-q"), java_int(ctx.req("i"), "-i")
    count = ctx.int_opt("c", 10)
    c = ctx.client
    addr = ctx.get("b")
    if addr:
        await c.check_broker_addr(addr)
    else:
        route = await c.route(topic)
        addr = route.broker_datas[0].master() if route.broker_datas else None
        if not addr:
            raise AdminError("No topic route data!")
    body = await api.query_consume_queue(c, addr, topic, queue_id, index, count, ctx.get("g"))
    ctx.write(consume_queue(body, index))


async def check_msg_send_rt(ctx: Ctx) -> None:
    topic = ctx.req("t")
    amount, size = ctx.int_opt("a", 100), ctx.int_opt("s", 128)
    c = ctx.client
    route = await c.route(topic)
    queues = route.publish_queues(topic)
    if not queues:
        raise AdminError(f"no writable queue for topic {topic}")
    fmt = "%-32s  %-4s  %-20s    %s%n"
    ctx.write(jf(fmt, "#Broker Name", "#QID", "#Send Result", "#RT"))
    group, body, elapsed = str(int(time.time() * 1000)), b"a" * size, 0
    for i in range(amount):
        mq = queues[i % len(queues)]
        start = time.monotonic()
        try:
            await messaging.send(c, group, topic, body, messaging.message_properties(None, None), route, mq)
            ok = True
        except AdminError:
            ok = False
        rt = int((time.monotonic() - start) * 1000)
        if i:
            elapsed += rt
        ctx.write(jf(fmt, mq.broker_name, mq.queue_id, ok, rt))
    ctx.write(f"Avg RT: {'%.2f' % (elapsed / (amount - 1)) if amount > 1 else 'NaN'}\n")


async def send_msg_status(ctx: Ctx) -> None:
    name = ctx.req("b")
    size, count = ctx.int_opt("s", 128), ctx.int_opt("c", 50)
    c = ctx.client
    route = await c.route(name)

    def body(n: int) -> bytes:
        return b"hello jodie" * ((n + 10) // 11)

    async def one(n: int) -> SendResult:
        return await messaging.send(c, "PID_SMSC", name, body(n), messaging.message_properties(None, None), route)

    await one(16)
    for _ in range(count):
        begin = time.monotonic()
        r = await one(size)
        ctx.write(f"rt={int((time.monotonic() - begin) * 1000)}ms, SendResult={r}\n")


T_REQ = Opt("t", "topic", True, "topic name", required=True)
TS_HELP = "timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]"

COMMANDS = (
    Command("sendMessage", "Send a message.", (
        Opt("t", "topic", True, "Topic name", required=True),
        Opt("p", "body", True, "UTF-8 string format of the message body", required=True),
        Opt("k", "key", True, "Message keys"), Opt("c", "tags", True, "Message tags"),
        Opt("b", "broker", True, "Send message to target broker"), Opt("i", "qid", True, "Send message to target queue"),
        Opt("m", "msgTraceEnable", True, "Message Trace Enable, Default: false")), send_message),
    Command("consumeMessage", "Consume message.", (
        Opt("t", "topic", True, "Topic name", required=True), Opt("b", "brokerName", True, "Broker name"),
        Opt("i", "queueId", True, "Queue Id"), Opt("o", "offset", True, "Queue offset"),
        Opt("g", "consumerGroup", True, "Consumer group name"), Opt("s", "beginTimestamp ", True, "Begin " + TS_HELP),
        Opt("e", "endTimestamp ", True, "End " + TS_HELP),
        Opt("c", "MessageNumber", True, "Number of message to be consumed")), consume_message),
    Command("printMsg", "Print Message Detail.", (
        T_REQ, Opt("c", "charsetName ", True, "CharsetName(eg: UTF-8,GBK)"),
        Opt("s", "subExpression ", True, "Subscribe Expression(eg: TagA || TagB)"),
        Opt("b", "beginTimestamp ", True, "Begin " + TS_HELP), Opt("e", "endTimestamp ", True, "End " + TS_HELP),
        Opt("d", "printBody ", True, "print body"),
        Opt("l", "lmqParentTopic", True, "Lmq parent topic, lmq is used to find the route.")), print_msg),
    Command("printMsgByQueue", "Print Message Detail by queueId.", (
        T_REQ, Opt("a", "brokerName ", True, "broker name", required=True),
        Opt("i", "queueId ", True, "queue id", required=True), Opt("c", "charsetName ", True, "CharsetName(eg: UTF-8,GBK)"),
        Opt("s", "subExpression ", True, "Subscribe Expression(eg: TagA || TagB)"),
        Opt("b", "beginTimestamp ", True, "Begin " + TS_HELP), Opt("e", "endTimestamp ", True, "End " + TS_HELP),
        Opt("p", "print msg", True, "print msg. eg: true | false(default)"),
        Opt("d", "printBody ", True, "print body. eg: true | false(default)"),
        Opt("f", "calculate", True, "calculate by tag. eg: true | false(default)")), print_msg_by_queue),
    Command("queryCq", "Query cq command.", (
        T_REQ, Opt("q", "queue", True, "queue num, ie. 1", required=True),
        Opt("i", "index", True, "start queue index.", required=True), Opt("c", "count", True, "how many."),
        Opt("b", "broker", True, "broker addr."), Opt("g", "consumer", True, "consumer group.")), query_cq),
    Command("checkMsgSendRT", "Check message send response time.", (
        T_REQ, Opt("a", "amount", True, "message amount | default 100"),
        Opt("s", "size", True, "message size | default 128 Byte")), check_msg_send_rt),
    Command("sendMsgStatus", "Send msg to broker.", (
        Opt("b", "brokerName", True, "Broker Name e.g. clusterName_brokerName as DefaultCluster_broker-a",
            required=True),
        Opt("s", "messageSize", True, "Message Size, Default: 128"),
        Opt("c", "count", True, "send message count, Default: 50")), send_msg_status),
)
