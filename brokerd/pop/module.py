"""One broker's POP consumption, as ``brokerd/broker.py`` builds and drives it: the service, the long-polling
tables, the request processors (``handlers``), the dispatch listener waking parked requests, admin offset resets
reaching POP (``wrap_admin``), and ``stats``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from brokerd.namesrv.lenient_json import LenientJSONError, loads, object_key
from brokerd.pop.ack_processor import AckMessageProcessor
from brokerd.pop.assignment_processor import AssignmentProcessor
from brokerd.pop.invisible_processor import ChangeInvisibleTimeProcessor
from brokerd.pop.longpoll import LongPolling
from brokerd.pop.notification_processor import NotificationProcessor
from brokerd.pop.pop_processor import PopMessageProcessor
from brokerd.pop.service import PopService
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Dispatcher, Handler, HandlerResult

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


class PopModule:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.service = PopService(broker)
        self.polls = LongPolling(lambda: broker.cfg.max_pop_polling_size, lambda: broker.cfg.pop_polling_size)
        self.notify_polls = LongPolling(lambda: broker.cfg.max_pop_polling_size, lambda: broker.cfg.pop_polling_size)
        self.service.core.on_unblock = self._unblocked
        self.processors = (PopMessageProcessor(broker, self.service, self.polls),
                           AckMessageProcessor(broker, self.service), ChangeInvisibleTimeProcessor(broker, self.service),
                           NotificationProcessor(broker, self.service, self.polls, self.notify_polls),
                           AssignmentProcessor(broker))
        self._listening = False

    def handlers(self) -> dict[int, object]:
        table: dict[int, object] = {}
        for p in self.processors:
            table.update(p.handlers())
        return table

    def wrap_admin(self, *dispatchers: Dispatcher) -> None:
        """After the admin handlers are registered: an INVOKE_BROKER_TO_RESET_OFFSET (222) answered SUCCESS also
        moves the group's POP read positions to the offsets it set (RocketMQ's resetPopOffset)."""
        for d in dispatchers:
            inner = d.handlers.get(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET)
            if inner is not None:
                d.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self._reset_wrapper(inner))

    def _reset_wrapper(self, inner: Handler) -> Handler:
        def reset(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            res = inner(conn, cmd)
            if isinstance(res, RemotingCommand):
                self._reset_done(cmd, res)
            elif isinstance(res, asyncio.Future):
                res.add_done_callback(lambda f: self._reset_done(cmd, f.result())
                                      if not f.cancelled() and f.exception() is None else None)
            elif res is not None:
                return self._reset_later(cmd, res)
            return res

        return reset

    async def _reset_later(self, cmd: RemotingCommand, aw: Awaitable[Any]) -> Any:
        res = await aw
        self._reset_done(cmd, res)
        return res

    def _reset_done(self, cmd: RemotingCommand, res: Any) -> None:
        """The reset's answer (ResetOffsetBody: ``{"offsetTable": {MessageQueue: offset}}``) names what it set."""
        if not isinstance(res, RemotingCommand) or res.code != ResponseCode.SUCCESS or not res.body:
            return
        group, name = cmd.ext.get("group") or "", self.broker.cfg.broker_name
        try:
            table = loads(res.body).get("offsetTable") or {}
            resets = [(str(mq["topic"]), int(mq["queueId"]), int(off)) for mq, off in
                      ((object_key(k), v) for k, v in table.items()) if mq.get("brokerName", name) == name]
        except (LenientJSONError, AttributeError, KeyError, TypeError, ValueError) as e:
            self.broker.log.warning("pop_reset_unreadable", group=group, error=str(e))
            return
        for topic, qid, offset in resets:
            self.service.reset((group, topic, qid), offset)

    def start(self) -> None:
        """After the store started: listen for arrivals, serve POP if master."""
        if not self._listening:
            self.broker.store.add_dispatch_listener(self.polls.on_dispatch)
            self.broker.store.add_dispatch_listener(self.notify_polls.on_dispatch)
            self._listening = True
        self.service.on_role()

    def on_role(self) -> None:
        was = self.service.active
        self.service.on_role()
        if was and not self.service.active:  # parked requests of a former master are answered now
            self.polls.wake_all()
            self.notify_polls.wake_all()

    def stop(self) -> None:
        self.service.stop()
        self.polls.wake_all()
        self.notify_polls.wake_all()

    def _unblocked(self, topic: str, group: str) -> None:
        self.polls.wake_one(topic, group, -1, any_queue=True)
        self.notify_polls.wake_one(topic, group, -1, any_queue=True)

    def stats(self) -> dict[str, Any]:
        """The dashboard's and /metrics' POP figures: per group in flight / revive backlog, counters, parked."""
        out = self.service.stats()
        out["parked"] = self.polls.total + self.notify_polls.total
        return out
