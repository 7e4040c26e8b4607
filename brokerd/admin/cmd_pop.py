"""setConsumeMode (RocketMQ's tools/command/consumer/SetConsumeModeSubCommand): SET_MESSAGE_REQUEST_MODE (401) on a
broker (-b) or on every master of a cluster (-c), so RocketMQ 5's remoting push consumer of the group POPs the topic
(or PULLs it again)."""

from __future__ import annotations

import orjson

from brokerd.admin.command import Command, Ctx, one_of
from brokerd.admin.javafmt import java_int
from brokerd.admin.options import Opt, UsageError
from brokerd.remoting.codes import RequestCode

MODES = ("PULL", "POP")


async def set_consume_mode(ctx: Ctx) -> None:
    topic, group, mode = ctx.req("t").strip(), ctx.req("g").strip(), ctx.req("m").strip()
    if mode not in MODES:
        raise UsageError(f"option -m: No enum constant MessageRequestMode.{mode} (PULL or POP)")
    share = java_int(ctx.req("q").strip(), "-q") if ctx.has("q") else 0
    body = orjson.dumps({"topic": topic, "consumerGroup": group, "mode": mode, "popShareQueueNum": share})
    c = ctx.client
    which = one_of(ctx, "b", "c")
    addrs = [await c.check_broker_addr(ctx.req("b").strip())] if which == "b" else await c.masters(ctx.req("c").strip())
    for addr in addrs:
        await c.call(addr, RequestCode.SET_MESSAGE_REQUEST_MODE, {}, body, "setConsumeMode")
        ctx.write(f"set consume mode to {addr} success.\n")
    ctx.write(f"topic[{topic}] group[{group}] consume mode[{mode}] popShareQueueNum[{share}]")


COMMANDS = (
    Command("setConsumeMode", "Set consume message mode. pull/pop etc.", (
        Opt("b", "brokerAddr", True, "create subscription group to which broker"),
        Opt("c", "clusterName", True, "create subscription group to which cluster"),
        Opt("t", "topicName", True, "topic name", required=True),
        Opt("g", "groupName", True, "consumer group name", required=True),
        Opt("m", "mode", True, "consume mode. PULL/POP", required=True),
        Opt("q", "popShareQueueNum", True, "num of queue which share in pop mode")), set_consume_mode),
)
