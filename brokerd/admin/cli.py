"""`mqadmin`: RocketMQ's admin tool subset for this project (RocketMQ option letters, --help, exit codes).

Exit codes: 0 success, 1 the server answered an error (its code and remark are printed), 2 usage error,
3 cannot connect / timeout.

ACL: ``--accessKey AK --secretKey SK`` (anywhere on the command line) or ``--credentialsFile FILE`` (YAML with
accessKey/secretKey, RocketMQ's conf/tools.yml format; default: $ROCKETMQ_HOME/conf/tools.yml when it exists)
sign every request, as RocketMQ's mqadmin does with its AclClientRPCHook."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from brokerd.acl import AclConfigError, sign_request
from brokerd.acl.plain import load_tools_credentials
from brokerd.remoting import ConnectionClosed, RemotingClient, RemotingCommand, RemotingTimeout, request

Handler = Callable[[argparse.Namespace], Awaitable[int]]


async def call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
               timeout: float = 10.0) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, request(code, ext or {}, body), timeout)
    finally:
        await client.close()


def fail(resp: RemotingCommand) -> int:
    print(f"error: code={resp.code} {resp.remark or ''}".rstrip(), file=sys.stderr)
    return 1


def parse_identity(s: str) -> dict[str, str]:
    parts = s.split(":")
    if len(parts) != 3 or not parts[2].isdigit():
        raise argparse.ArgumentTypeError(f"expected cluster:brokerName:brokerId, got {s!r}")
    return {"brokerClusterName": parts[0], "brokerName": parts[1], "brokerId": parts[2]}


def identity_arg(s: str) -> str:
    parse_identity(s)
    return s


def _target(args: argparse.Namespace) -> dict[str, str]:
    return parse_identity(args.broker) if getattr(args, "broker", None) else {}


async def add_broker(args: argparse.Namespace) -> int:
    resp = await call(args.container, 902, {"configPath": args.config})
    if resp.code:
        return fail(resp)
    print(resp.remark or "add broker success")
    return 0


async def remove_broker(args: argparse.Namespace) -> int:
    resp = await call(args.container, 903, parse_identity(args.broker))
    if resp.code:
        return fail(resp)
    print(f"remove broker {args.broker} success")
    return 0


async def list_brokers(args: argparse.Namespace) -> int:
    resp = await call(args.container, 910)
    if resp.code:
        return fail(resp)
    rows = orjson.loads(resp.body or b"{}").get("brokers", [])
    print(f"{'#Identity':<40} {'#Addr':<22} {'#Role':<13} {'#Status':<9} #LastError")
    for r in rows:
        print(f"{r['identity']:<40} {r['addr']:<22} {r['role']:<13} {r['status']:<9} {r.get('lastError', '')}")
    return 0


async def get_broker_config(args: argparse.Namespace) -> int:
    resp = await call(args.container, 26, _target(args))
    if resp.code:
        return fail(resp)
    sys.stdout.write((resp.body or b"").decode())
    return 0


async def update_broker_config(args: argparse.Namespace) -> int:
    resp = await call(args.container, 25, _target(args), f"{args.key}={args.value}\n".encode())
    if resp.code:
        return fail(resp)
    print(f"update broker config success, {args.key}={args.value}")
    return 0


async def broker_status(args: argparse.Namespace) -> int:
    resp = await call(args.broker_addr, 28)
    if resp.code:
        return fail(resp)
    table = orjson.loads(resp.body or b"{}").get("table", {})
    for k in sorted(table):
        print(f"{k:<32}: {table[k]}")
    return 0


async def update_topic(args: argparse.Namespace) -> int:
    ext = {"topic": args.topic, "readQueueNums": str(args.readQueueNums), "writeQueueNums": str(args.writeQueueNums),
           "perm": str(args.perm), "topicFilterType": "SINGLE_TAG", "order": "false"}
    resp = await call(args.broker_addr, 17, ext)
    if resp.code:
        return fail(resp)
    print(f"create topic to {args.broker_addr} success.")
    return 0


async def topic_route(args: argparse.Namespace) -> int:
    resp = await call(args.namesrv, 105, {"topic": args.topic})
    if resp.code:
        return fail(resp)
    print(orjson.dumps(orjson.loads(resp.body or b"{}"), option=orjson.OPT_INDENT_2).decode())
    return 0


async def cluster_list(args: argparse.Namespace) -> int:
    resp = await call(args.namesrv, 106)
    if resp.code:
        return fail(resp)
    print(orjson.dumps(orjson.loads(resp.body or b"{}"), option=orjson.OPT_INDENT_2).decode())
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mqadmin", description="RocketMQ-compatible admin tool")
    sub = ap.add_subparsers(dest="command", metavar="<command>")
    sub.required = True

    def cmd(name: str, fn: Handler, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(handler=fn)
        return p

    p = cmd("addBroker", add_broker, "Add a broker to a broker container")
    p.add_argument("-c", "--brokerContainerAddr", dest="container", required=True, help="container host:port")
    p.add_argument("-b", "--brokerConfigPath", dest="config", required=True, help="broker config path on the container host")
    p = cmd("removeBroker", remove_broker, "Remove a broker from a broker container")
    p.add_argument("-c", "--brokerContainerAddr", dest="container", required=True)
    p.add_argument("-b", "--brokerIdentity", dest="broker", required=True, type=identity_arg,
                   help="cluster:brokerName:brokerId")
    p = cmd("listBrokers", list_brokers, "List the brokers of a broker container")
    p.add_argument("-c", "--brokerContainerAddr", dest="container", required=True)
    p = cmd("getBrokerConfig", get_broker_config, "Get the config of a broker in a container")
    p.add_argument("-c", "--brokerContainerAddr", dest="container", required=True)
    p.add_argument("-b", "--brokerIdentity", dest="broker", type=identity_arg, help="cluster:brokerName:brokerId")
    p = cmd("updateBrokerConfig", update_broker_config, "Update one config key of a broker in a container")
    p.add_argument("-c", "--brokerContainerAddr", dest="container", required=True)
    p.add_argument("-b", "--brokerIdentity", dest="broker", type=identity_arg, help="cluster:brokerName:brokerId")
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)
    p = cmd("brokerStatus", broker_status, "Fetch a broker's runtime status and counters")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", required=True)
    p = cmd("updateTopic", update_topic, "Create or update a topic on a broker")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6)
    p = cmd("topicRoute", topic_route, "Examine a topic's route info")
    p.add_argument("-n", "--namesrvAddr", dest="namesrv", required=True)
    p.add_argument("-t", "--topic", required=True)
    p = cmd("clusterList", cluster_list, "List cluster info")
    p.add_argument("-n", "--namesrvAddr", dest="namesrv", required=True)
    try:
        from controller.admin_commands import register
    except ImportError:
        pass
    else:
        register(sub)
    return ap


CREDENTIAL_OPTIONS = ("--accessKey", "--secretKey", "--credentialsFile")


def take_credentials(argv: list[str]) -> tuple[list[str], tuple[str, str] | None]:
    """Remove the ACL options from argv (they may follow any command); the account to sign with, if any.
    Raises AclConfigError for an unreadable credentials file, ValueError for a half-given account."""
    rest, opts = [], {}
    it = iter(argv)
    for a in it:
        name, eq, val = a.partition("=")
        if name in CREDENTIAL_OPTIONS:
            opts[name] = val if eq else next(it, "")
        else:
            rest.append(a)
    path = opts.get("--credentialsFile")
    if path is None and "--accessKey" not in opts and os.environ.get("ROCKETMQ_HOME"):
        default = os.path.join(os.environ["ROCKETMQ_HOME"], "conf", "tools.yml")
        path = default if os.path.isfile(default) else None
    ak, sk = load_tools_credentials(path) if path else ("", "")
    ak, sk = opts.get("--accessKey", ak), opts.get("--secretKey", sk)
    if bool(ak) != bool(sk):
        raise ValueError("--accessKey and --secretKey are given together")
    return rest, ((ak, sk) if ak else None)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    try:
        argv, creds = take_credentials(list(sys.argv[1:] if argv is None else argv))
    except (AclConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if creds is not None:
        ak, sk = creds

        def sign(cmd: RemotingCommand) -> None:
            sign_request(cmd, ak, sk)

        RemotingClient.default_before_request = sign
    args = ap.parse_args(argv)
    handler: Any = args.handler
    try:
        return int(asyncio.run(handler(args)))
    except (ConnectionClosed, RemotingTimeout, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
