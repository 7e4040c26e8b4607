"""Decision and reply types shared by the pure `decide_*` modules, plus the JSON body shapes (spec 6.2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from brokerd.remoting.codes import ResponseCode
from controller.statemachine.apply import ApplyResult
from controller.statemachine.events import BrokerLiveness, Event
from controller.statemachine.image import BrokerSet


@dataclass(frozen=True, slots=True)
class Reply:
    """A controller answer, independent of the wire: header values are strings; body is JSON-able or None."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: dict[str, str] = field(default_factory=dict)
    body: Any = None


ReplyBuilder = Callable[[ApplyResult], Reply]


@dataclass(frozen=True, slots=True)
class Decision:
    """decide(request, image) -> either a final reply (no event) or one event plus how to answer once applied."""

    event: Event | None = None
    reply: Reply | None = None
    build: ReplyBuilder | None = None

    @staticmethod
    def answer(reply: Reply) -> Decision:
        return Decision(reply=reply)

    @staticmethod
    def propose(event: Event, build: ReplyBuilder) -> Decision:
        return Decision(event=event, build=build)


class LivenessView(Protocol):
    """Leader-local soft state about broker heartbeats; read by decide, never by apply."""

    def is_alive(self, broker_name: str, broker_id: int) -> bool: ...

    def liveness(self, broker_name: str, broker_id: int) -> BrokerLiveness: ...


def error(code: int, remark: str) -> Reply:
    return Reply(code=code, remark=remark)


def header(**values: object) -> dict[str, str]:
    """Response header: None values are left out (as fastjson does); booleans as Java prints them."""
    out: dict[str, str] = {}
    for k, v in values.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def sync_state_set_body(bset: BrokerSet) -> dict[str, Any]:
    return {"syncStateSet": sorted(bset.sync_state_set), "syncStateSetEpoch": bset.sync_state_set_epoch}


def member_group_body(bset: BrokerSet) -> dict[str, Any]:
    return {
        "cluster": bset.cluster,
        "brokerName": bset.name,
        "brokerAddrs": {str(bid): e.address for bid, e in sorted(bset.brokers.items())},
    }


def elect_master_body(bset: BrokerSet) -> dict[str, Any]:
    return {"brokerMemberGroup": member_group_body(bset), "syncStateSet": sorted(bset.sync_state_set)}


def master_header(bset: BrokerSet, *, with_sss_epoch: bool = True) -> dict[str, str]:
    return header(
        masterBrokerId=bset.master_broker_id,
        masterAddress=bset.master_address if bset.master_broker_id is not None else None,
        masterEpoch=bset.master_epoch,
        syncStateSetEpoch=bset.sync_state_set_epoch if with_sss_epoch else None,
    )
