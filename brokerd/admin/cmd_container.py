"""Broker container commands: addBroker and removeBroker (RocketMQ 5's tools/command/container: ADD_BROKER 902,
REMOVE_BROKER 903 at the container's admin address) and listBrokers (ours: LIST_BROKERS 910)."""

from __future__ import annotations

import orjson

from brokerd.admin.command import Command, Ctx
from brokerd.admin.options import Opt, UsageError

ADD_BROKER, REMOVE_BROKER, LIST_BROKERS = 902, 903, 910


def parse_identity(text: str) -> dict[str, str]:
    """clusterName:brokerName:brokerId (RemoveBrokerSubCommand)."""
    parts = [p.strip() for p in text.split(":")]
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"option -b: expected clusterName:brokerName:brokerId, got {text!r}")
    try:
        bid = int(parts[2])
    except ValueError:
        raise UsageError(f"option -b: brokerId {parts[2]!r} is not a number") from None
    if bid < 0:
        raise UsageError("brokerId can't be negative")
    return {"brokerClusterName": parts[0], "brokerName": parts[1], "brokerId": str(bid)}


async def add_broker(ctx: Ctx) -> None:
    container, path = ctx.req("c"), ctx.req("b")
    await ctx.client.call(container, ADD_BROKER, {"configPath": path}, what=f"add broker {path}")
    ctx.write(f"add broker to {container} success\n")


async def remove_broker(ctx: Ctx) -> None:
    container, ident = ctx.req("c"), parse_identity(ctx.req("b"))
    await ctx.client.call(container, REMOVE_BROKER, ident, what=f"remove broker {ctx.req('b')}")
    ctx.write(f"remove broker from {container} success\n")


async def list_brokers(ctx: Ctx) -> None:
    resp = await ctx.client.call(ctx.req("c"), LIST_BROKERS)
    rows = orjson.loads(resp.body or b"{}").get("brokers", [])
    ctx.write(f"{'#Identity':<40} {'#Addr':<22} {'#Role':<13} {'#Status':<9} #LastError\n")
    for r in rows:
        ctx.write(f"{r['identity']:<40} {r['addr']:<22} {r['role']:<13} {r['status']:<9} {r.get('lastError', '')}\n")


C_OPT = Opt("c", "brokerContainerAddr", True, "Broker container address", required=True)

COMMANDS = (
    Command("addBroker", "Add a broker to specified container.", (
        C_OPT, Opt("b", "brokerConfigPath", True, "Broker config path", required=True)), add_broker),
    Command("removeBroker", "Remove a broker from specified container.", (
        C_OPT, Opt("b", "brokerIdentity", True, "Information to identify a broker: "
                   "clusterName:brokerName:brokerId(dLedgerId for dLedger)", required=True)), remove_broker),
    Command("listBrokers", "List the brokers of a broker container (identity, address, role, status).", (C_OPT,),
            list_brokers),
)
