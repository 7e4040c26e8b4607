"""Container admin port: ADD_BROKER (902), REMOVE_BROKER (903), GET/UPDATE_BROKER_CONFIG (26/25) addressed to a
broker in the container, and LIST_BROKERS (our code 910; body JSON list of broker identities and status)."""

from __future__ import annotations

import orjson

from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Dispatcher, HandlerResult
from container.context import ContainerContext, HostedBroker
from container.errors import ContainerError

LIST_BROKERS = 910


def _identity(cmd: RemotingCommand) -> str:
    return f"{cmd.str_field('brokerClusterName')}:{cmd.str_field('brokerName')}:{cmd.int_field('brokerId', 0)}"


def register_admin(container: ContainerContext, d: Dispatcher) -> None:
    """Register the admin requests on `d` (the admin port's table), acting on `container`."""

    async def add_broker(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        path = cmd.ext.get("configPath", "")
        try:
            b = await container.add_broker(path)
        except ContainerError as e:
            return cmd.response(e.code, str(e))
        return cmd.response(remark=f"broker {b.cfg.identity} started")

    async def remove_broker(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ident = _identity(cmd)
        try:
            await container.remove_broker(ident)
        except ContainerError as e:
            return cmd.response(e.code, str(e))
        return cmd.response()

    def _target(cmd: RemotingCommand) -> HostedBroker | RemotingCommand:
        if not cmd.ext.get("brokerName"):
            if len(container.brokers) == 1:
                return next(iter(container.brokers.values())).broker
            return cmd.response(ResponseCode.SYSTEM_ERROR, "brokerName/brokerClusterName/brokerId required: "
                                f"the container hosts {len(container.brokers)} brokers")
        slot = container.brokers.get(_identity(cmd))
        if slot is None:
            return cmd.response(ResponseCode.BROKER_NOT_EXIST, f"broker {_identity(cmd)} does not exist in this container")
        return slot.broker

    def broker_config(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        t = _target(cmd)
        if isinstance(t, RemotingCommand):
            return t
        handler = t.dispatcher.lookup(cmd.code)  # the broker's own GET/UPDATE_BROKER_CONFIG processor
        assert handler is not None
        return handler(conn, cmd)

    def list_brokers(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        rows = [{"identity": k, "addr": s.broker.cfg.broker_addr, "status": s.broker.health()[0],
                 "role": s.broker.cfg.broker_role, "lastError": s.broker.health()[1]}
                for k, s in sorted(container.brokers.items())]
        return cmd.response(body=orjson.dumps({"brokers": rows}))

    d.register_all({902: add_broker, 903: remove_broker, 26: broker_config, 25: broker_config,
                    LIST_BROKERS: list_brokers})
