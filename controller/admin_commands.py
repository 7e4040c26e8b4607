"""mqadmin's controller subcommands (RocketMQ names and option letters).

`register(sub)` adds: getControllerMetaData, getSyncStateSet, getBrokerEpoch, electMaster, cleanBrokerMetadata,
getControllerConfig, updateControllerConfig. Each sets `handler=<async (args) -> exit code>`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from brokerd.remoting.client import RemotingClient
from brokerd.remoting.codes import RequestCode
from brokerd.remoting.codes import ResponseCode as RC
from brokerd.remoting.command import request
from brokerd.remoting.connection import ConnectionClosed, RemotingTimeout
from controller.client import ControllerClient, ControllerError, split_addrs

Handler = Callable[[argparse.Namespace], Awaitable[int]]


def _fail(msg: str) -> int:
    print(f"mqadmin: {msg}", file=sys.stderr)
    return 1


def _guard(fn: Handler) -> Handler:
    """Turn connection problems and controller errors into one clear line and exit code 1."""
    async def run(args: argparse.Namespace) -> int:
        try:
            return await fn(args)
        except ControllerError as e:
            return _fail(f"controller error {e.code}: {e.remark}")
        except (ConnectionClosed, RemotingTimeout, OSError) as e:
            return _fail(f"cannot reach {getattr(args, 'controllerAddress', None) or 'the server'}: {e}")
        except ValueError as e:
            return _fail(str(e))
    return run


async def _with_client(addrs: str, fn: Callable[[ControllerClient], Awaitable[int]]) -> int:
    c = ControllerClient(addrs)
    try:
        return await fn(c)
    finally:
        await c.close()


# -- getControllerMetaData -a ------------------------------------------------------------------------------------

async def get_controller_metadata(args: argparse.Namespace) -> int:
    async def run(c: ControllerClient) -> int:
        meta = await c.metadata(c.addrs[0])
        print(f"ControllerGroup\t{meta.get('group', '')}")
        print(f"ControllerLeaderId\t{meta.get('controllerLeaderId', '')}")
        print(f"ControllerLeaderAddress\t{meta.get('controllerLeaderAddress', '')}")
        print(f"IsLeader\t{meta.get('isLeader', '')}")
        for peer in (p for p in meta.get("peers", "").split(";") if p):
            print(f"#Peer:\t{peer}")
        return 0
    return await _with_client(args.controllerAddress, run)


# -- getSyncStateSet -a (-b | -c [-n]) [-i] --------------------------------------------------------------------

async def _cluster_broker_names(namesrv: str, cluster: str) -> dict[str, dict[int, str]]:
    """brokerName -> {id: addr} for a cluster, from a name server's GET_BROKER_CLUSTER_INFO."""
    from brokerd.namesrv.lenient_json import loads

    client = RemotingClient()
    try:
        resp = await client.invoke(split_addrs(namesrv)[0], request(RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
    finally:
        await client.close()
    if resp.code != RC.SUCCESS or not resp.body:
        raise ValueError(f"name server answered {resp.code}: {resp.remark}")
    info = loads(resp.body)
    names = info.get("clusterAddrTable", {}).get(cluster)
    if not names:
        raise ValueError(f"cluster {cluster!r} is unknown to the name server")
    table = info.get("brokerAddrTable", {})
    return {n: {int(k): v for k, v in table.get(n, {}).get("brokerAddrs", {}).items()} for n in names}


def _print_sync_state(name: str, info: dict[str, Any]) -> None:
    print(f"\n#brokerName\t{name}")
    print(f"#MasterBrokerId\t{info.get('masterBrokerId')}")
    print(f"#MasterAddr\t{info.get('masterAddress')}")
    print(f"#MasterEpoch\t{info.get('masterEpoch')}")
    print(f"#SyncStateSetEpoch\t{info.get('syncStateSetEpoch')}")
    ins, outs = info.get("inSyncReplicas", []), info.get("notInSyncReplicas", [])
    print(f"#SyncStateSetNums\t{len(ins)}")
    for r in ins:
        print(f"\nInSyncReplica:\tReplicaIdentity{{brokerName={r['brokerName']}, brokerId={r['brokerId']}, "
              f"brokerAddress={r['brokerAddress']}, alive={str(r['alive']).lower()}}}")
    print(f"#NotInSyncReplicaNums\t{len(outs)}")
    for r in outs:
        print(f"\nNotInSyncReplica:\tReplicaIdentity{{brokerName={r['brokerName']}, brokerId={r['brokerId']}, "
              f"brokerAddress={r['brokerAddress']}, alive={str(r['alive']).lower()}}}")


async def get_sync_state_set(args: argparse.Namespace) -> int:
    if not args.brokerName and not args.clusterName:
        return _fail("getSyncStateSet needs -b brokerName or -c clusterName")
    if args.brokerName:
        names = [n.strip() for n in args.brokerName.split(",") if n.strip()]
    else:
        if not args.namesrvAddr:
            return _fail("-c clusterName needs a name server: -n namesrvAddr")
        names = sorted(await _cluster_broker_names(args.namesrvAddr, args.clusterName))

    async def run(c: ControllerClient) -> int:
        while True:
            table = await c.sync_state_data(names, addr=c.addrs[0])
            for name in names:
                if name in table:
                    _print_sync_state(name, table[name])
                else:
                    print(f"\n#brokerName\t{name}\t(unknown to the controller)")
            if not args.interval:
                return 0
            await asyncio.sleep(args.interval)  # sleep-ok: the user's refresh interval
    return await _with_client(args.controllerAddress, run)


# -- getBrokerEpoch -b|-c (-n | -a) ---------------------------------------------------------------------------------

async def get_broker_epoch(args: argparse.Namespace) -> int:
    if not args.brokerName and not args.clusterName:
        return _fail("getBrokerEpoch needs -b brokerName or -c clusterName")
    sets: dict[str, dict[int, str]] = {}
    if args.namesrvAddr and args.clusterName:
        sets = await _cluster_broker_names(args.namesrvAddr, args.clusterName)
        if args.brokerName:
            sets = {n: a for n, a in sets.items() if n == args.brokerName}
    elif args.controllerAddress and args.brokerName:
        c = ControllerClient(args.controllerAddress)
        try:
            table = await c.sync_state_data([args.brokerName], addr=c.addrs[0])
        finally:
            await c.close()
        for name, info in table.items():
            reps = info.get("inSyncReplicas", []) + info.get("notInSyncReplicas", [])
            sets[name] = {int(r["brokerId"]): r["brokerAddress"] for r in reps if r.get("brokerAddress")}
    else:
        return _fail("getBrokerEpoch needs -n namesrvAddr with -c, or -a controllerAddress with -b")
    if not sets:
        return _fail("no matching broker found")
    from brokerd.namesrv.lenient_json import loads

    client = RemotingClient()
    try:
        for name, addrs in sorted(sets.items()):
            for bid, addr in sorted(addrs.items()):
                try:
                    resp = await client.invoke(addr, request(RequestCode.GET_BROKER_EPOCH_CACHE), 3.0)
                except (ConnectionClosed, RemotingTimeout, OSError) as e:
                    print(f"\n#clusterName\t{args.clusterName or ''}\n#brokerName\t{name}\n#brokerAddr\t{addr}"
                          f"\n#brokerId\t{bid}\n#error\t{e}")
                    continue
                print(f"\n#clusterName\t{args.clusterName or ''}\n#brokerName\t{name}\n#brokerAddr\t{addr}\n#brokerId\t{bid}")
                if resp.code != RC.SUCCESS or not resp.body:
                    print(f"#error\t{resp.code} {resp.remark}")
                    continue
                cache = loads(resp.body)
                for entry in cache.get("epochList", []):
                    print(f"#Epoch: EpochEntry{{epoch={entry.get('epoch')}, startOffset={entry.get('startOffset')}, "
                          f"endOffset={entry.get('endOffset')}}}")
    finally:
        await client.close()
    return 0


# -- electMaster -a -b -i -c ----------------------------------------------------------------------------------------------

async def elect_master(args: argparse.Namespace) -> int:
    async def run(c: ControllerClient) -> int:
        resp = await c.elect_master(args.clusterName, args.brokerName, args.brokerId, designate=True)
        if resp.code != RC.SUCCESS:
            return _fail(f"electMaster failed: {resp.code} {resp.remark}")
        print(f"\n#clusterName\t{args.clusterName}\n#brokerName\t{args.brokerName}"
              f"\n#masterBrokerId\t{resp.ext.get('masterBrokerId')}\n#masterAddress\t{resp.ext.get('masterAddress')}"
              f"\n#masterEpoch\t{resp.ext.get('masterEpoch')}\n#syncStateSetEpoch\t{resp.ext.get('syncStateSetEpoch')}")
        return 0
    return await _with_client(args.controllerAddress, run)


# -- cleanBrokerMetadata -a -b [-n ids] [-c] [-l] ----------------------------------------------------------------------------

async def clean_broker_metadata(args: argparse.Namespace) -> int:
    async def run(c: ControllerClient) -> int:
        resp = await c.clean_broker_data(args.clusterName or "", args.brokerName, args.brokerControllerIdsToClean,
                                         args.cleanLivingBroker)
        if resp.code != RC.SUCCESS:
            return _fail(f"cleanBrokerMetadata failed: {resp.code} {resp.remark}")
        print(f"clear broker {args.brokerName} metadata from controller success!")
        return 0
    return await _with_client(args.controllerAddress, run)


# -- getControllerConfig -a / updateControllerConfig -a -k -v ---------------------------------------------------------

async def get_controller_config(args: argparse.Namespace) -> int:
    async def run(c: ControllerClient) -> int:
        for addr in c.addrs:
            print(f"============{addr}============")
            for line in (await c.get_config(addr)).splitlines():
                k, _, v = line.partition("=")
                print(f"{k:<50s}=  {v}")
        return 0
    return await _with_client(args.controllerAddress, run)


async def update_controller_config(args: argparse.Namespace) -> int:
    async def run(c: ControllerClient) -> int:
        for addr in c.addrs:
            await c.update_config(addr, {args.key: args.value})
            print(f"update controller config success, {addr}")
        return 0
    return await _with_client(args.controllerAddress, run)


class SubParsers(Protocol):
    """What `register` needs of argparse's subparsers object (`ArgumentParser.add_subparsers()`)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def register(sub: SubParsers) -> None:
    def add(name: str, help_: str, fn: Handler) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(handler=_guard(fn))
        return p

    p = add("getControllerMetaData", "Get controller cluster's metadata", get_controller_metadata)
    p.add_argument("-a", "--controllerAddress", required=True, help="the address of a controller")

    p = add("getSyncStateSet", "Fetch syncStateSet for target brokers", get_sync_state_set)
    p.add_argument("-a", "--controllerAddress", required=True, help="the address of a controller")
    p.add_argument("-b", "--brokerName", help="broker name(s), comma separated")
    p.add_argument("-c", "--clusterName", help="cluster name (needs -n)")
    p.add_argument("-n", "--namesrvAddr", help="name server address, for -c")
    p.add_argument("-i", "--interval", type=int, default=0, help="repeat every N seconds")

    p = add("getBrokerEpoch", "Fetch broker epoch entries", get_broker_epoch)
    p.add_argument("-b", "--brokerName", help="broker name")
    p.add_argument("-c", "--clusterName", help="cluster name")
    p.add_argument("-n", "--namesrvAddr", help="name server address (with -c)")
    p.add_argument("-a", "--controllerAddress", help="controller address (with -b), instead of a name server")

    p = add("electMaster", "Re-elect the specified broker as master", elect_master)
    p.add_argument("-a", "--controllerAddress", required=True, help="controller address(es), ';' separated")
    p.add_argument("-b", "--brokerName", required=True, help="the broker name of the replicas")
    p.add_argument("-i", "--brokerId", required=True, type=int, help="the controller-assigned broker id to elect")
    p.add_argument("-c", "--clusterName", required=True, help="the cluster name")

    p = add("cleanBrokerMetadata", "Clean metadata of broker(s) on the controller", clean_broker_metadata)
    p.add_argument("-a", "--controllerAddress", required=True, help="controller address(es), ';' separated")
    p.add_argument("-b", "--brokerName", required=True, help="the broker name of the replicas")
    p.add_argument("-n", "--brokerControllerIdsToClean", help="broker controller ids to clean, e.g. 1;2;3")
    p.add_argument("-c", "--clusterName", help="the cluster name")
    p.add_argument("-l", "--cleanLivingBroker", action="store_true", help="also clean brokers that are alive")

    p = add("getControllerConfig", "Get controller config", get_controller_config)
    p.add_argument("-a", "--controllerAddress", required=True, help="controller address(es), ';' separated")

    p = add("updateControllerConfig", "Update controller config", update_controller_config)
    p.add_argument("-a", "--controllerAddress", required=True, help="controller address(es), ';' separated")
    p.add_argument("-k", "--key", required=True, help="config key")
    p.add_argument("-v", "--value", required=True, help="config value")
