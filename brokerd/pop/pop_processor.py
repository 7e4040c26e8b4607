"""POP_MESSAGE (200050): PopMessageRequestHeader in, PopMessageResponseHeader + the popped records out, with
long polling (``pollTime``) woken by arrivals, RocketMQ's checks, codes and remarks.

A pop that finds messages at once is answered at the end of the loop turn, once its checkpoints are written with
the turn's other operations (``PopService.wait_written``: the processor is the ``pending.Sink`` writing the
answers, one write per connection); a checkpoint the store refused answers SYSTEM_ERROR and hands nothing out. A
pop woken from its long poll writes its checkpoints at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brokerd.clients import SubscriptionData
from brokerd.filter import FilterError, compile_filter, is_tag_type, not_supported_remark, record_matcher
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.pop.checks import (
    group_or_error,
    invisible_error,
    queue_error,
    serving_error,
    topic_or_error,
)
from brokerd.pop.core import now_ms
from brokerd.pop.extra_info import pop_retry_topic
from brokerd.pop.longpoll import LongPolling
from brokerd.pop.pending import Outbox, put_answer
from brokerd.pop.popping import PopOutcome, PopRequest
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.pop.service import PopService

MAX_MSG_NUMS = 32
TIMEOUT_TOO_MUCH_MS = 500


@dataclass(slots=True)
class PopHeader:
    group: str
    topic: str
    queue_id: int
    max_nums: int
    invisible: int
    poll_time: int
    born_time: int
    init_mode: int
    exp_type: str
    exp: str | None
    order: bool


def parse_pop_header(cmd: RemotingCommand) -> PopHeader:
    born = cmd.int_field("bornTime", 0)
    return PopHeader(cmd.str_field("consumerGroup"), cmd.str_field("topic"), cmd.int_field("queueId"),
                     cmd.int_field("maxMsgNums"), cmd.int_field("invisibleTime"), cmd.int_field("pollTime", 0),
                     born if born > 0 else now_ms(), cmd.int_field("initMode", 0), cmd.ext.get("expType") or "TAG",
                     cmd.opt_str("exp"), cmd.bool_field("order"))


def empty_header(pop_time: int = 0, invisible: int = 0, revive_qid: int = 0, rest: int = 0) -> dict[str, str]:
    """The numeric fields every PopMessageResponseHeader carries (a client decodes them even from a timeout)."""
    return {"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": str(revive_qid),
            "restNum": str(rest)}


class PopMessageProcessor:
    def __init__(self, broker: BrokerContext, service: PopService, polls: LongPolling) -> None:
        self.broker = broker
        self.service = service
        self.polls = polls

    def handlers(self) -> dict[int, object]:
        return {RequestCode.POP_MESSAGE: self.process}

    def process(self, conn: Connection, cmd: RemotingCommand) -> object:
        h = parse_pop_header(cmd)
        sg = self._refusal(conn, cmd, h)
        if isinstance(sg, RemotingCommand):
            sg.ext = empty_header()  # a refusal's header carries the numeric fields too
            return sg
        filters = self._filters(cmd, h)
        if isinstance(filters, RemotingCommand):
            return filters
        self._compensate(conn, cmd, h)
        req = PopRequest(h.group, h.topic, h.queue_id, h.max_nums, h.invisible, h.order or sg.consume_message_orderly,
                         h.init_mode, *filters)
        return self._first(conn, cmd, h, req)

    def _refusal(self, conn: Connection, cmd: RemotingCommand, h: PopHeader) -> SubscriptionGroupConfig | RemotingCommand:
        """RocketMQ's checks in its order: the group's config, or the answer refusing the pop."""
        b = self.broker
        if now_ms() - h.born_time - h.poll_time > TIMEOUT_TOO_MUCH_MS:
            return cmd.response(ResponseCode.POLLING_TIMEOUT,
                                f"the broker[{b.cfg.broker_ip1}] pop message is timeout too much")
        if not b.is_readable():
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.cfg.broker_ip1}] pop message is forbidden")
        if h.max_nums > MAX_MSG_NUMS or h.max_nums < 1:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"the broker[{b.cfg.broker_ip1}] pop message's num is greater than 32" if h.max_nums > 1
                                else f"the broker[{b.cfg.broker_ip1}] pop message's num must be at least 1")
        tc = topic_or_error(b, cmd, h.topic)
        if isinstance(tc, RemotingCommand):
            return tc
        bad = queue_error(cmd, conn, tc, h.queue_id, ResponseCode.INVALID_PARAMETER, negative_ok=True)
        if bad is not None:
            return bad
        sg = group_or_error(b, cmd, h.group)
        if isinstance(sg, RemotingCommand):
            return sg
        return invisible_error(b, cmd, h.invisible) or serving_error(b, self.service, cmd) or sg

    def _compensate(self, conn: Connection, cmd: RemotingCommand, h: PopHeader) -> None:
        """A POP client that sends no heartbeat still shows as the group's consumer (consumerConnection,
        consumerProgress): RocketMQ's compensateBasicConsumerInfo (CONSUME_POP, CLUSTERING) and
        compensateSubscribeData (the topic with the request's filter, its POP retry topic with ``*``)."""
        consumers = self.broker.consumers
        online = consumers.groups.get(h.group)
        if online is not None and conn in online.channels:  # its heartbeats register it
            return
        info = consumers.compensate(conn, h.group, "CONSUME_POP", cmd.language, cmd.version)
        if not conn.attrs.get("pop_compensated"):
            conn.attrs["pop_compensated"] = True
            conn.add_close_callback(consumers.forget_compensated)
        exp, exp_type = (h.exp.strip() or "*", h.exp_type.upper()) if h.exp else ("*", "TAG")
        sub = info.subscriptions.get(h.topic)
        if sub is None or sub.sub_string != exp or sub.expression_type != exp_type:  # new, or another filter
            now = now_ms()
            retry = pop_retry_topic(h.topic, h.group, self.broker.cfg.enable_retry_topic_v2)
            info.subscriptions[h.topic] = SubscriptionData.build(h.topic, exp, now, exp_type)
            info.subscriptions[retry] = SubscriptionData.build(retry, "*", now, exp_type)

    def _filters(self, cmd: RemotingCommand, h: PopHeader) -> tuple[Callable[[int], bool] | None,
                                                                    Callable[[bytes], bool] | None] | RemotingCommand:
        if not h.exp:
            return None, None
        sub = SubscriptionData.build(h.topic, h.exp, 0, h.exp_type)
        if is_tag_type(sub.expression_type):
            return sub.tag_filter(), None
        try:
            expr = compile_filter(sub.expression_type, sub.sub_string)
        except FilterError as e:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"parse the consumer's subscription failed: {e}", empty_header())
        if not self.broker.cfg.enable_property_filter:
            return cmd.response(ResponseCode.SYSTEM_ERROR, not_supported_remark(sub.expression_type), empty_header())
        return None, record_matcher(expr)

    def _first(self, conn: Connection, cmd: RemotingCommand, h: PopHeader, req: PopRequest) -> object:
        out = self.service.pop(req, defer=True)
        if out.found:
            self._more(h, out)
            answer = self._answer(cmd, req, out)
            if not out.deferred:
                return answer
            if not cmd.is_oneway:  # a oneway pop is never answered (its checkpoints are written all the same)
                self.service.wait_written(self, (conn, answer))
            return None
        if h.poll_time <= 0 or now_ms() >= h.born_time + h.poll_time:
            return self._timeout(cmd, h, req, out)
        remaining = h.born_time + h.poll_time - now_ms()
        retry = pop_retry_topic(h.topic, h.group, self.broker.cfg.enable_retry_topic_v2)
        fut = self.polls.park(conn, (h.topic, h.group, h.queue_id), remaining,
                              lambda final: self._run(cmd, h, req, final), retry)
        if fut is None:
            return cmd.response(ResponseCode.POLLING_FULL, "NO_MESSAGE_IN_QUEUE", empty_header(now_ms(), h.invisible))
        return fut

    def _run(self, cmd: RemotingCommand, h: PopHeader, req: PopRequest, final: bool) -> RemotingCommand | None:
        """A woken pop; None when it found nothing and may wait (``pollTime`` left and not ``final``)."""
        bad = serving_error(self.broker, self.service, cmd, empty_header())
        if bad is not None:
            return bad
        out = self.service.pop(req)
        if out.found:
            self._more(h, out)
            return self._answer(cmd, req, out)
        if final or now_ms() >= h.born_time + h.poll_time:
            return self._timeout(cmd, h, req, out)
        return None

    def _more(self, h: PopHeader, out: PopOutcome) -> None:
        if out.rest > 0:  # more are waiting: the next parked request of the group may take them
            self.polls.wake_one(h.topic, h.group, h.queue_id)

    def _timeout(self, cmd: RemotingCommand, h: PopHeader, req: PopRequest, out: PopOutcome) -> RemotingCommand:
        self.broker.stats_manager.on_get(h.group, h.topic, 0, 0, (now_ms() - h.born_time) / 1000.0)
        return cmd.response(ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", self._header(req, out))

    def release(self, items: list[Any], status: PutStatus, out: Outbox) -> None:
        """The checkpoints of these answers are written (or refused: ``status``, and nothing is handed out)."""
        for conn, resp in items:
            if status is not PutStatus.PUT_OK:
                resp = RemotingCommand(ResponseCode.SYSTEM_ERROR, resp.opaque, resp.flag,
                                       remark=f"checkpoint not stored: {status.name}", ext=empty_header())
            put_answer(out, conn, resp)

    def _header(self, req: PopRequest, out: PopOutcome) -> dict[str, str]:
        return empty_header(out.pop_time, req.invisible, out.revive_qid, out.rest) | out.info.header(req.order)

    def _answer(self, cmd: RemotingCommand, req: PopRequest, out: PopOutcome) -> RemotingCommand:
        body = b"".join(out.buffers)
        stats = self.broker.stats
        stats.msgs_out += out.found
        stats.bytes_out += len(body)
        return cmd.response(ResponseCode.SUCCESS, "FOUND", self._header(req, out), body)
