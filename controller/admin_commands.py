"""mqadmin's controller commands, with RocketMQ 5's names, option letters and output: getControllerMetaData,
getSyncStateSet, getBrokerEpoch, electMaster, cleanBrokerMetadata, getControllerConfig, updateControllerConfig.

`COMMANDS` describes them without depending on mqadmin's parser: each option is (short name or None, long name,
takes a value, required, description); `run` gets the given options keyed by short name (long name when there is
none; a flag maps to "") and the name servers of -n / NAMESRV_ADDR, prints what RocketMQ's SubCommand prints, and
raises `CommandFailed` with one line when the command fails."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from brokerd.namesrv.lenient_json import LenientJSONError, loads
from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError, split_addrs

OptionSpec = tuple[str | None, str, bool, bool, str]
Opts = Mapping[str, str]


class CommandFailed(Exception):
    """The command failed: the message is the one line printed."""


@dataclass(frozen=True)
class ControllerCommand:
    name: str
    desc: str
    options: tuple[OptionSpec, ...]
    run: Callable[[Opts, list[str]], Awaitable[None]]


def _guard(fn: Callable[[Opts, list[str]], Awaitable[None]]) -> Callable[[Opts, list[str]], Awaitable[None]]:
    """Connection problems and controller errors become one clear CommandFailed line."""
    async def run(opts: Opts, namesrv: list[str]) -> None:
        try:
            await fn(opts, namesrv)
        except ControllerError as e:
            raise CommandFailed(f"controller error {e.code}: {e.remark}") from None
        except (ConnectionClosed, RemotingTimeout, OSError) as e:
            raise CommandFailed(f"cannot reach {opts.get('a') or 'the server'}: {e}") from None
        except (ValueError, LenientJSONError) as e:
            raise CommandFailed(str(e)) from None
    return run


async def _with_client(addrs: str, fn: Callable[[ControllerClient], Awaitable[None]]) -> None:
    c = ControllerClient(addrs)
    try:
        await fn(c)
    finally:
        await c.close()


async def _interval(opts: Opts, body: Callable[[], Awaitable[None]]) -> None:
    """RocketMQ's -i: repeat every N seconds (3 when -i has no number) until interrupted."""
    await body()
    if "i" not in opts:
        return
    seconds = int(opts["i"]) if opts["i"].strip() else 3
    while True:
        sys.stdout.flush()
        await asyncio.sleep(seconds)  # sleep-ok: the operator's refresh interval
        await body()


# -- name server walks (CommandUtil) -------------------------------------------------------------------------------

async def _cluster_info(namesrv: list[str]) -> dict[str, Any]:
    if not namesrv:
        raise CommandFailed("no name server address: give -n host:port (or set NAMESRV_ADDR)")
    client = RemotingClient()
    try:
        last: Exception | None = None
        for addr in namesrv:
            try:
                resp = await client.invoke(addr, request(RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
            except (ConnectionClosed, RemotingTimeout, OSError) as e:
                last = e
                continue
            if resp.code != RC.SUCCESS or not resp.body:
                raise CommandFailed(f"name server {addr} answered {resp.code}: {resp.remark}")
            info: dict[str, Any] = loads(resp.body)
            return info
        raise CommandFailed(f"cannot reach a name server: {last}")
    finally:
        await client.close()


def _names_of_cluster(info: Mapping[str, Any], cluster: str) -> list[str]:
    names = info.get("clusterAddrTable", {}).get(cluster)
    if not names:
        raise CommandFailed(f"cluster {cluster} not found. Make sure the specified clusterName exists or the name "
                            "server connected to is correct.")
    return sorted(names)


def _addrs_of(info: Mapping[str, Any], names: list[str]) -> list[str]:
    table = info.get("brokerAddrTable", {})
    return [a for n in names for _, a in sorted(table.get(n, {}).get("brokerAddrs", {}).items(), key=lambda kv: int(kv[0]))]


# -- getControllerMetaData -a ----------------------------------------------------------------------------------------

async def get_controller_metadata(opts: Opts, namesrv: list[str]) -> None:
    async def run(c: ControllerClient) -> None:
        meta = await c.metadata(c.addrs[0])
        out = (f"\n#ControllerGroup\t{meta.get('group', '')}\n#ControllerLeaderId\t{meta.get('controllerLeaderId', '')}"
               f"\n#ControllerLeaderAddress\t{meta.get('controllerLeaderAddress', '')}")
        out += "".join(f"\n#Peer:\t{p}" for p in meta.get("peers", "").split(";") if p)
        print(out)
    await _with_client(opts["a"], run)


# -- getSyncStateSet -a (-b | -c) [-i] -----------------------------------------------------------------------------

def _replica(r: Mapping[str, Any]) -> str:
    return (f"ReplicaIdentity{{brokerName='{r['brokerName']}', brokerId={r['brokerId']}, "
            f"brokerAddress='{r['brokerAddress']}', alive={str(r['alive']).lower()}}}")


def sync_state_text(name: str, info: Mapping[str, Any]) -> str:
    ins, outs = info.get("inSyncReplicas", []), info.get("notInSyncReplicas", [])
    text = (f"\n#brokerName\t{name}\n#MasterBrokerId\t{info.get('masterBrokerId')}\n#MasterAddr\t{info.get('masterAddress')}"
            f"\n#MasterEpoch\t{info.get('masterEpoch')}\n#SyncStateSetEpoch\t{info.get('syncStateSetEpoch')}"
            f"\n#SyncStateSetNums\t{len(ins)}\n")
    text += "".join(f"\nInSyncReplica:\t{_replica(r)}\n" for r in ins)
    return text + "".join(f"\nNotInSyncReplica:\t{_replica(r)}\n" for r in outs)


async def get_sync_state_set(opts: Opts, namesrv: list[str]) -> None:
    if "b" in opts:
        names = [n.strip() for n in opts["b"].split(",") if n.strip()]
    elif "c" in opts:
        names = _names_of_cluster(await _cluster_info(namesrv), opts["c"])
    else:
        raise CommandFailed("getSyncStateSet needs -b brokerName or -c clusterName")
    controller = split_addrs(opts["a"])[0]

    async def run(c: ControllerClient) -> None:
        async def once() -> None:
            table = await c.sync_state_data(names, addr=controller)
            out = []
            for name in names:
                out.append(sync_state_text(name, table[name]) if name in table
                           else f"\n#brokerName\t{name}\t(unknown to the controller)\n")
            print("".join(out), end="")
        await _interval(opts, once)
    await _with_client(opts["a"], run)


# -- getBrokerEpoch (-b | -c) [-i], addresses from the name servers (or -a a controller) ---------------------------

async def _epoch_addrs(opts: Opts, namesrv: list[str]) -> list[str]:
    if "a" in opts and "b" in opts and not namesrv:
        c = ControllerClient(opts["a"])
        try:
            table = await c.sync_state_data([opts["b"]], addr=c.addrs[0])
        finally:
            await c.close()
        reps = [r for info in table.values() for r in info.get("inSyncReplicas", []) + info.get("notInSyncReplicas", [])]
        return [r["brokerAddress"] for r in reps if r.get("brokerAddress")]
    info = await _cluster_info(namesrv)
    if "b" in opts:
        if opts["b"] not in info.get("brokerAddrTable", {}):
            raise CommandFailed(f"broker {opts['b']} is not registered with the name server")
        return _addrs_of(info, [opts["b"]])
    return _addrs_of(info, _names_of_cluster(info, opts["c"]))


def epoch_text(addr: str, cache: Mapping[str, Any]) -> str:
    out = (f"\n#clusterName\t{cache.get('clusterName')}\n#brokerName\t{cache.get('brokerName')}\n#brokerAddr\t{addr}"
           f"\n#brokerId\t{cache.get('brokerId')}")
    entries = list(cache.get("epochList") or [])
    for i, e in enumerate(entries):
        end = cache.get("maxOffset", e.get("endOffset")) if i == len(entries) - 1 else e.get("endOffset")
        out += f"\n#Epoch: EpochEntry{{epoch={e.get('epoch')}, startOffset={e.get('startOffset')}, endOffset={end}}}"
    return out + "\n"


async def get_broker_epoch(opts: Opts, namesrv: list[str]) -> None:
    if "b" not in opts and "c" not in opts:
        raise CommandFailed("getBrokerEpoch needs -b brokerName or -c clusterName")

    async def once() -> None:
        addrs = await _epoch_addrs(opts, namesrv)
        if not addrs:
            raise CommandFailed("no matching broker found")
        client = RemotingClient()
        try:
            for addr in addrs:
                resp = await client.invoke(addr, request(RequestCode.GET_BROKER_EPOCH_CACHE), 3.0)
                if resp.code != RC.SUCCESS or not resp.body:
                    raise CommandFailed(f"broker {addr} answered {resp.code}: {resp.remark}")
                print(epoch_text(addr, loads(resp.body)), end="")
        finally:
            await client.close()
    await _interval(opts, once)


# -- electMaster -a -b brokerId -bn brokerName -c ------------------------------------------------------------------

async def elect_master(opts: Opts, namesrv: list[str]) -> None:
    try:
        broker_id = int(opts["b"])
    except ValueError:
        raise CommandFailed(f"option -b: brokerId {opts['b']!r} is not a number") from None

    async def run(c: ControllerClient) -> None:
        resp = await c.elect_master(opts["c"], opts["bn"], broker_id, designate=True)
        if resp.code != RC.SUCCESS:
            raise CommandFailed(f"electMaster failed: {resp.code} {resp.remark}")
        out = (f"\n#ClusterName\t{opts['c']}\n#BrokerName\t{opts['bn']}\n#BrokerMasterAddr\t{resp.ext.get('masterAddress')}"
               f"\n#MasterEpoch\t{resp.ext.get('masterEpoch')}\n#SyncStateSetEpoch\t{resp.ext.get('syncStateSetEpoch')}\n")
        group = loads(resp.body).get("brokerAddrs", {}) if resp.body else {}
        out += "".join(f"\t#Broker\t{k}\t{v}\n" for k, v in sorted(group.items(), key=lambda kv: int(kv[0])))
        print(out, end="")
    await _with_client(opts["a"], run)


# -- cleanBrokerMetadata -a -bn [-b ids] [-c] [-l] -------------------------------------------------------------------

async def clean_broker_metadata(opts: Opts, namesrv: list[str]) -> None:
    ids = opts.get("b")
    if ids is not None and not all(i.strip().isdigit() for i in ids.split(";")):
        raise CommandFailed("please set the option <brokerControllerIdsToClean> according to the format")
    living = "l" in opts
    if not living and not opts.get("c"):
        raise CommandFailed("cleanLivingBroker option is false, clusterName option can not be empty.")

    async def run(c: ControllerClient) -> None:
        resp = await c.clean_broker_data(opts.get("c") or "", opts["bn"], ids, living)
        if resp.code != RC.SUCCESS:
            raise CommandFailed(f"cleanBrokerMetadata failed: {resp.code} {resp.remark}")
        print(f"clear broker {opts['bn']} metadata from controller success! ")
    await _with_client(opts["a"], run)


# -- getControllerConfig -a / updateControllerConfig -a -k -v -----------------------------------------------------------

async def get_controller_config(opts: Opts, namesrv: list[str]) -> None:
    async def run(c: ControllerClient) -> None:
        for addr in c.addrs:
            print(f"============{addr}============")
            for line in (await c.get_config(addr)).splitlines():
                k, _, v = line.partition("=")
                print(f"{k:<50s}=  {v}")
    await _with_client(opts["a"], run)


async def update_controller_config(opts: Opts, namesrv: list[str]) -> None:
    async def run(c: ControllerClient) -> None:
        for addr in c.addrs:
            await c.update_config(addr, {opts["k"]: opts["v"]})
        print(f"update controller config success![{', '.join(c.addrs)}]\n{opts['k']} : {opts['v']}")
    await _with_client(opts["a"], run)


A_REQ: OptionSpec = ("a", "controllerAddress", True, True, "the address of controller")
A_LIST: OptionSpec = ("a", "controllerAddress", True, True,
                      "Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878")
INTERVAL: OptionSpec = ("i", "interval", True, False, "the interval(second) of get info")

COMMANDS: tuple[ControllerCommand, ...] = (
    ControllerCommand("getSyncStateSet", "Fetch syncStateSet for target brokers.", (
        A_REQ, ("c", "clusterName", True, False, "which cluster"),
        ("b", "brokerName", True, False, "which broker to fetch"), INTERVAL), _guard(get_sync_state_set)),
    ControllerCommand("getBrokerEpoch", "Fetch broker epoch entries.", (
        ("c", "clusterName", True, False, "which cluster"), ("b", "brokerName", True, False, "which broker to fetch"),
        INTERVAL, ("a", "controllerAddress", True, False, "a controller, to find -b's replicas without a name server")),
        _guard(get_broker_epoch)),
    ControllerCommand("getControllerMetaData", "Get controller cluster's metadata.", (A_REQ,),
                      _guard(get_controller_metadata)),
    ControllerCommand("getControllerConfig", "Get controller config.", (A_LIST,), _guard(get_controller_config)),
    ControllerCommand("updateControllerConfig", "Update controller config.", (
        A_LIST, ("k", "key", True, True, "config key"), ("v", "value", True, True, "config value")),
        _guard(update_controller_config)),
    ControllerCommand("electMaster", "Re-elect the specified broker as master.", (
        ("a", "controllerAddress", True, True, "The address of controller"),
        ("b", "brokerId", True, True, "The id of the broker which requires to become master"),
        ("bn", "brokerName", True, True, "The broker name of the replicas that require to be manipulated"),
        ("c", "clusterName", True, True, "the clusterName of broker")), _guard(elect_master)),
    ControllerCommand("cleanBrokerMetadata", "Clean metadata of broker on controller.", (
        ("a", "controllerAddress", True, True, "The address of controller"),
        ("b", "brokerControllerIdsToClean", True, False, "The brokerController id list which requires to clean "
         "metadata. eg: 1;2;3, means that clean broker-1, broker-2 and broker-3"),
        ("bn", "brokerName", True, True, "The broker name of the replicas that require to be manipulated"),
        ("c", "clusterName", True, False, "The clusterName of broker"),
        ("l", "cleanLivingBroker", False, False, "Whether clean up living brokers,default value is false")),
        _guard(clean_broker_metadata)),
)
