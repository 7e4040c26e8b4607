"""resetOffsetByTime (RocketMQ's tools/command/offset): INVOKE_BROKER_TO_RESET_OFFSET on every broker of the topic's
route; when the group is not online, the old way (ResetOffsetByTimeOldCommand): consume stats, the offset at the
timestamp, UPDATE_CONSUMER_OFFSET per queue. With -b and -q one queue is reset to -o or the offset at the time."""

from __future__ import annotations

from brokerd.admin import api, formats
from brokerd.admin.client import AdminClient, AdminError, ServerError
from brokerd.admin.cmd_group import group_exists, group_of
from brokerd.admin.command import Command, Ctx
from brokerd.admin.javafmt import TimestampError, java_int, parse_bool, parse_timestamp
from brokerd.admin.model import MessageQueue, OffsetWrapper, TopicRoute
from brokerd.admin.options import Opt, UsageError


async def ensure_group(c: AdminClient, route: TopicRoute, group: str, topic: str) -> None:
    """Nothing is reset for a group no broker of the route knows (a typo must not create offsets)."""
    addrs = [a for b in route.broker_datas if (a := b.select_addr())]
    if await group_exists(c, addrs, group):
        return
    for addr in addrs:
        if (await api.consume_stats(c, addr, group, topic)).offsets:
            return
    raise AdminError(f"consumer group {group} does not exist on the brokers of topic {topic}")


async def reset_old(c: AdminClient, route: TopicRoute, group: str, topic: str, timestamp: int,
                    force: bool) -> list[tuple[MessageQueue, int, int, int, int]]:
    """DefaultMQAdminExtImpl.resetOffsetByTimestampOld: per queue (broker, consumer, timestamp, reset) offsets."""
    rows = []
    for b in route.broker_datas:
        addr = b.select_addr()
        qd = route.queue_data(b.broker_name)
        if addr is None or qd is None:
            continue
        stats = await api.consume_stats(c, addr, group, None)
        queues = {mq: o for mq, o in stats.offsets.items() if mq.topic == topic}
        if not queues:
            table = await api.topic_stats_of(c, addr, topic)
            for i in range(qd.read_queue_nums):
                mq = MessageQueue(topic, b.broker_name, i)
                t = table.get(mq)
                queues[mq] = OffsetWrapper(t.max_offset if t else 0, t.min_offset if t else 0)
        for mq in sorted(queues):
            o = queues[mq]
            at = await (api.max_offset(c, addr, mq) if timestamp == -1 else api.search_offset(c, addr, mq, timestamp))
            reset = o.consumer_offset
            if force or at <= o.consumer_offset:
                reset = at
                await api.update_consumer_offset(c, addr, group, mq, at)
            rows.append((mq, o.broker_offset, o.consumer_offset, at, reset))
    return rows


async def reset_offset_by_time(ctx: Ctx) -> None:
    group, topic, ts_text = group_of(ctx), ctx.req("t"), ctx.req("s")
    try:
        timestamp = parse_timestamp(ts_text)
    except TimestampError as e:
        raise UsageError(f"option -s: {e}") from None
    force = parse_bool(ctx.get("f")) if ctx.has("f") else True
    queue_id = java_int(ctx.req("q"), "-q") if ctx.has("q") else -1
    offset = java_int(ctx.req("o"), "-o") if ctx.has("o") else None
    cluster = ctx.get("c")
    c = ctx.client
    if ctx.has("b") and queue_id >= 0:
        addr = await c.check_broker_addr(ctx.req("b"))
        name = await c.broker_name_of(addr)
        route = await c.route(topic)
        await ensure_group(c, route, group, topic)
        ctx.write(f"start reset consumer offset by specified, group[{group}], topic[{topic}], queueId[{queue_id}], "
                  f"broker[{addr}], timestamp(string)[{ts_text}], timestamp(long)[{timestamp}]\n")
        mq = MessageQueue(topic, name, queue_id)
        reset = offset if offset is not None else await api.search_offset(c, addr, mq, timestamp)
        ctx.write(f"reset consumer offset to {reset}\n")
        if reset > 0:
            await api.update_consumer_offset(c, addr, group, mq, reset)
            await api.reset_queue_offset(c, addr, topic, group, queue_id, reset)
        return
    route = await c.route(topic)
    await ensure_group(c, route, group, topic)
    offsets: dict[MessageQueue, int] = {}
    for b in route.broker_datas:
        target = b.select_addr()
        if target is None:
            continue
        addr = target
        code, remark, table = await api.reset_offset(c, addr, topic, group, timestamp, force, cpp=cluster is not None)
        if code == api.CONSUMER_NOT_ONLINE:
            rows = await reset_old(c, route, group, topic, timestamp, force)
            ctx.write(f"reset consumer offset by specified consumerGroup[{group}], topic[{topic}], "
                      f"force[{'true' if force else 'false'}], timestamp(string)[{ts_text}], "
                      f"timestamp(long)[{timestamp}]\n")
            ctx.write(formats.rollback_table(rows))
            return
        if code != 0:
            raise ServerError(code, remark, addr, f"reset offset of {group} on {topic}")
        offsets.update(table)
    ctx.write(f"start reset consumer offset by specified, group[{group}], topic[{topic}], "
              f"force[{'true' if force else 'false'}], timestamp(string)[{ts_text}], timestamp(long)[{timestamp}]\n")
    ctx.write(formats.reset_offset_table(offsets))


COMMANDS = (
    Command("resetOffsetByTime", "Reset consumer offset by timestamp(without client restart).", (
        Opt("g", "group", True, "set the consumer group", required=True),
        Opt("t", "topic", True, "set the topic", required=True),
        Opt("s", "timestamp", True, "set the timestamp[now|currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]",
            required=True),
        Opt("f", "force", True, "set the force rollback by timestamp switch[true|false]. Deprecated."),
        Opt("b", "broker", True, "broker addr"), Opt("q", "queue", True, "queue id"),
        Opt("o", "offset", True, "Expect queue offset, not support old version broker"),
        Opt("c", "cluster", True, "Cluster name or lmq parent topic, lmq is used to find the route.")),
        reset_offset_by_time),
)
