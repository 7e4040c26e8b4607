"""The request checks the POP processors share, with RocketMQ's codes and remarks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import PERM_READ, TopicConfig
from brokerd.pop.extra_info import ExtraInfoError
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.pop.service import PopService


def topic_or_error(b: BrokerContext, cmd: RemotingCommand, topic: str, *,
                   action: str = "peeking", ext: dict[str, str] | None = None) -> TopicConfig | RemotingCommand:  # fmt: skip
    tc = b.meta.topics.get(topic)
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!", ext)
    if action and not tc.perm & PERM_READ:
        return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] {action} message is forbidden", ext)
    return tc


def queue_error(cmd: RemotingCommand, conn: Connection, tc: TopicConfig, queue_id: int, code: int, *,
                negative_ok: bool, ext: dict[str, str] | None = None) -> RemotingCommand | None:  # fmt: skip
    if queue_id >= tc.read_queue_nums or (queue_id < 0 and not negative_ok):
        return cmd.response(code, f"queueId[{queue_id}] is illegal, topic:[{tc.topic_name}] topicConfig.readQueueNums:"
                                  f"[{tc.read_queue_nums}] consumer:[{conn.remote_addr[0]}]", ext)
    return None


def group_or_error(b: BrokerContext, cmd: RemotingCommand, group: str) -> SubscriptionGroupConfig | RemotingCommand:
    sg = b.meta.subscriptions.find_or_create(group)
    if sg is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
    if not sg.consume_enable:
        return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    return sg


def serving_error(b: BrokerContext, svc: PopService, cmd: RemotingCommand,
                  ext: dict[str, str] | None = None) -> RemotingCommand | None:  # fmt: skip
    """A slave, a master still rebuilding its POP state, or one whose store refuses writes serves no POP request."""
    if not b.is_master():
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                            f"the broker[{b.cfg.broker_ip1}:{b.cfg.listen_port}] is not the master of {b.cfg.broker_name}:"
                            " POP is served by the master", ext)
    if not svc.active:
        return cmd.response(ResponseCode.SYSTEM_BUSY, "POP state not rebuilt yet, try again", ext)
    if not b.store.is_writeable():  # no checkpoint or ack could be recorded
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "the store is not writeable: POP cannot record", ext)
    return None


def invisible_error(b: BrokerContext, cmd: RemotingCommand, invisible: int,
                    ext: dict[str, str] | None = None) -> RemotingCommand | None:  # fmt: skip
    """An invisible time out of range (GrpcValidator.validateInvisibleTime's remarks)."""
    low, high = b.cfg.pop_min_invisible_time_mills, b.cfg.max_invisible_time_mills
    if invisible < low:
        return cmd.response(ResponseCode.INVALID_PARAMETER, f"the invisibleTime is too small. min is {low}", ext)
    if invisible > high:
        return cmd.response(ResponseCode.INVALID_PARAMETER, f"the invisibleTime is too large. max is {high}", ext)
    return None


def malformed(cmd: RemotingCommand, e: ExtraInfoError, ext: dict[str, str] | None = None) -> RemotingCommand:
    """RocketMQ throws on a checkpoint string it cannot split: the request is answered SYSTEM_ERROR."""
    return cmd.response(ResponseCode.SYSTEM_ERROR, f"IllegalArgumentException: {e}", ext)

