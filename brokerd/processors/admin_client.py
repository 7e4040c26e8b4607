"""Admin requests the broker carries out with a group's consumers: INVOKE_BROKER_TO_RESET_OFFSET (222, with the
RESET_CONSUMER_CLIENT_OFFSET 220 notice to the online consumers), INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, asking
each consumer with GET_CONSUMER_STATUS_FROM_CLIENT 221), and GET_CONSUMER_RUNNING_INFO (307) /
CONSUME_MESSAGE_DIRECTLY (309), forwarded to one consumer whose answer is passed back.

Reset, as RocketMQ 5's broker does it by default (useServerSideResetOffset): the offsets are computed here (from a
timestamp, or one queue's given offset) and committed on this broker at once (`consumerProgress` shows them, a
consumer that starts or rebalances reads from there). Each queue's reset then stays pending (``ResetGate``) until
the group's next pull of it, which is answered PULL_OFFSET_MOVED with the reset offset (every client moves there
and re-reads; a pull already at the reset offset is served); until then the group's commits of that queue are
ignored (they carry the old position). The online consumers are also told at once with RocketMQ's Broker2Client
notice (220, ResetOffsetBody), except C++ clients: rocketmq-client-cpp 2.x drops the queues on that notice and
never pulls them again, so they get the reset through their next pull only. A pull parked in long polling before
the reset answers as it would have; the consumer's next pull of the queue sees the reset."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from brokerd.clients import V3_1_8_SNAPSHOT, ClientChannel, mq_map, notify_reset_offset
from brokerd.message.ids import decode_offset_msg_id
from brokerd.namesrv.lenient_json import LenientJSONError, loads, object_key
from brokerd.processors.admin_common import dumps, mq_json, reads, slave_refusal
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand, request
from brokerd.remoting.connection import Connection, Handler, HandlerResult, RemotingTimeout

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

CLIENT_TIMEOUT_S: Final = 10.0  # RocketMQ's Broker2Client.callClient waits 10 s
STATUS_TIMEOUT_S: Final = 5.0


class ResetGate:
    """Offsets reset by an admin and not yet pulled: (group, topic, queue id) -> offset. Wraps the pull (11, 361)
    and UPDATE_CONSUMER_OFFSET (15) handlers; costs one empty-dict check per request while nothing is pending."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.pending: dict[tuple[str, str, int], int] = {}

    def assign(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        for q, off in offsets.items():
            self.pending[(group, topic, q)] = off

    @staticmethod
    def _key(cmd: RemotingCommand) -> tuple[str, str, int] | None:
        try:
            return cmd.ext.get("consumerGroup", ""), cmd.ext.get("topic", ""), int(cmd.ext.get("queueId", "-1"))
        except ValueError:
            return None

    def wrap_pull(self, inner: Handler) -> Handler:
        def pull(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            if self.pending:
                key = self._key(cmd)
                offset = self.pending.pop(key, None) if key is not None else None
                if offset is not None and key is not None and cmd.ext.get("queueOffset") != str(offset):
                    st = self.broker.store
                    ext = {"nextBeginOffset": str(offset), "suggestWhichBrokerId": "0",
                           "minOffset": str(st.min_offset_in_queue(key[1], key[2])),
                           "maxOffset": str(st.max_offset_in_queue(key[1], key[2]))}
                    return cmd.response(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_RESET", ext)
            return inner(conn, cmd)

        return pull

    def wrap_commit(self, inner: Handler) -> Handler:
        def commit(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            if self.pending and self._key(cmd) in self.pending:
                return cmd.response(remark="Offset has been previously reset")
            return inner(conn, cmd)

        return commit

    def wraps(self) -> dict[int, Callable[[Handler], Handler]]:
        c = RequestCode
        return {c.PULL_MESSAGE: self.wrap_pull, c.LITE_PULL_MESSAGE: self.wrap_pull,
                c.UPDATE_CONSUMER_OFFSET: self.wrap_commit}


class ClientAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.gate = ResetGate(broker)

    def wraps(self) -> dict[int, Callable[[Handler], Handler]]:
        """The pull and commit handlers see pending resets (``ResetGate``)."""
        return self.gate.wraps()

    def handlers(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
                c.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.consumer_status,
                c.GET_CONSUMER_RUNNING_INFO: self.running_info, c.CONSUME_MESSAGE_DIRECTLY: self.consume_directly}

    # -- reset offset ---------------------------------------------------------------------------------------

    def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        topic, group = cmd.str_field("topic"), cmd.str_field("group")
        timestamp, queue_id = cmd.int_field("timestamp", -1), cmd.int_field("queueId", -1)
        offset = cmd.int_field("offset", -1)
        b = self.broker
        refusal = slave_refusal(b, cmd, "Can not reset offset in slave broker")
        if refusal is not None:
            return refusal
        tc = b.meta.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if b.meta.subscriptions.find(group) is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist")
        force = cmd.bool_field("isForce", True)

        def plan() -> dict[int, int] | RemotingCommand:
            st = b.store
            if queue_id >= 0:
                if offset != -1:
                    mn, mx = st.min_offset_in_queue(topic, queue_id), st.max_offset_in_queue(topic, queue_id)
                    if (mn >= 0 and offset < mn) or offset > mx + 1:
                        return cmd.response(ResponseCode.SYSTEM_ERROR,
                                            f"Target offset {offset} not in consume queue range [{mn}-{mx}]")
                    return {queue_id: offset}
                return {queue_id: self._offset_at(topic, queue_id, timestamp)}
            return {q: self._offset_at(topic, q, timestamp) for q in range(tc.read_queue_nums)}

        def apply(table: dict[int, int] | RemotingCommand) -> RemotingCommand:
            if isinstance(table, RemotingCommand):
                return table
            if not force:  # only backwards: a queue already before the target stays
                current = {q: b.meta.offsets.query_offset(group, topic, q) for q in table}
                table = {q: min(off, current[q]) if current[q] >= 0 else off for q, off in table.items()}
            return self._apply_reset(conn, cmd, topic, group, timestamp, table)

        return reads(b.store, plan, apply)

    def _offset_at(self, topic: str, queue_id: int, timestamp: int) -> int:
        st = self.broker.store
        if timestamp < 0:
            return max(0, st.max_offset_in_queue(topic, queue_id))
        return max(0, st.offset_by_timestamp(topic, queue_id, timestamp))

    def _apply_reset(self, conn: Connection, cmd: RemotingCommand, topic: str, group: str, timestamp: int,
                     table: dict[int, int]) -> RemotingCommand:
        b = self.broker
        b.meta.offsets.commit_offsets(conn.remote_addr[0], group, topic, table)
        self.gate.assign(group, topic, table)
        name = b.cfg.broker_name
        entries = [(mq_json(topic, name, q), off) for q, off in sorted(table.items())]
        info = b.consumers.groups.get(group)
        told = notify_reset_offset(info, topic, group, timestamp, entries) if info is not None else []
        b.log.info("consumer_offset_reset", topic=topic, group=group, timestamp=timestamp, queues=len(table),
                   clients_told=told, remote=conn.remote_addr[0])
        return cmd.response(body=dumps({"offsetTable": mq_map(entries)}))

    # -- calls to consumers ---------------------------------------------------------------------------------

    async def consumer_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GetConsumerStatusBody {"consumerTable": {clientId: {MessageQueue: offset}}} from every online consumer of
        the group (or the one at ``clientAddr``), each asked with GET_CONSUMER_STATUS_FROM_CLIENT."""
        topic, group, only = cmd.str_field("topic"), cmd.str_field("group"), cmd.opt_str("clientAddr")
        info = self.broker.consumers.groups.get(group)
        if info is None or not info.channels:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]")
        table: dict[str, Any] = {}
        for ch in list(info.channels.values()):
            if only and only != ch.client_id:
                continue
            ask = request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group})
            try:
                answer = await ch.conn.request(ask, STATUS_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - one consumer failing does not fail the others
                self.broker.log.warning("consumer_status_failed", group=group, client=ch.client_id, error=repr(e))
                continue
            if answer.code == ResponseCode.SUCCESS and answer.body:
                table[ch.client_id] = _queue_table(answer.body)
        return cmd.response(body=dumps({"consumerTable": {k: mq_map(v) for k, v in table.items()}}))

    def running_info(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        group, client_id = cmd.str_field("consumerGroup"), cmd.str_field("clientId")
        return self._call_consumer(cmd, RequestCode.GET_CONSUMER_RUNNING_INFO, group, client_id, cmd.body)

    def consume_directly(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """The message (by its offset message id) is sent to the consumer, which consumes it and answers how."""
        group, client_id, msg_id = cmd.str_field("consumerGroup"), cmd.str_field("clientId"), cmd.str_field("msgId")
        b = self.broker
        cmd.ext["brokerName"] = b.cfg.broker_name
        topic = cmd.opt_str("topic")
        tc = b.meta.topics.get(topic) if topic else None
        if tc is not None:
            cmd.ext["topicSysFlag"] = str(tc.topic_sys_flag)
        sg = b.meta.subscriptions.find(group)
        if sg is not None:
            cmd.ext["groupSysFlag"] = str(sg.group_sys_flag)
        try:
            phys = decode_offset_msg_id(msg_id)[2]
        except ValueError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"msgId {msg_id} is not an offset message id")

        def forward(raw: bytes | None) -> HandlerResult:
            if raw is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the msgId {msg_id}")
            return self._call_consumer(cmd, RequestCode.CONSUME_MESSAGE_DIRECTLY, group, client_id, bytes(raw))

        return reads(b.store, lambda: b.store.look_message_by_offset(phys), forward)

    def _call_consumer(self, cmd: RemotingCommand, code: int, group: str, client_id: str,
                       body: bytes | None) -> HandlerResult:
        ch = self.broker.consumers.find_channel(group, client_id)
        if ch is None or not ch.conn.is_open:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if ch.version < V3_1_8_SNAPSHOT:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> Version <{ch.version}> too "
                                                           "low to finish, please upgrade it to V3_1_8_SNAPSHOT")
        return self._forward(cmd, code, ch, group, body)

    async def _forward(self, cmd: RemotingCommand, code: int, ch: ClientChannel, group: str,
                       body: bytes | None) -> RemotingCommand:
        ask = request(code, dict(cmd.ext), body)
        try:
            answer = await ch.conn.request(ask, CLIENT_TIMEOUT_S)
        except RemotingTimeout as e:
            return cmd.response(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{ch.client_id}> Timeout: {e}")
        except Exception as e:  # noqa: BLE001 - the consumer went away: answered, not raised
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"invoke consumer <{group}> <{ch.client_id}> Exception: {e!r}")
        return cmd.response(answer.code, answer.remark, dict(answer.ext), answer.body)


def _queue_table(body: bytes) -> list[tuple[dict[str, Any], Any]]:
    """The `messageQueueTable` of a consumer's GetConsumerStatusBody (keyed by MessageQueue objects)."""
    try:
        doc = loads(body)
        raw = doc.get("messageQueueTable") if isinstance(doc, dict) else None
        return [(object_key(k), v) for k, v in raw.items()] if isinstance(raw, dict) else []
    except (LenientJSONError, ValueError):
        return []
