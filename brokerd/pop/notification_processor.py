"""NOTIFICATION (200054): whether a POP group has messages to pop on a topic (one queue or all), long-polled like
POP_MESSAGE without popping anything (``hasMsg``, ``pollingFull``); POLLING_INFO (200055): how many POP requests
of the group are parked on the topic's queue (``pollingNum``). As RocketMQ's NotificationProcessor and
PollingInfoProcessor."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from brokerd.metadata.topic import TopicConfig
from brokerd.pop.checks import group_or_error, queue_error, topic_or_error
from brokerd.pop.core import now_ms
from brokerd.pop.extra_info import pop_retry_topic
from brokerd.pop.longpoll import LongPolling
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.pop.service import PopService


class NotificationProcessor:
    def __init__(self, broker: BrokerContext, service: PopService, pop_polls: LongPolling,
                 polls: LongPolling) -> None:  # fmt: skip
        self.broker = broker
        self.service = service
        self.pop_polls = pop_polls  # POP requests (POLLING_INFO counts them)
        self.polls = polls  # parked NOTIFICATION requests
        self.rng = random.Random()

    def handlers(self) -> dict[int, object]:
        return {RequestCode.NOTIFICATION: self.notification, RequestCode.POLLING_INFO: self.polling_info}

    def _checked(self, conn: Connection, cmd: RemotingCommand, group: str, topic: str,
                 qid: int) -> TopicConfig | RemotingCommand:  # fmt: skip
        b = self.broker
        if not b.is_readable():
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.cfg.broker_ip1}] peeking message is forbidden")
        tc = topic_or_error(b, cmd, topic)
        if isinstance(tc, RemotingCommand):
            return tc
        bad = queue_error(cmd, conn, tc, qid, ResponseCode.INVALID_PARAMETER, negative_ok=True)
        if bad is not None:
            return bad
        sg = group_or_error(b, cmd, group)
        return sg if isinstance(sg, RemotingCommand) else tc

    def polling_info(self, conn: Connection, cmd: RemotingCommand) -> object:
        group, topic, qid = cmd.str_field("consumerGroup"), cmd.str_field("topic"), cmd.int_field("queueId")
        tc = self._checked(conn, cmd, group, topic, qid)
        if isinstance(tc, RemotingCommand):
            return tc
        return cmd.response(ext={"pollingNum": str(self.pop_polls.count((topic, group, max(qid, -1))))})

    def notification(self, conn: Connection, cmd: RemotingCommand) -> object:
        group, topic, qid = cmd.str_field("consumerGroup"), cmd.str_field("topic"), cmd.int_field("queueId")
        poll, born = cmd.int_field("pollTime", 0), cmd.int_field("bornTime", 0) or now_ms()
        order = cmd.bool_field("order")
        tc = self._checked(conn, cmd, group, topic, qid)
        if isinstance(tc, RemotingCommand):
            return tc

        def run(final: bool) -> RemotingCommand | None:
            has = self._has_msg(group, tc, max(qid, -1), order)
            if has or final or poll <= 0 or now_ms() >= born + poll:
                return cmd.response(ext={"hasMsg": "true" if has else "false", "pollingFull": "false"})
            return None

        res = run(False)
        if res is not None:
            return res
        retry = pop_retry_topic(topic, group, self.broker.cfg.enable_retry_topic_v2)
        fut = self.polls.park(conn, (topic, group, max(qid, -1)), born + poll - now_ms(), run, retry)
        if fut is None:
            return cmd.response(ext={"hasMsg": "false", "pollingFull": "true"})
        return fut

    def _has_msg(self, group: str, tc: TopicConfig, qid: int, order: bool) -> bool:
        rand = self.rng.randrange(100)
        topics: list[tuple[str, list[int]]] = []
        if not order:
            retry = pop_retry_topic(tc.topic_name, group, self.broker.cfg.enable_retry_topic_v2)
            rtc = self.broker.meta.topics.get(retry)
            if rtc is not None:
                topics.append((retry, list(range(rtc.read_queue_nums))))
        n = tc.read_queue_nums
        topics.append((tc.topic_name, [qid] if qid >= 0 else [(rand + i) % n for i in range(n)]))
        return any(self._queue_has_msg(group, t, q, order) for t, qs in topics for q in qs)

    def _queue_has_msg(self, group: str, topic: str, qid: int, order: bool) -> bool:
        core = self.service.core
        q = (group, topic, qid)
        if order and core.state.blocked(q, now_ms()):
            return False
        qs = core.state.queue(q)
        if qs is not None:
            offset = qs.floor if qs.order else qs.next
        else:
            offset = core.broker.meta.offsets.query_offset(group, topic, qid)
            if offset < 0:
                offset = core.broker.store.min_offset_in_queue(topic, qid)
        return core.broker.store.max_offset_in_queue(topic, qid) > offset
