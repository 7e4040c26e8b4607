"""What the broker's admin request families share: RocketMQ's JSON shapes as fastjson writes them (maps keyed by
`MessageQueue` objects), the answer of a metadata change once it is replicated, and the common refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import orjson

from brokerd.clients import mq_map
from brokerd.processors.tier_reads import answer_read
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import HandlerResult
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.store.message_store import MessageStore

AnswerOrFuture = RemotingCommand | asyncio.Future[RemotingCommand]
__all__ = ["AnswerOrFuture", "dumps", "mq_json", "mq_map", "once_replicated", "reads", "slave_refusal"]


def mq_json(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    """A `MessageQueue` as fastjson writes it (fields in name order)."""
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def reads(store: MessageStore, read: Callable[[], Any], answer: Callable[[Any], Any] | None = None) -> HandlerResult:
    """``tier_reads.answer_read`` for an admin answer built from store reads that may need tier chunks."""
    result = answer_read(store, read) if answer is None else answer_read(store, read, answer)
    return cast(HandlerResult, result)


def once_replicated(broker: BrokerContext, cmd: RemotingCommand) -> AnswerOrFuture:
    """With incremental metadata sync, a topic/group change is answered once its change record is held
    where the broker's sends are (the same put acknowledgement), so a failover cannot lose what was
    acknowledged; a record not replicated in time answers SYSTEM_ERROR (the change stays on this master)."""
    journal = broker.meta.hub.journal
    if journal is None:
        return cmd.response()
    out: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    now = broker.acks.when_acked(journal.last_end, lambda st: out.set_result(_ack_answer(cmd, st)))
    return out if now is None else _ack_answer(cmd, now)


def _ack_answer(cmd: RemotingCommand, status: PutStatus) -> RemotingCommand:
    if status is PutStatus.PUT_OK:
        return cmd.response()
    return cmd.response(ResponseCode.SYSTEM_ERROR, f"metadata change not replicated: {status.name}")


def slave_refusal(broker: BrokerContext, cmd: RemotingCommand, remark: str) -> RemotingCommand | None:
    """SYSTEM_ERROR with ``remark`` on a slave (what only the master of a broker set may change)."""
    return None if broker.is_master() else cmd.response(ResponseCode.SYSTEM_ERROR, remark)
