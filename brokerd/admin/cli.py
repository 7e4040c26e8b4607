"""`mqadmin`: RocketMQ's admin tool — its command names, option letters (commons-cli), name server discovery
(-n, else NAMESRV_ADDR) and printed output. `mqadmin` alone lists the commands, `mqadmin help <command>` (or
`<command> -h`) prints a command's options.

Exit codes: 0 success; 1 the command failed (unknown command, missing/malformed option, unknown topic, group or
broker, an error answer, an unreachable server): one line naming what is wrong on stderr, nothing changed.

ACL: `--accessKey AK --secretKey SK` anywhere on the command line (except where the command itself has options of
those names: updateAclConfig, deleteAclConfig) or `--credentialsFile FILE` (conf/tools.yml's format; default
$ROCKETMQ_HOME/conf/tools.yml when it exists) sign every request, as RocketMQ's AclClientRPCHook does."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from brokerd.acl import AclConfigError, sign_request
from brokerd.acl.plain import load_tools_credentials
from brokerd.admin import (
    cmd_acl,
    cmd_broker,
    cmd_container,
    cmd_export,
    cmd_group,
    cmd_message,
    cmd_namesrv,
    cmd_offset,
    cmd_pop,
    cmd_query,
    cmd_topic,
)
from brokerd.admin.client import AdminClient, AdminError, split_namesrv
from brokerd.admin.command import Command, Ctx
from brokerd.admin.options import Opt, Parsed, UsageError, all_opts, help_text, parse
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.command import RemotingCommand
from controller.admin_commands import COMMANDS as CONTROLLER_COMMANDS
from controller.admin_commands import CommandFailed, ControllerCommand

CREDENTIAL_OPTIONS = ("--accessKey", "--secretKey", "--credentialsFile")
# MQAdminStartup.initCommand's order (the commands this tool has), then ours
ORDER = ("updateTopic", "deleteTopic", "updateSubGroup", "setConsumeMode", "deleteSubGroup", "updateBrokerConfig", "updateTopicPerm",
         "topicRoute", "topicStatus", "topicClusterList", "addBroker", "removeBroker", "brokerStatus", "queryMsgById",
         "queryMsgByKey", "queryMsgByUniqueKey", "queryMsgByOffset", "printMsg", "printMsgByQueue", "sendMsgStatus",
         "brokerConsumeStats", "producerConnection", "consumerConnection", "consumerProgress", "consumerStatus",
         "cloneGroupOffset", "clusterList", "topicList", "updateKvConfig", "deleteKvConfig", "wipeWritePerm",
         "addWritePerm", "resetOffsetByTime", "updateOrderConf", "cleanExpiredCQ", "deleteExpiredCommitLog",
         "cleanUnusedTopic", "statsAll", "allocateMQ", "checkMsgSendRT", "clusterRT", "getNamesrvConfig",
         "updateNamesrvConfig", "getBrokerConfig", "getConsumerConfig", "queryCq", "sendMessage", "consumeMessage",
         "updateAclConfig", "deleteAclConfig", "clusterAclConfigVersion", "updateGlobalWhiteAddr", "getAclConfig",
         "exportMetadata", "exportConfigs", "exportMetrics", "haStatus", "getSyncStateSet", "getBrokerEpoch",
         "getControllerMetaData", "getControllerConfig", "updateControllerConfig", "electMaster",
         "cleanBrokerMetadata", "listBrokers")


def _controller_command(cc: ControllerCommand) -> Command:
    async def body(ctx: Ctx) -> None:
        try:
            await cc.run(ctx.opts.values, ctx.client.namesrv)
        except CommandFailed as e:
            raise AdminError(str(e)) from None

    spec = tuple(Opt(short, long, has_arg, desc, required) for short, long, has_arg, required, desc in cc.options)
    return Command(cc.name, cc.desc, spec, body)


def commands() -> list[Command]:
    found: dict[str, Command] = {}
    for family in (cmd_topic, cmd_group, cmd_offset, cmd_message, cmd_query, cmd_broker, cmd_namesrv, cmd_acl,
                   cmd_export, cmd_container, cmd_pop):
        for cmd in family.COMMANDS:
            found[cmd.name] = cmd
    for cc in CONTROLLER_COMMANDS:
        found[cc.name] = _controller_command(cc)
    return sorted(found.values(), key=lambda c: ORDER.index(c.name) if c.name in ORDER else len(ORDER))


def find(name: str, cmds: Sequence[Command]) -> Command | None:
    """MQAdminStartup.findSubCommand: by name or alias, ignoring case."""
    low = name.lower()
    return next((c for c in cmds if c.name.lower() == low or (c.alias or "").lower() == low), None)


def overview(cmds: Sequence[Command]) -> str:
    lines = ["The most commonly used mqadmin commands are:"]
    lines += [f"   {c.name:<35} {c.desc}" for c in cmds]
    return "\n".join(lines) + "\n\nSee 'mqadmin help <command>' for more information on a specific command.\n"


# -- credentials ---------------------------------------------------------------------------------------------------

def _command_word(argv: Sequence[str]) -> str | None:
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in CREDENTIAL_OPTIONS:
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def take_credentials(argv: list[str], own: frozenset[str] = frozenset()) -> tuple[list[str], tuple[str, str] | None]:
    """Remove the ACL options from argv (they may come before or after the command); the account to sign with.
    Options in `own` (long names the command itself declares) stay. Raises AclConfigError for an unreadable
    credentials file, ValueError for a half-given account."""
    rest, opts = [], {}
    it = iter(argv)
    for a in it:
        name, eq, val = a.partition("=")
        if name in CREDENTIAL_OPTIONS and name[2:] not in own:
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


# -- running -------------------------------------------------------------------------------------------------------

@dataclass
class _Prepared:
    cmd: Command
    opts: Parsed
    namesrv: list[str]
    creds: tuple[str, str] | None
    out: TextIO


def _fail(name: str, message: str) -> int:
    print(f"mqadmin {name}: {message}", file=sys.stderr)
    return 1


def _prepare(argv: Sequence[str], out: TextIO) -> _Prepared | int:
    """Everything before a request is sent: the command, its options, the account; an exit code when done."""
    cmds = commands()
    word = _command_word(argv)
    cmd = find(word, cmds) if word else None
    own = frozenset(o.long_name for o in all_opts(cmd.spec)) if cmd else frozenset()
    try:
        argv, creds = take_credentials(list(argv), own)
    except (AclConfigError, ValueError) as e:
        return _fail(word or "", str(e))
    if not argv or argv[0] in ("-h", "--help"):
        out.write(overview(cmds))
        return 0
    if argv[0] == "help" and len(argv) == 2:
        target = find(argv[1], cmds)
        if target is None:
            return _fail("help", f"The sub command {argv[1]} not exist.")
        out.write(help_text(target.name, target.spec))
        return 0
    if cmd is None or argv[0] != word:
        return _fail(argv[0], f"The sub command {argv[0]} not exist. See 'mqadmin' for the list.")
    if "-h" in argv[1:] or "--help" in argv[1:]:
        out.write(help_text(cmd.name, cmd.spec))
        return 0
    try:
        opts = parse(cmd.spec, argv[1:])
    except UsageError as e:
        return _fail(cmd.name, f"{e} (see 'mqadmin help {cmd.name}')")
    if creds is not None:
        ak, sk = creds

        def sign(c: RemotingCommand) -> None:
            sign_request(c, ak, sk)

        RemotingClient.default_before_request = sign  # the controller commands' own clients sign too
    return _Prepared(cmd, opts, split_namesrv(opts.get("n") or os.environ.get("NAMESRV_ADDR")), creds, out)


async def _execute(p: _Prepared) -> int:
    client = AdminClient(p.namesrv, p.creds)
    try:
        await p.cmd.body(Ctx(p.opts, client, p.out))
    except BrokenPipeError:  # the reader went away (mqadmin ... | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AdminError, UsageError, ValueError, OSError) as e:
        p.out.flush()
        return _fail(p.cmd.name, str(e) or type(e).__name__)
    finally:
        await client.close()
    return 0


async def arun_command(argv: Sequence[str], out: TextIO | None = None) -> int:
    """`run_command` on the running event loop."""
    prepared = _prepare(argv, out or sys.stdout)
    return prepared if isinstance(prepared, int) else await _execute(prepared)


def run_command(argv: Sequence[str], out: TextIO | None = None) -> int:
    """Run one mqadmin command line (without the program name); the exit code."""
    prepared = _prepare(argv, out or sys.stdout)
    if isinstance(prepared, int):
        return prepared
    try:
        return asyncio.run(_execute(prepared))
    except KeyboardInterrupt:
        return 130


def _interrupted(signum: int, frame: object) -> None:
    """Ctrl-C / SIGINT ends the tool at once, as RocketMQ's JVM does: what was printed is flushed, exit 130 (a
    repeating command such as clusterRT or statsAll -i runs until then)."""
    try:
        sys.stdout.flush()
    finally:
        os._exit(130)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, _interrupted)
    return run_command(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
